"""The engineer's habits for `python -m decoding generate`: prompts from a file or stdin (several per run),
--chat (the tokenizer's chat template), --stop strings, --stream, and the timing lines: time to first token,
time per output token, achieved memory bandwidth (gpt-fast's GB/s) and `--compare greedy` (measured
speed-up against plain greedy on the same prompt). Kept out of main.py so its structure stays as is.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ..api import run, vocab_for
from ..methods.registry import BASELINE
from ..models import describe
from ..trace import Trace
# the argument checks live in a leaf module (decoding/cli/args.py); the CLIs import them from here as well
from .args import (MAX_ECHO, THREADS, OneLineParser, _checked, _echo, _nonempty, float_in,  # noqa: F401
                       input_dir, input_file, int_in, is_binary, nonempty, one_line, output_dir, output_file, parse_args,
                       program_names, text_path)


def read_text_file(path: str | Path, what: str) -> str:
    """A UTF-8 text file's content; missing, a folder, NUL bytes or not UTF-8 -> ValueError / OSError."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a directory, not a file")
    if not p.exists():
        raise ValueError(f"{what} {str(path)!r} does not exist")
    try:
        raw = p.read_bytes()
    except OSError as e:  # unreadable (permissions, a vanished file): one line that names the file
        raise ValueError(f"cannot read {what} {str(path)!r} ({e.strerror or type(e).__name__})") from None
    try:
        if b"\x00" in raw:
            raise UnicodeDecodeError("utf-8", raw, 0, 1, "NUL byte")
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {p.name!r} is binary, not UTF-8 text") from None


# Errors a malformed document can raise inside a reader or a renderer that does not check it itself.
MALFORMED = (TypeError, AttributeError, KeyError, IndexError, RecursionError, ArithmeticError)


def load_trace(path: str | Path) -> Trace:
    """Trace.load for the CLIs: anything that is not a readable trace is a ValueError (one line) or OSError."""
    try:
        return Trace.load(path)
    except MALFORMED as e:  # last guard: Trace.load validates the document itself
        raise ValueError(not_a_trace(path, e)) from None


def not_a_trace(path: str | Path, e: BaseException) -> str:
    return f"not a DecodeScope trace: {Path(path).name}: {type(e).__name__}: {one_line(e, 300)}"


def add_arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("--prompt-file", default=None, type=nonempty,
                   help="prompts to decode one after another: a text file with one prompt per line, a .json "
                        "list of strings, or a .jsonl file with one JSON string per line (a prompt with line "
                        "breaks needs one of the JSON forms); - reads stdin, split the same way (a JSON list, "
                        "JSON strings one per line, else one prompt per line); each output is labelled "
                        "[i/n] and separated by a line of dashes")
    g.add_argument("--chat", action="store_true",
                   help="wrap each prompt as a user turn in the tokenizer's chat template")
    g.add_argument("--stop", action="append", default=None, type=nonempty,
                   help="stop once the output contains this text (repeatable; kept in the output, like HF "
                        "stop_strings)")
    g.add_argument("--stream", action="store_true", help="print the text as each step accepts tokens")
    g.add_argument("--compare", choices=(BASELINE,), default=None,
                   help="also run plain greedy on the same prompt, interleaved with the method over --repeats "
                        "rounds, and print the median speed-up with its spread (min-max); on a busy machine "
                        "(load above the cores, or far less CPU time than wall time) it says so and prints the "
                        "step counts instead")



def read_prompts(args: argparse.Namespace) -> list[str]:
    """--prompt, or --prompt-file (- = stdin): the raw prompts, checked non-empty."""
    if args.prompt_file is None:
        if args.prompt is None:
            raise ValueError("give --prompt TEXT or --prompt-file PATH (- for stdin)")
        return [args.prompt]
    if args.prompt is not None:
        raise ValueError("give either --prompt or --prompt-file, not both")
    if args.prompt_file == "-":
        text, name = sys.stdin.read(), "stdin"
        if "\x00" in text:
            raise ValueError("the prompt on stdin is binary (NUL bytes), not text")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        kind = ("json" if text.strip().startswith("[") else
                "jsonl" if lines and all(line.startswith('"') for line in lines) else "txt")
    else:
        path = Path(args.prompt_file)
        text, name = read_text_file(path, "prompt file"), path.name
        kind = {".json": "json", ".jsonl": "jsonl"}.get(path.suffix, "txt")
    try:
        if kind == "json":
            prompts = json.loads(text)
        elif kind == "jsonl":
            prompts = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            prompts = [line for line in text.splitlines() if line.strip()]
    except RecursionError:
        raise ValueError(f"{name} is nested too deeply: not a list of prompt strings") from None
    except ValueError as e:  # JSONDecodeError, an integer of 100000 digits
        raise ValueError(f"{name} is not valid JSON ({one_line(e, 200)})") from None
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"{name} must hold prompt strings (a JSON list, or one JSON string per line)")
    if any("\x00" in p for p in prompts):
        raise ValueError(f"prompt file {name!r} holds a NUL character: prompts must be text")
    prompts = [p for p in prompts if p.strip()]
    if not prompts:
        raise ValueError("the prompt file has no prompts")
    return prompts


NO_TEMPLATE = "--chat: this tokenizer has no chat template; drop --chat or use a chat model"


def check_chat_template(name: str) -> None:
    """--chat on a local model folder: refused from its tokenizer files before the weights load (a chat run on
    a model without a template was refused after 27 s of loading). A hub id, or files this cannot read, are
    left to with_template after the load."""
    folder = Path(str(name)).expanduser()
    if not folder.is_dir() or any((folder / f).exists() for f in ("chat_template.jinja", "chat_template.json",
                                                                  "additional_chat_templates")):
        return
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return
    if isinstance(config, dict) and not config.get("chat_template"):
        raise ValueError(NO_TEMPLATE)


def with_template(tok, prompts: list[str], chat: bool) -> list:
    """Prompts as run() takes them: text, or with --chat the chat template's token ids."""
    if not chat:
        return prompts
    if not getattr(tok, "chat_template", None):
        raise ValueError(NO_TEMPLATE)
    return [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]) for p in prompts]


class _Stopped(Exception):
    pass


def display_text(tok, ids: list[int], args: argparse.Namespace) -> str:
    """The text printed for an output: with --chat without the template's special tokens (the turn's end,
    <|im_end|>, is the model's EOS, not part of its answer), as chat front-ends show it; else the decoded
    ids as the trace records them."""
    return tok.decode(ids, skip_special_tokens=True) if getattr(args, "chat", False) else tok.decode(ids)


def decode(model, tok, prompt, args: argparse.Namespace, drafter, sampling, static, on_start=None) -> Trace:
    """run() with streaming and stop strings (a stop ends the run after the step that produced it); on_start()
    once the first step (the prefill) is done: the run has passed its checks."""
    printed = [""]

    def show(new: list[int], out: list[int]) -> None:
        text = display_text(tok, out, args)
        sys.stdout.write(text[len(printed[0]):] if text.startswith(printed[0]) else "\n" + text)
        sys.stdout.flush()
        printed[0] = text

    tr = decode_until(model, tok, prompt, args.method, max_new_tokens=args.max_new_tokens, sampling=sampling,
                      drafter=drafter, static=static, stops=args.stop or [], on_tokens=show if args.stream else None,
                      lp=getattr(args, "lp", False), lp_debug=getattr(args, "lp_debug", False), on_start=on_start)
    if args.stream:
        sys.stdout.write("\n")
    return tr


def decode_until(model, tok, prompt, method: str, *, max_new_tokens: int, sampling, drafter, static=None,
                 stops: list[str] = (), on_tokens=None, lp: bool = False, lp_debug: bool = False,
                 on_start=None) -> Trace:
    """run() that ends once the output text contains a stop string (the output keeps it, cut after the token
    that completes it, as transformers' stop_strings do) and hands on_tokens(new_ids, output_ids) exactly
    the tokens that stay in the output, step by step (streamers); on_start() after the first step."""
    stops, steps, sent, t0 = list(stops or []), [], [0], time.perf_counter()

    def on_step(step, out):
        if on_start is not None and not steps:
            on_start()
        steps.append(step)
        keep = out
        if stops and any(s in tok.decode(out) for s in stops):
            keep = cut_at_stop(tok, list(out), stops)
        if on_tokens is not None and len(keep) > sent[0]:
            on_tokens(list(keep[sent[0]:]), list(keep))
            sent[0] = len(keep)
        if keep is not out:
            raise _Stopped

    hook = on_step if (stops or on_tokens or on_start) else None
    try:
        tr = run(model, tok, prompt, method, max_new_tokens=max_new_tokens, sampling=sampling,
                 drafter=drafter, static=static, on_step=hook, **({"lp": lp, "lp_debug": lp_debug} if lp else {}))
    except _Stopped:
        ids = list(prompt) if isinstance(prompt, list) else tok(prompt)["input_ids"]
        tr = Trace(drafter.name, {**drafter.config(), "max_new_tokens": max_new_tokens,
                                  "sampling": sampling.to_dict(), "static": static}, ids, steps=steps)
        tr.wall_s = time.perf_counter() - t0
        tr.output_ids = cut_at_stop(tok, [t for s in steps for t in s.accepted], stops)
        extra = sum(len(s.accepted) for s in steps) - len(tr.output_ids)
        last = steps[-1]
        keep = len(last.accepted) - extra
        last.accepted, last.origins = last.accepted[:keep], last.origins[:keep]
        tr.stop_reason, tr.model, tr.text = "stop", describe(model), tok.decode(tr.output_ids)
        tr.vocab = vocab_for(tr, tok)
    return tr


def cut_at_stop(tok, ids: list[int], stops: list[str]) -> list[int]:
    """The shortest prefix whose text contains a stop string (HF stop_strings keep it in the output)."""
    for k in range(1, len(ids) + 1):
        if any(s in tok.decode(ids[:k]) for s in stops):
            return ids[:k]
    return ids


def timing_line(tr: Trace, model) -> str:
    """TTFT (the prefill step), time per output token after it, and gpt-fast's achieved bandwidth: the
    target's weight bytes read once per forward pass, over the wall time (KV reads not counted). Weights the
    CPU kernel streams in its own storage count as what it reads (exact Q4_1 / Q8_0 blocks: ~1/6 of fp32)."""
    from ..fast.cpu_gemm import bytes_read
    n, wall_ms = len(tr.output_ids), tr.wall_s * 1e3
    ttft = tr.steps[0].wall_ms if tr.steps else 0.0
    tpot = (wall_ms - ttft) / (n - 1) if n > 1 else 0.0
    weights = bytes_read(model)
    gbs = weights * len(tr.steps) / tr.wall_s / 1e9 if tr.wall_s > 0 else 0.0
    return (f"[timing] time to first token {ttft:.1f} ms, {tpot:.2f} ms per output token after it, "
            f"achieved bandwidth {gbs:.2f} GB/s ({weights / 1e6:.1f} MB of weights x {len(tr.steps)} forward passes "
            f"/ {tr.wall_s:.3f} s, as gpt-fast counts it)")


def compare_lines(model, tok, prompt, tr: Trace, sampling, static, drafter, repeats: int) -> list[str]:
    """Plain greedy against the method on the same prompt, both warm and untraced, in `repeats` interleaved
    rounds (method then greedy, then greedy then method, ...): the median speed-up with its spread. Why: one
    run each printed 1.55x and 0.86x for the same steps on a busy machine. When the machine is busy (the rule
    in decoding/tuning/busy.py: load above the cores, or the process got far less CPU than wall time) no ratio
    is printed, only the work: steps for the same tokens, which the load cannot change."""
    from ..tuning.busy import Clock, busy_now, busy_reason
    from ..tuning.threads import load_average, usable_cores
    n = tr.config["max_new_tokens"]

    def once(method: str, d):
        return run(model, tok, prompt, method, max_new_tokens=n, sampling=sampling, drafter=d, trace=False,
                   static=static)
    clock, ratios, rates = Clock(), [], {"m": [], "g": []}
    busy, g = busy_now(), None
    for r in range(1 if busy else repeats):  # busy before the first round: one greedy run, for its steps
        for who in (("g",) if busy else ("m", "g") if r % 2 == 0 else ("g", "m")):
            with clock:
                out = once(BASELINE, None) if who == "g" else once(tr.method, drafter)
            rates[who].append(len(out.output_ids) / out.wall_s if out.wall_s > 0 else 0.0)
            g = out if who == "g" else g
        if not busy:
            ratios.append(rates["m"][-1] / rates["g"][-1] if rates["g"][-1] else 0.0)
    cpu = next(model.parameters()).device.type == "cpu"
    load, cores = load_average(), usable_cores()
    busy = busy or busy_reason(load, cores, clock.cpu_s if cpu else None, clock.wall_s)
    same = ""
    if sampling.greedy:
        k = len(tr.output_ids)
        same = "; output identical to greedy" if g.output_ids[:k] == tr.output_ids else "; output DIFFERS from greedy"
    if busy:
        st, gs = tr.stats(), g.stats()
        return [f"[compare] machine busy: speed not measured ({busy}); the work instead: greedy {gs['steps']} steps "
                f"for {len(g.output_ids)} tokens, {tr.method} {st['steps']} steps for {st['new_tokens']} tokens "
                f"(compression {st['compression']:.2f} tokens per target forward){same}"]
    med = statistics.median
    share = f", CPU {clock.cpu_s / clock.wall_s:.2f} of wall" if cpu and clock.wall_s > 0 else ""
    where = f"load {load:.1f} on {cores} cores" if load is not None else f"{cores} cores"
    return [f"[compare] greedy {med(rates['g']):.1f} tokens/s, {tr.method} {med(rates['m']):.1f} tokens/s: speed-up "
            f"{med(ratios):.2f}x median of {len(ratios)} interleaved rounds (spread {min(ratios):.2f}-"
            f"{max(ratios):.2f}x; {where}{share}; same prompt, measured here){same}"]


REPEATS = 3  # --compare's interleaved rounds when --repeats is not given


def add_compare_arguments(g: argparse.ArgumentParser) -> None:
    """generate's own (the profiler shares add_arguments, not this): how many rounds --compare times."""
    g.add_argument("--repeats", type=int_in(1, 20), default=None, metavar="R",
                   help=f"--compare: interleaved rounds of the method and greedy, 1..20 (default {REPEATS})")


LABEL_CHARS = 40  # characters of a prompt repeated in its output's label
SEPARATOR = "-" * 40


def prompt_label(index: int, count: int, prompt) -> str:
    """`[2/3] def fibonacci(n):` : which prompt an output belongs to (its first 40 characters, one line)."""
    text = one_line(prompt if isinstance(prompt, str) else "", 10_000)
    if len(text) > LABEL_CHARS:
        text = text[:LABEL_CHARS] + "\u2026"
    return f"[{index + 1}/{count}] {text}"


def check_writable(path: str) -> None:
    """Fail before the run when the trace cannot be written there (its folder is created, as saving would)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        existed = p.exists()
        with open(p, "a"):
            pass
        if not existed:
            p.unlink()
    except OSError as e:
        raise ValueError(f"cannot write --json {path}: {e.strerror or type(e).__name__}") from None


def json_path(out: str, index: int, count: int) -> str:
    """OUT for one prompt; OUT-1.json, OUT-2.json ... for several (one trace document each)."""
    if count == 1:
        return out
    p = Path(out)
    return str(p.with_name(f"{p.stem}-{index + 1}{p.suffix or '.json'}"))
