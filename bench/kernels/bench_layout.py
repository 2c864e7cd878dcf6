"""Step latency with transformers' stock weight layout vs the engine's column-major and packed ones (decoding/fast/layout.py).

    python bench/kernels/bench_layout.py            # embedded model, q = 1..32, kv length 200, 1 thread
    python bench/kernels/bench_layout.py --quick    # tiny random model, seconds (used by the test suite)

Interleaved A/B: each repetition times one step of every layout in turn, so drift of a shared machine hits
both alike; medians per size. Writes bench/results/cpu-layout.{md,json} (with --model M:
cpu-layout-<M>.{md,json}).

"packed" stores a weight that is exactly de-quantised ggml blocks as those blocks (decoding/fast/blocks.py);
the "packed fp32" column is the same kernel on fp32 panels (the packed layout before block storage), and on
an AVX-512 CPU "packed AVX2" is the block kernel restricted to AVX2 (select_isa), and "packed unfused" the block
storage without the step-level levers (each Linear its own kernel call instead of fused q/k/v and gate/up, and
transformers' own attention with its repeat_kv copy instead of cpu_attention's), and "packed transformers" the
block storage run through transformers' forward instead of the one-call step (decoding/fast/cpu_step.py; the
engine's Core takes the one-call step wherever it can run, as in every other packed column), all in the same run.
"packed int8" is the block storage on the int8 kernel (decoding/fast/cpu_int8.cpp: int8 activations, int32 block
sums; every method exact against this mode's own greedy, not HF's), "packed int8 avx2" the same held to AVX2.
--only picks columns (e.g. --only packed,packed_int8: the two kernels alone, fewer models to load and time);
the summary under the table gives each column's marginal cost of a verified row, (t(q) - t(1)) / (q - 1).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench.py's helpers (from bench import ...)

from decoding import load  # noqa: E402
from decoding.engine.core import Core  # noqa: E402
from decoding.engine.masks import chain_parents  # noqa: E402
from decoding.engine.timing import time_step  # noqa: E402

from bench import machine, print_load, provenance, tiny_dir, under_load  # noqa: E402
from decoding.fast import cpu_gemm  # noqa: E402


ISA_OF = {"packed_avx2": "AVX2", "packed_int8_avx2": "AVX2"}  # models timed with the kernel held to another instruction set
FORWARD_OF = {"packed_transformers"}  # models timed through transformers' forward, not the one-call step


def compare(models: dict, sizes: tuple[int, ...], kv_len: int, reps: int) -> list[dict]:
    cores = {}
    for name, m in models.items():
        cores[name] = Core(m, fused=name not in FORWARD_OF)
        cores[name].prefill([1 + i % 50 for i in range(kv_len)])
        cores[name].commit(list(range(kv_len)))
    ops = cpu_gemm.kernel() if "packed" in models else None
    rows = []
    for q in sizes:
        times = {name: [] for name in cores}
        for r in range(reps + 3):
            for name, core in cores.items():
                if name in ISA_OF:
                    ops.select_isa(ISA_OF[name])
                t = time_step(core, list(range(1, q + 1)), chain_parents(q), list(range(q)), 1)[0]
                if name in ISA_OF:
                    ops.select_isa(cpu_gemm.isa_wanted())
                if r >= 3:  # the first repetitions warm caches and allocators
                    times[name].append(t)
        med = {name: statistics.median(v) for name, v in times.items()}
        base = med.get("stock")
        rows.append({"n_query": q, **{f"{n}_ms": v for n, v in med.items()},
                     **({"speedup": base / med["column"]} if base and "column" in med else {}),
                     **({f"{n}_speedup": base / med[n] for n in med if n.startswith("packed")} if base else {})})
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: ms per step for every layout measured, and the speed-up over stock (where stock was timed)."""
    names = [k[:-3] for k in rows[0] if k.endswith("_ms")]
    ups = [n for n in names if n != "stock"] if "stock" in names else []
    head = "| query tokens | " + " | ".join(f"{n.replace('_', ' ')} ms" for n in names) + " |" + "".join(
        f" {n.replace('_', ' ')} speed-up |" for n in ups)
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in rows:
        lines.append(f"| {r['n_query']} | " + " | ".join(f"{r[n + '_ms']:.2f}" for n in names) + " |" + "".join(
            f" {r['stock_ms'] / r[n + '_ms']:.2f}x |" for n in ups))
    return "\n".join(lines) + "\n"


def row_costs(rows: list[dict]) -> dict[str, dict[int, float]]:
    """Per column, the marginal cost of a verified row from the step of q rows: (t(q) - t(1)) / (q - 1) ms."""
    one = next(r for r in rows if r["n_query"] == 1)
    return {k[:-3]: {r["n_query"]: (r[k] - one[k]) / (r["n_query"] - 1) for r in rows if r["n_query"] > 1}
            for k in one if k.endswith("_ms")}


def row_cost_lines(rows: list[dict]) -> str:
    return "Marginal cost of a verified row, (t(q) - t(1)) / (q - 1), ms:\n\n" + "\n".join(
        f"- {n.replace('_', ' ')}: " + ", ".join(f"q={q} {c:.3f}" for q, c in costs.items())
        for n, costs in row_costs(rows).items()) + "\n"


def packed_int8(name, threads: int):
    """Block storage on the int8 kernel (batch-invariant; exact against its own greedy, not HF's)."""
    return load(name, device="cpu", layout="packed", threads=threads, kernel="int8")[0]


def packed_fp32(name, threads: int):
    """The packed layout as it was before block storage: the kernel on fp32 panels for every weight."""
    model = load(name, device="cpu", layout="stock", threads=threads)[0]
    cpu_gemm.pack_linears(model, use_blocks=False)
    model.weight_layout_ = "packed"
    return model


def packed_unfused(name, threads: int):
    """Block storage with one kernel call per Linear and transformers' own attention: the packed step before
    fused siblings (cpu_gemm.fuse_linears) and in-place GQA attention (cpu_attention)."""
    model = load(name, device="cpu", layout="stock", threads=threads)[0]
    cpu_gemm.pack_linears(model, fuse=False)
    model.weight_layout_ = "packed"
    return model


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the embedded target")
    ap.add_argument("--kv-len", type=int, default=200)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated columns to time (default: all), e.g. packed,packed_int8")
    ap.add_argument("--sizes", default=None, help="comma-separated query sizes (default 1,2,4,8,12,16,24,32)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    name = a.model
    if a.quick:
        name, a.reps, a.kv_len = tiny_dir(), 3, 16
    before = print_load("before")
    want = a.only.split(",") if a.only else None
    makers = {"stock": lambda: load(name, device="cpu", layout="stock", threads=a.threads)[0],
              "column": lambda: load(name, device="cpu", layout="column", threads=a.threads)[0],
              "packed": lambda: load(name, device="cpu", layout="packed", threads=a.threads, kernel="fp32")[0],
              "packed_fp32": lambda: packed_fp32(name, a.threads),
              "packed_unfused": lambda: packed_unfused(name, a.threads),
              "packed_transformers": lambda: models["packed"],
              "packed_int8": lambda: packed_int8(name, a.threads)}
    if cpu_gemm.kernel() is not None and cpu_gemm.ISA == ["AVX512"] and not a.quick:
        makers["packed_avx2"] = lambda: models["packed"]
        makers["packed_int8_avx2"] = lambda: models["packed_int8"]
    unknown = sorted(set(want or ()) - set(makers))
    if unknown:
        ap.error(f"--only: unknown columns {', '.join(unknown)} (known: {', '.join(makers)})")
    models = {}
    for col, make in makers.items():
        if want is None or col in want or col + "_avx2" in (want or ()) or col == "packed" and "packed_transformers" in want:
            models[col] = make()
    models = {k: v for k, v in models.items() if want is None or k in want}
    sizes = (1, 2, 4, 8) if a.quick else (1, 2, 4, 8, 12, 16, 24, 32)
    if a.sizes:
        sizes = tuple(int(s) for s in a.sizes.split(","))
    rows = compare(models, sizes, a.kv_len, a.reps)
    after = print_load("after")
    first = next(iter(models.values()))
    meta = {**machine(first), "model": "tiny random" if a.quick else name or "embedded (assets/target)",
            "kv_len": a.kv_len, "reps": a.reps, "isa": cpu_gemm.ISA[0],
            "int8_isa": cpu_gemm.int8_isa() if cpu_gemm.kernel() else None,
            "packed_storage": next((getattr(m, "weight_storage_", None) for m in models.values()
                                    if getattr(m, "weight_storage_", None)), None),
            **provenance(__file__, argv if argv is not None else sys.argv[1:], "none"),
            "load_before": before, "load_after": after, "under_load": under_load(before, after, a.threads)}
    md = (f"Step latency, stock vs column-major vs packed weights: {meta['machine']} ({meta['cpus']} CPUs, {meta['threads']} "
          f"threads), torch {meta['torch']}, model {meta['model']}, kv length {a.kv_len}, median of {a.reps} "
          f"interleaved steps; packed storage {meta['packed_storage']}, kernel {meta['isa']} (int8 kernel "
          f"{meta['int8_isa']}). Produced by "
          f"`{meta['command']}` on {meta['date']}; load average {before:.2f} before, {after:.2f} after (1 min)"
          f"{', under load' if meta['under_load'] else ''}.\n\n{table(rows)}"
          + (f"\n{row_cost_lines(rows)}" if any(r["n_query"] == 1 for r in rows) and len(rows) > 1 else ""))
    print(md)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = "cpu-layout" if a.model is None else f"cpu-layout-{Path(a.model).name}"
        if a.only:
            stem += "-" + "-".join(c.replace("_", "") for c in want)
        (out / f"{stem}.md").write_text(md)
        (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
