"""Token Recycling against prompt lookup and lookahead on the held-out chat and code prompts: mean accepted
tokens per decode step and wall time relative to greedy, one interleaved round per prompt (greedy, then each
method, on the same prompt back to back), so a load change hits every method alike.

    python bench/methods/token_recycling.py                       # the default model, 64 new tokens
    python bench/methods/token_recycling.py --max-new-tokens 96 --out bench/results/token-recycling-cpu.md

Methods: token_recycling cold (a fresh matrix per prompt, seeded from the prompt's forward), token_recycling
kept (one drafter with keep=True across the set's prompts: a session), prompt_lookup and lookahead with their
CPU presets for the default model (the specs' presets["cpu_default"]). Every output is checked against
greedy's ids. Acceptance does not depend on load; the speed ratios do, so the load average is recorded with
them (uptime before and after).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from decoding import build, load, run  # noqa: E402
from decoding.methods.registry import SPECS  # noqa: E402


def variants() -> list[tuple[str, str, dict]]:
    """(row label, method, parameters) of the rows, greedy first."""
    place = "cpu_default"
    return [("greedy", "greedy", {}),
            ("token_recycling (cold)", "token_recycling", dict(SPECS["token_recycling"].presets.get(place, {}))),
            ("token_recycling (kept)", "token_recycling", {**SPECS["token_recycling"].presets.get(place, {}),
                                                           "keep": True}),
            ("prompt_lookup", "prompt_lookup", dict(SPECS["prompt_lookup"].presets.get(place, {}))),
            ("lookahead", "lookahead", dict(SPECS["lookahead"].presets.get(place, {})))]


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def write(args, before: str, rows: list) -> None:
    after = load_avg()
    head = (f"Token Recycling vs prompt lookup and lookahead: `python bench/methods/token_recycling.py --sets {args.sets} "
            f"--max-new-tokens {args.max_new_tokens}` on {args.model}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads 1, CPU GEMM kernel "
            f"{'off' if os.environ.get('DECODESCOPE_CPU_GEMM') == '0' else 'as the device default'}, "
            f"load average {before} before / {after} after (1, 5, 15 min)")
    lines = [head, "", "| prompts | method | accepted tokens / step | speed vs greedy (interleaved) | exact |",
             "|---|---|---|---|---|"]
    lines += [f"| {g} ({n}) | {label} | {acc:.2f} | {speed:.2f}x | {'yes' if ok else 'NO'} |"
              for g, label, acc, speed, ok, n in rows]
    print("\n".join(lines), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default", help="a model folder or id (default: the default model, "
                                                          "which has the chat template the chat prompts need)")
    ap.add_argument("--sets", default="heldout_chat,heldout_code")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default=None, help="write the table here as Markdown")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from bench import load_prompts
    model, tok = load(None if args.model == "default" else args.model)
    before = load_avg()
    rows = []
    for group in args.sets.split(","):
        prompts = load_prompts([group], tok)
        stats = {label: {"acc": 0, "steps": 0, "s": 0.0, "exact": True} for label, _, _ in variants()}
        kept = {}  # label -> the session's drafter (keep=True)
        for p in prompts:
            ref = None
            for label, method, params in variants():
                drafter = None
                if params.get("keep"):
                    drafter = kept.setdefault(label, build(method, params, model, tok))
                t0 = time.perf_counter()
                tr = run(model, tok, p["prompt"], method, max_new_tokens=args.max_new_tokens, drafter=drafter,
                         **({} if drafter is not None else params))
                wall = time.perf_counter() - t0
                dec = [s for s in tr.steps if s.kind == "decode"]
                st = stats[label]
                st["acc"] += sum(len(s.accepted) for s in dec)
                st["steps"] += len(dec)
                st["s"] += wall
                ref = tr.output_ids if ref is None else ref
                st["exact"] &= tr.output_ids == ref
        base = stats["greedy"]["s"]
        for label, st in stats.items():
            rows.append((group, label, st["acc"] / max(st["steps"], 1), base / st["s"] if st["s"] else 0.0,
                         st["exact"], len(prompts)))
            print(f"{group:13} {label:24} accepted/step {rows[-1][2]:.2f}  speed vs greedy {rows[-1][3]:.2f}x  "
                  f"exact {'yes' if st['exact'] else 'NO'}", flush=True)
        write(args, before, rows)  # after each set: a long run stopped part-way keeps what it measured


if __name__ == "__main__":
    main()
