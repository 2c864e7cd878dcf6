"""The packed CPU GEMM kernel against MKL: every linear of a model, weights cold as in a real step.

    python bench/bench_cpu_gemm.py                        # the embedded target's linears, 1 thread
    python bench/bench_cpu_gemm.py --model DIR --threads 2 --rows 1,2,4,8,16,32,64

Per row count M: the time of one pass over all the model's nn.Linear weights (x [M, in] @ W^T), MKL on
the column-major layout (layout.py's "column", the previous default) and on the stock layout, and the
packed kernel (decoding/fast/cpu_gemm.py), interleaved, medians of --reps passes. The weights (tens of MB)
do not fit in cache, as in decoding, where each step streams them from memory.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from decoding.fast.cpu_gemm import kernel, why_not  # noqa: E402
from decoding.models import load  # noqa: E402


def passes(weights: list[torch.Tensor], rows: int, reps: int) -> dict[str, float]:
    """Median ms of one pass over all weights, per variant, interleaved."""
    ops = kernel()
    col = [w.t().contiguous().t() for w in weights]
    panels = [ops.pack_panels(w) for w in weights]
    xs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
    variants = {
        "MKL, stock layout": lambda: [F.linear(xs[w.shape[1]], w) for w in weights],
        "MKL, column layout": lambda: [F.linear(xs[w.shape[1]], w) for w in col],
        "packed kernel": lambda: [ops.packed_linear(xs[w.shape[1]], p, w.shape[0]) for w, p in zip(weights, panels)],
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(reps):
        for name, f in variants.items():
            t = time.perf_counter()
            f()
            times[name].append((time.perf_counter() - t) * 1e3)
    return {k: statistics.median(v[1:]) for k, v in times.items()}


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model dir (default: the embedded target)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", default="1,2,4,8,16,32,64")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None, help="write the markdown table here")
    a = ap.parse_args(argv)
    if why_not() or kernel() is None:
        raise SystemExit(f"error: the packed kernel cannot run here: {why_not()}")
    torch.set_num_threads(a.threads)
    model, _ = load(a.model, device="cpu", layout="stock", threads=a.threads)
    seen, weights = set(), []
    for m in model.modules():
        if type(m) is torch.nn.Linear and id(m.weight) not in seen:
            seen.add(id(m.weight))
            weights.append(m.weight.detach())
    mb = sum(w.numel() for w in weights) * 4 / 1e6
    lines = [f"CPU GEMM on {a.model or 'the embedded target'}: {len(weights)} linear weights ({mb:.0f} MB fp32), "
             f"{torch.get_num_threads()} thread(s), torch {torch.__version__}; ms per pass over all weights, "
             f"medians of {a.reps} interleaved passes.", "",
             "| rows | MKL, stock layout | MKL, column layout | packed kernel | packed vs column |", "|---|---|---|---|---|"]
    with torch.inference_mode():
        for m in (int(r) for r in a.rows.split(",")):
            t = passes(weights, m, a.reps)
            lines.append(f"| {m} | {t['MKL, stock layout']:.2f} | {t['MKL, column layout']:.2f} | "
                         f"{t['packed kernel']:.2f} | {t['MKL, column layout'] / t['packed kernel']:.2f}x |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    return text


if __name__ == "__main__":
    print(main())
