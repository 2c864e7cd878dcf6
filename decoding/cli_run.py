"""The engineer's habits for `python -m decoding generate`: prompts from a file or stdin (several per run),
--chat (the tokenizer's chat template), --stop strings, --stream, and the timing lines: time to first token,
time per output token, achieved memory bandwidth (gpt-fast's GB/s) and `--compare greedy` (measured
speed-up against plain greedy on the same prompt). Kept out of __main__.py so its structure stays as is.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .api import run, vocab_for
from .models import describe
from .trace import Trace


def add_arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("--prompt-file", default=None,
                   help="prompts to decode one after another: a text file with one prompt per line, a .json "
                        "list of strings, or a .jsonl file with one JSON string per line; - reads stdin "
                        "(all of it, one prompt)")
    g.add_argument("--chat", action="store_true",
                   help="wrap each prompt as a user turn in the tokenizer's chat template")
    g.add_argument("--stop", action="append", default=None,
                   help="stop once the output contains this text (repeatable; kept in the output, like HF "
                        "stop_strings)")
    g.add_argument("--stream", action="store_true", help="print the text as each step accepts tokens")
    g.add_argument("--compare", choices=("greedy",), default=None,
                   help="also run plain greedy on the same prompt and print the measured speed-up")


def read_prompts(args: argparse.Namespace) -> list[str]:
    """--prompt, or --prompt-file (- = stdin): the raw prompts, checked non-empty."""
    if args.prompt_file is None:
        if args.prompt is None:
            raise ValueError("give --prompt TEXT or --prompt-file PATH (- for stdin)")
        return [args.prompt]
    if args.prompt is not None:
        raise ValueError("give either --prompt or --prompt-file, not both")
    if args.prompt_file == "-":
        prompts = [sys.stdin.read()]
    else:
        path = Path(args.prompt_file)
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            prompts = json.loads(text)
        elif path.suffix == ".jsonl":
            prompts = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            prompts = [line for line in text.splitlines() if line.strip()]
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise ValueError(f"{path.name} must hold prompt strings (a JSON list, or one JSON string per line)")
    prompts = [p for p in prompts if p.strip()]
    if not prompts:
        raise ValueError("the prompt file has no prompts")
    return prompts


def with_template(tok, prompts: list[str], chat: bool) -> list:
    """Prompts as run() takes them: text, or with --chat the chat template's token ids."""
    if not chat:
        return prompts
    if not getattr(tok, "chat_template", None):
        raise ValueError("--chat: this tokenizer has no chat template; drop --chat or use a chat model")
    return [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]) for p in prompts]


class _Stopped(Exception):
    pass


def decode(model, tok, prompt, args: argparse.Namespace, drafter, sampling, static) -> Trace:
    """run() with streaming and stop strings (a stop ends the run after the step that produced it)."""
    stops, printed, steps, t0 = args.stop or [], [""], [], time.perf_counter()

    def on_step(step, out):
        steps.append(step)
        text = tok.decode(out)
        if args.stream:
            sys.stdout.write(text[len(printed[0]):] if text.startswith(printed[0]) else "\n" + text)
            sys.stdout.flush()
            printed[0] = text
        if stops and any(s in text for s in stops):
            raise _Stopped

    hook = on_step if (stops or args.stream) else None
    try:
        tr = run(model, tok, prompt, args.method, max_new_tokens=args.max_new_tokens, sampling=sampling,
                 drafter=drafter, static=static, on_step=hook)
    except _Stopped:
        ids = list(prompt) if isinstance(prompt, list) else tok(prompt)["input_ids"]
        tr = Trace(drafter.name, {**drafter.config(), "max_new_tokens": args.max_new_tokens,
                                  "sampling": sampling.to_dict(), "static": static}, ids, steps=steps)
        tr.wall_s = time.perf_counter() - t0
        tr.output_ids = cut_at_stop(tok, [t for s in steps for t in s.accepted], stops)
        extra = sum(len(s.accepted) for s in steps) - len(tr.output_ids)
        last = steps[-1]
        keep = len(last.accepted) - extra
        last.accepted, last.origins = last.accepted[:keep], last.origins[:keep]
        tr.stop_reason, tr.model, tr.text = "stop", describe(model), tok.decode(tr.output_ids)
        tr.vocab = vocab_for(tr, tok)
    if args.stream:
        sys.stdout.write("\n")
    return tr


def cut_at_stop(tok, ids: list[int], stops: list[str]) -> list[int]:
    """The shortest prefix whose text contains a stop string (HF stop_strings keep it in the output)."""
    for k in range(1, len(ids) + 1):
        if any(s in tok.decode(ids[:k]) for s in stops):
            return ids[:k]
    return ids


def timing_line(tr: Trace, model) -> str:
    """TTFT (the prefill step), time per output token after it, and gpt-fast's achieved bandwidth: the
    target's weight bytes read once per forward pass, over the wall time (KV reads not counted)."""
    n, wall_ms = len(tr.output_ids), tr.wall_s * 1e3
    ttft = tr.steps[0].wall_ms if tr.steps else 0.0
    tpot = (wall_ms - ttft) / (n - 1) if n > 1 else 0.0
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    gbs = weights * len(tr.steps) / tr.wall_s / 1e9 if tr.wall_s > 0 else 0.0
    return (f"[timing] time to first token {ttft:.1f} ms, {tpot:.2f} ms per output token after it, "
            f"achieved bandwidth {gbs:.2f} GB/s ({weights / 1e6:.1f} MB of weights x {len(tr.steps)} forward passes "
            f"/ {tr.wall_s:.3f} s, as gpt-fast counts it)")


def compare_line(model, tok, prompt, tr: Trace, sampling, static) -> str:
    """Plain greedy on the same prompt, timed after the method's run (both warm): the measured speed-up."""
    g = run(model, tok, prompt, "greedy", max_new_tokens=tr.config["max_new_tokens"], sampling=sampling,
            trace=False, static=static)
    g_tps = len(g.output_ids) / g.wall_s if g.wall_s > 0 else 0.0
    m_tps = len(tr.output_ids) / tr.wall_s if tr.wall_s > 0 else 0.0
    same = ""
    if sampling.greedy:
        n = len(tr.output_ids)
        same = "; output identical to greedy" if g.output_ids[:n] == tr.output_ids else "; output DIFFERS from greedy"
    return (f"[compare] greedy {g_tps:.1f} tokens/s, {tr.method} {m_tps:.1f} tokens/s: speed-up "
            f"{m_tps / g_tps if g_tps else 0.0:.2f}x (one run each, same prompt, measured here){same}")


def json_path(out: str, index: int, count: int) -> str:
    """OUT for one prompt; OUT-1.json, OUT-2.json ... for several (one trace document each)."""
    if count == 1:
        return out
    p = Path(out)
    return str(p.with_name(f"{p.stem}-{index + 1}{p.suffix or '.json'}"))
