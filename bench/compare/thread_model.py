"""How each row of bench.py's table moves from 1 to 2 threads (measured), and what that predicts for a 4- or
8-core laptop (modelled, never measured here: this machine has 2 cores).

    python bench/compare/thread_model.py bench/results/A-1thread.json bench/results/B-2threads.json
    python bench/compare/thread_model.py ONE.json TWO.json --bandwidth-gbs 60 --out docs-table.md

The model, per row, on the time per new token t(n) at n threads: Amdahl's law fitted on the two measured points,
t(n) = s + p / n with s = 2 t(2) - t(1) (what did not speed up: Python, the drafting levels, memory streams that
one thread already saturates) and p = 2 (t(1) - t(2)) (clamped at 0 when 2 threads were slower), then floored by
the memory stream: every target forward reads the weights once, so a token costs at least
weight bytes / compression / bandwidth (compression: new tokens per target forward; llama.cpp's rows: 1).
The bandwidth is the laptop's, a parameter (default 40 GB/s: dual-channel DDR4-3200's 51 GB/s peak at ~80%).
What the model leaves out: a second core of this VM also runs the OS, larger caches and other core types
(hybrid laptops), and the draft's own thread scaling beyond 2. Said with every table it prints.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

WEIGHT_MB = 96.6  # the default model's packed storage read per forward (Q4_1 + Q8_0 blocks; decoding's [timing] line)


def load(path: str) -> dict:
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list) or "meta" not in doc:
        raise ValueError(f"{path}: not a bench.py result file (rows and meta)")
    return doc


def greedy_of(method: str) -> str:
    """The greedy a row is compared with: its own kernel's ([int8] rows: the int8 greedy; llama.cpp: its own)."""
    if method.startswith("llama.cpp"):
        return "llama.cpp greedy"
    return "ours greedy [int8]" if method.endswith("[int8]") else "ours greedy"


def model_row(t1: float, t2: float, compression: float, cores: int, weight_mb: float, bandwidth_gbs: float) -> float:
    """Modelled seconds per token at `cores` threads (Amdahl on two points, floored by the weight stream)."""
    p = max(0.0, 2.0 * (t1 - t2))
    s = max(0.0, t1 - p)
    floor = weight_mb / 1e3 / max(compression, 1e-9) / bandwidth_gbs
    return max(s + p / cores, floor)


def table(one: dict, two: dict, weight_mb: float, bandwidth_gbs: float, cores=(4, 8)) -> str:
    by1 = {r["method"]: r for r in one["rows"]}
    by2 = {r["method"]: r for r in two["rows"]}
    names = [m for m in by1 if m in by2 and by1[m].get("tokens_per_s") and by2[m].get("tokens_per_s")]
    if not names:
        raise ValueError("the two files share no row: run the same bench.py command with --threads 1 and 2")
    sec = {n: {1: 1 / by1[n]["tokens_per_s"], 2: 1 / by2[n]["tokens_per_s"]} for n in names}
    for n in names:
        comp = by1[n].get("compression") or 1.0
        for c in cores:
            sec[n][c] = model_row(sec[n][1], sec[n][2], comp, c, weight_mb, bandwidth_gbs)

    def ratio(n: str, c: int) -> str:
        g = greedy_of(n)
        return f"{sec[g][c] / sec[n][c]:.2f}x" if g in sec else "–"

    head = ("| method | 1 thread tok/s (vs its greedy) | 2 threads tok/s (vs its greedy) | 2 / 1 threads | "
            + " | ".join(f"{c} cores, modelled tok/s (vs its greedy)" for c in cores) + " |")
    lines = [head, "|" + "---|" * (4 + len(cores))]
    for n in names:
        lines.append(f"| {n} | {1 / sec[n][1]:.1f} ({ratio(n, 1)}) | {1 / sec[n][2]:.1f} ({ratio(n, 2)}) | "
                     f"{sec[n][1] / sec[n][2]:.2f}x | "
                     + " | ".join(f"{1 / sec[n][c]:.1f} ({ratio(n, c)})" for c in cores) + " |")
    m1, m2 = one["meta"], two["meta"]
    return ("\n".join(lines) + "\n\n"
            f"Measured: the 1- and 2-thread columns (`{m1.get('command')}`, {m1.get('date')}, load "
            f"{m1.get('load_before', float('nan')):.2f}/{m1.get('load_after', float('nan')):.2f}; "
            f"`{m2.get('command')}`, {m2.get('date')}, load {m2.get('load_before', float('nan')):.2f}/"
            f"{m2.get('load_after', float('nan')):.2f}; {m1.get('cpu') or m1.get('machine')}). Modelled, not measured: "
            f"the {' and '.join(map(str, cores))}-core columns, Amdahl's law fitted per row on the two measured "
            f"points and floored at {weight_mb:g} MB of weights per target forward over {bandwidth_gbs:g} GB/s "
            f"(`python bench/compare/thread_model.py`; its docstring says what the model leaves out).\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one", help="bench.py result .json measured with --threads 1")
    ap.add_argument("two", help="the same command's result .json with --threads 2")
    ap.add_argument("--bandwidth-gbs", type=float, default=40.0, help="the laptop's memory bandwidth (default 40)")
    ap.add_argument("--weight-mb", type=float, default=WEIGHT_MB, help=f"weights read per forward (default {WEIGHT_MB})")
    ap.add_argument("--out", default=None, help="also write the markdown here")
    a = ap.parse_args(argv)
    try:
        if a.bandwidth_gbs <= 0 or a.weight_mb <= 0:
            raise ValueError("--bandwidth-gbs and --weight-mb must be > 0")
        one, two = load(a.one), load(a.two)
        if one["meta"].get("threads") != 1 or two["meta"].get("threads") != 2:
            raise ValueError(f"want a 1-thread then a 2-thread file, got threads {one['meta'].get('threads')} "
                             f"and {two['meta'].get('threads')}")
        md = table(one, two, a.weight_mb, a.bandwidth_gbs)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"thread_model: {e}", file=sys.stderr)
        return 2
    print(md)
    if a.out:
        Path(a.out).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
