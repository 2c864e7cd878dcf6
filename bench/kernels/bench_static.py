"""Does the static-shape path (decoding/fast/static_cache.py), or torch.compile of its buckets, pay on CPU?

    python bench/kernels/bench_static.py            # embedded target, fp32, 1 thread, code prompts, greedy + lookahead
    python bench/kernels/bench_static.py --quick    # tiny random model, seconds (checks that it runs)

Decode steps only (prefill excluded), exactly --max-new-tokens per run. Contenders per method: `dynamic`
(DynamicCache, exact shapes), `static` (preallocated cache, buckets of 1, 2, 4, ... 128 rows, eager),
`compiled` (static + torch.compile of each bucket at [bucket, capacity]; its compile time is paid in a
warm-up run and reported separately). Interleaved A/B: every repetition runs
each prompt with every contender in turn, so drift of a shared machine hits all alike; medians of
tokens/s. Every contender's ids must equal the dynamic path's. Writes bench/results/cpu-static.{md,json}.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench.py's helpers (from bench import ...)

from decoding import generate, load, make_drafter  # noqa: E402
from decoding.engine.core import core_options  # noqa: E402

from bench import load_prompts, machine, tiny_dir  # noqa: E402

METHODS = {"greedy": {}, "lookahead W5 N4 G5": dict(method="lookahead", window=5, ngram=4, guesses=5)}
CONTENDERS = {"dynamic": dict(static=False), "static": dict(static=True), "compiled": dict(static=True, compiled=True)}


class StepTimer:
    """step_context that sums wall and process CPU time over decode steps (prefill excluded). CPU time:
    the dev box is shared, and with one thread a step's CPU seconds are its work, whatever the other
    processes on the machine do to its wall time."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    @contextlib.contextmanager
    def __call__(self, index: int, kind: str):
        t0, c0 = time.perf_counter(), time.process_time()
        yield
        if kind == "decode":
            self.wall += time.perf_counter() - t0
            self.cpu += time.process_time() - c0


def one(model, ids: list[int], n: int, method: dict, contender: dict) -> tuple[float, float, list[int]]:
    """(decode wall s, decode CPU s, ids) of one run of exactly n new tokens (no EOS stop)."""
    p = dict(method)
    timer = StepTimer()
    with core_options(compiled=contender.get("compiled", False)):
        tr = generate(model, ids, make_drafter(p.pop("method", "greedy"), **p), max_new_tokens=n,
                      trace=False, static=contender["static"], step_context=timer)
    return timer.wall, timer.cpu, tr.output_ids


def bench(model, prompts: list[list[int]], n: int, reps: int, contenders: list[str]) -> tuple[list[dict], dict]:
    warm = {}
    for c in contenders:  # first runs: allocator warm-up, and for `compiled` every bucket's compilation
        t0 = time.perf_counter()
        for m in METHODS.values():
            for pr in prompts:
                one(model, pr, n, m, CONTENDERS[c])
        warm[c] = time.perf_counter() - t0
    times = {(m, c): [] for m in METHODS for c in contenders}
    cpu = {(m, c): [] for m in METHODS for c in contenders}
    exact = {(m, c): True for m in METHODS for c in contenders}
    for _ in range(reps):
        for pr in prompts:
            for m, mp in METHODS.items():
                ref = None
                for c in contenders:
                    dt, dc, ids = one(model, pr, n, mp, CONTENDERS[c])
                    ref = ids if ref is None else ref
                    exact[(m, c)] &= ids == ref
                    times[(m, c)].append(len(ids) / dt)
                    cpu[(m, c)].append(dc * 1e3 / len(ids))
    rows = []
    for m in METHODS:
        base = statistics.median(times[(m, contenders[0])])
        base_cpu = statistics.median(cpu[(m, contenders[0])])
        for c in contenders:
            tps, ms = statistics.median(times[(m, c)]), statistics.median(cpu[(m, c)])
            rows.append({"method": m, "contender": c, "tokens_per_s": tps, "vs_dynamic": tps / base,
                         "cpu_ms_per_token": ms, "cpu_vs_dynamic": base_cpu / ms,
                         "exact_vs_dynamic": exact[(m, c)], "runs": len(times[(m, c)])})
    return rows, warm


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the embedded target")
    ap.add_argument("--prompts", type=int, default=4, help="first K code prompts")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile contender")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    contenders = ["dynamic", "static"] + ([] if a.no_compile or a.quick else ["compiled"])
    name = tiny_dir() if a.quick else a.model
    model, tok = load(name, device="cpu", dtype="fp32", threads=a.threads)
    if a.quick:
        prompts, a.reps, a.max_new_tokens = [tok("def x ( y ) : return y + 1")["input_ids"]], 1, 8
    else:  # the prompts' last 256 tokens: a realistic cache, a bounded prefill
        prompts = [tok(p["prompt"])["input_ids"][-256:] for p in load_prompts(["code"])[:a.prompts]]
    load0 = os.getloadavg()[0]
    rows, warm = bench(model, prompts, a.max_new_tokens, a.reps, contenders)
    meta = {**machine(model), "model": "tiny random" if a.quick else name or "embedded (assets/target)",
            "prompts": len(prompts), "max_new_tokens": a.max_new_tokens, "reps": a.reps,
            "warmup_s": {c: round(v, 1) for c, v in warm.items()},
            "load_average": [round(load0, 1), round(os.getloadavg()[0], 1)]}
    md = (f"Static path on CPU: {meta['machine']} ({meta['cpus']} CPUs, {meta['threads']} threads), torch "
          f"{meta['torch']}, model {meta['model']} fp32, {len(prompts)} code prompts (last 256 tokens) x "
          f"{a.max_new_tokens} new tokens, decode steps only, medians of {a.reps} interleaved repetitions per "
          f"prompt. Warm-up (first runs of every method and prompt; `compiled` includes compiling each bucket): "
          + ", ".join(f"{c} {v:.1f} s" for c, v in warm.items()) + ".\n\n"
          f"Load average {meta['load_average'][0]} at the start, {meta['load_average'][1]} at the end: wall "
          "tokens/s suffer from whatever else the shared machine runs; CPU ms per token (process time, "
          "one thread) is the steadier measure of the work.\n\n"
          "| method | path | CPU ms/token | speed-up (CPU time) | wall tokens/s | speed-up (wall) | same ids as "
          "dynamic |\n|---|---|---|---|---|---|---|\n")
    md += "".join(f"| {r['method']} | {r['contender']} | {r['cpu_ms_per_token']:.2f} | {r['cpu_vs_dynamic']:.2f}x | "
                  f"{r['tokens_per_s']:.1f} | {r['vs_dynamic']:.2f}x | {'yes' if r['exact_vs_dynamic'] else 'NO'} |\n"
                  for r in rows)
    print(md)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cpu-static.md").write_text(md)
        (out / "cpu-static.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
