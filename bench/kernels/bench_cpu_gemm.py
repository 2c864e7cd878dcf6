"""The packed CPU GEMM kernel against the maintained libraries: every linear of a model, weights cold as in a
real step.

    python bench/kernels/bench_cpu_gemm.py                        # the embedded target's linears, 1 and 2 threads
    python bench/kernels/bench_cpu_gemm.py --model DIR --threads 2 --rows 1,2,4,8,16,32,64

Per row count M: the time of one pass over all the model's nn.Linear weights (x [M, in] @ W^T), interleaved,
medians of --reps passes, for
  - stock: F.linear on the weights as loaded (MKL/oneDNN's own dispatch);
  - column: F.linear on the column-major layout (layout.py's "column", the previous default);
  - oneDNN packed: torch.ops.mkldnn._reorder_linear_weight(W, M) once, then _linear_pointwise(x, Wp, None,
    "none", [], "") — oneDNN's blocked weight, the path torch.compile's CPU freezing uses;
  - MKL packed: torch.ops.mkl._mkl_reorder_linear_weight(W, M) once, then _mkl_linear(x, Wp, W, None, M) —
    MKL's cblas_sgemm_pack, packed for exactly M rows (a real decoder would need one pack per row count);
  - ours: the packed kernel (decoding/fast/cpu_gemm.py) on fp32 panels;
  - ours blocks: the same kernel on the weights' exact Q4_1 / Q8_0 blocks where blocks.py recovers them
    (a model converted from GGUF, e.g. the default SmolLM2-135M-Instruct), fp32 panels elsewhere;
  - ours int8: the int8 kernel (decoding/fast/cpu_int8.cpp: int8 activations, int32 block sums) on those blocks;
  - ours int8 avx2: the same held to AVX2 (where the CPU has AVX-512).
--variants picks columns; --cpu-time times the calling thread's CPU time instead of wall time (1 thread only:
on a shared machine other processes then cost less of the number, though caches and memory stay shared).
Both library packs are made for the row count timed (their best case). The weights (tens of MB) do not fit
in cache, as in decoding, where each step streams them from memory. The load average is printed before and
after: numbers taken while it is above 0.5 are marked "under load".
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from decoding.fast import cpu_gemm  # noqa: E402
from decoding.fast.cpu_gemm import kernel, why_not  # noqa: E402
from decoding.fast import blocks  # noqa: E402
from decoding.models import load  # noqa: E402

VARIANTS = ("stock", "column", "oneDNN packed", "MKL packed", "ours", "ours blocks", "ours int8", "ours int8 avx2")
ISA_OF = {"ours int8 avx2": "AVX2"}  # variants timed with the kernel held to another instruction set


def library_paths() -> dict[str, str | None]:
    """Which library packed paths this torch has: name -> None if usable, else why not."""
    w, x = torch.randn(32, 16), torch.randn(2, 16)
    out = {}
    for name, f in (("oneDNN packed", lambda: torch.ops.mkldnn._linear_pointwise(
            x, torch.ops.mkldnn._reorder_linear_weight(w, 2), None, "none", [], "")),
                    ("MKL packed", lambda: torch.ops.mkl._mkl_linear(
                        x, torch.ops.mkl._mkl_reorder_linear_weight(w, 2), w, None, 2))):
        try:
            with torch.inference_mode():
                ok = torch.allclose(f(), F.linear(x, w), rtol=1e-4, atol=1e-5)
            out[name] = None if ok else "wrong values"
        except (RuntimeError, AttributeError, NotImplementedError) as e:
            out[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:80] if str(e).strip() else ''}"
    return out


def passes(weights: list[torch.Tensor], rows: int, reps: int, libs: dict[str, str | None] | None = None,
           only: tuple[str, ...] = VARIANTS, clock=time.perf_counter) -> dict[str, float]:
    """Median ms of one pass over all weights, per variant, interleaved."""
    ops = kernel()
    libs = library_paths() if libs is None else libs
    col = [w.t().contiguous().t() for w in weights]
    panels = [ops.pack_panels(w) for w in weights]
    recovered = [blocks.recover(w) for w in weights]
    mixed = [(ops.block_linear, ops.pack_blocks(b.q, b.d, b.m)) if b else (ops.packed_linear, p)
             for b, p in zip(recovered, panels)]
    xs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
    variants = {
        "stock": lambda: [F.linear(xs[w.shape[1]], w) for w in weights],
        "column": lambda: [F.linear(xs[w.shape[1]], w) for w in col],
        "ours": lambda: [ops.packed_linear(xs[w.shape[1]], p, w.shape[0]) for w, p in zip(weights, panels)],
        "ours blocks": lambda: [op(xs[w.shape[1]], p, w.shape[0]) for w, (op, p) in zip(weights, mixed)],
    }
    if "ours int8" in only or "ours int8 avx2" in only:
        int8 = [(ops.block_linear, ops.pack_blocks_i8(b.q, b.d, b.m)) if b else (ops.packed_linear, p)
                for b, p in zip(recovered, panels)]
        variants["ours int8"] = lambda: [op(xs[w.shape[1]], p, w.shape[0]) for w, (op, p) in zip(weights, int8)]
        variants["ours int8 avx2"] = variants["ours int8"]
    if libs.get("oneDNN packed", "absent") is None:
        dnn = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in weights]
        variants["oneDNN packed"] = lambda: [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "")
                                             for w, p in zip(weights, dnn)]
    if libs.get("MKL packed", "absent") is None:
        mkl = [torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for w in weights]
        variants["MKL packed"] = lambda: [torch.ops.mkl._mkl_linear(xs[w.shape[1]], p, w, None, rows)
                                          for w, p in zip(weights, mkl)]
    variants = {k: v for k, v in variants.items() if k in only}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(reps):
        for name, f in variants.items():
            if name in ISA_OF:
                ops.select_isa(ISA_OF[name])
            t = clock()
            f()
            times[name].append((clock() - t) * 1e3)
            if name in ISA_OF:
                ops.select_isa(cpu_gemm.isa_wanted())
    return {k: statistics.median(v[1:] or v) for k, v in times.items()}


def load_line(when: str) -> str:
    one, five, _ = os.getloadavg()
    return f"load average {when}: {one:.2f} (1 min), {five:.2f} (5 min)" + (" — under load" if one > 0.5 else "")


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model dir (default: the embedded target)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None, help="write the markdown table here")
    ap.add_argument("--variants", default=None, help=f"comma-separated columns (default: all of {', '.join(VARIANTS)})")
    ap.add_argument("--cpu-time", action="store_true", help="time the thread's CPU time (1 thread), not wall time")
    a = ap.parse_args(argv)
    only = tuple(a.variants.split(",")) if a.variants else VARIANTS
    if set(only) - set(VARIANTS):
        ap.error(f"--variants: unknown {', '.join(sorted(set(only) - set(VARIANTS)))}")
    if why_not() or kernel() is None:
        raise SystemExit(f"error: the packed kernel cannot run here: {why_not()}")
    threads = [int(t) for t in a.threads.split(",")]
    model, _ = load(a.model, device="cpu", layout="stock", threads=threads[0])
    seen, weights = set(), []
    for m in model.modules():
        if type(m) is torch.nn.Linear and id(m.weight) not in seen:
            seen.add(id(m.weight))
            weights.append(m.weight.detach())
    libs = library_paths()
    mb = sum(w.numel() for w in weights) * 4 / 1e6
    cols = [v for v in VARIANTS if libs.get(v, None) is None and v in only]
    before = load_line("before")
    print(before, flush=True)
    lines = [f"CPU GEMM on {a.model or 'the embedded target'}: {len(weights)} linear weights ({mb:.0f} MB fp32), "
             f"torch {torch.__version__}; ms per pass over all weights, medians of {a.reps} interleaved passes "
             f"(`python bench/kernels/bench_cpu_gemm.py {' '.join(argv if argv is not None else sys.argv[1:])}`, "
             f"{time.strftime('%Y-%m-%d')}). Library packs are made for the row count timed."
             + (" Times are the thread's CPU time." if a.cpu_time else "") + f" int8 kernel: {cpu_gemm.int8_isa()}.",
             "", before, ""]
    lines += [f"{k}: unavailable here ({v})" for k, v in libs.items() if v]
    lines += ["| threads | rows | " + " | ".join(cols) + " | fastest |", "|---" * (len(cols) + 3) + "|"]
    measured: dict[tuple[int, int], dict[str, float]] = {}
    with torch.inference_mode():
        for n in threads:
            torch.set_num_threads(n)
            for m in (int(r) for r in a.rows.split(",")):
                t = measured[n, m] = passes(weights, m, a.reps, libs, only,
                                            time.thread_time if a.cpu_time else time.perf_counter)
                lines.append(f"| {n} | {m} | " + " | ".join(f"{t[c]:.2f}" for c in cols)
                             + f" | {min(t, key=t.get)} |")
                print(lines[-1], flush=True)
    lines += ["", "Marginal cost of a row, (t(M) - t(1)) / (M - 1), ms:"] + [
        f"- {n} thread(s), {c}: " + ", ".join(f"M={m} {(t[c] - measured[n, 1][c]) / (m - 1):.3f}"
                                             for (k, m), t in measured.items() if k == n and m > 1)
        for n in threads for c in cols if (n, 1) in measured]
    after = load_line("after")
    lines += ["", after]
    print(after, flush=True)
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    return text


if __name__ == "__main__":
    print(main())
