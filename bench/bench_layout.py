"""Step latency with transformers' stock weight layout vs the engine's column-major and packed ones (decoding/fast/layout.py).

    python bench/bench_layout.py            # embedded model, q = 1..32, kv length 200, 1 thread
    python bench/bench_layout.py --quick    # tiny random model, seconds (used by the test suite)

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
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from decoding import load  # noqa: E402
from decoding.engine.core import Core  # noqa: E402
from decoding.engine.masks import chain_parents  # noqa: E402
from decoding.engine.timing import time_step  # noqa: E402

from bench import machine, print_load, provenance, tiny_dir, under_load  # noqa: E402
from decoding.fast import cpu_gemm  # noqa: E402


ISA_OF = {"packed_avx2": "AVX2"}  # models timed with the kernel held to another instruction set
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
        rows.append({"n_query": q, **{f"{n}_ms": v for n, v in med.items()}, "speedup": med["stock"] / med["column"],
                     **{f"{n}_speedup": med["stock"] / med[n] for n in med if n.startswith("packed")}})
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: ms per step for every layout measured, and the speed-up over stock."""
    names = [k[:-3] for k in rows[0] if k.endswith("_ms")]
    head = "| query tokens | " + " | ".join(f"{n.replace('_', ' ')} ms" for n in names) + " | " + " | ".join(
        f"{n.replace('_', ' ')} speed-up" for n in names if n != "stock") + " |"
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in rows:
        lines.append(f"| {r['n_query']} | " + " | ".join(f"{r[n + '_ms']:.2f}" for n in names) + " | " + " | ".join(
            f"{r['stock_ms'] / r[n + '_ms']:.2f}x" for n in names if n != "stock") + " |")
    return "\n".join(lines) + "\n"


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
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    name = a.model
    if a.quick:
        name, a.reps, a.kv_len = tiny_dir(), 3, 16
    before = print_load("before")
    models = {"stock": load(name, device="cpu", layout="stock", threads=a.threads)[0],
              "column": load(name, device="cpu", layout="column", threads=a.threads)[0],
              "packed": load(name, device="cpu", layout="packed", threads=a.threads)[0]}
    models["packed_fp32"] = packed_fp32(name, a.threads)
    models["packed_unfused"] = packed_unfused(name, a.threads)
    models["packed_transformers"] = models["packed"]
    if cpu_gemm.ISA == ["AVX512"] and not a.quick:
        models["packed_avx2"] = models["packed"]
    sizes = (1, 2, 4, 8) if a.quick else (1, 2, 4, 8, 12, 16, 24, 32)
    rows = compare(models, sizes, a.kv_len, a.reps)
    after = print_load("after")
    meta = {**machine(models["column"]), "model": "tiny random" if a.quick else name or "embedded (assets/target)",
            "kv_len": a.kv_len, "reps": a.reps, "isa": cpu_gemm.ISA[0],
            "packed_storage": getattr(models["packed"], "weight_storage_", None),
            **provenance("bench_layout.py", argv if argv is not None else sys.argv[1:], "none"),
            "load_before": before, "load_after": after, "under_load": under_load(before, after, a.threads)}
    md = (f"Step latency, stock vs column-major vs packed weights: {meta['machine']} ({meta['cpus']} CPUs, {meta['threads']} "
          f"threads), torch {meta['torch']}, model {meta['model']}, kv length {a.kv_len}, median of {a.reps} "
          f"interleaved steps; packed storage {meta['packed_storage']}, kernel {meta['isa']}. Produced by "
          f"`{meta['command']}` on {meta['date']}; load average {before:.2f} before, {after:.2f} after (1 min)"
          f"{', under load' if meta['under_load'] else ''}.\n\n{table(rows)}")
    print(md)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = "cpu-layout" if a.model is None else f"cpu-layout-{Path(a.model).name}"
        (out / f"{stem}.md").write_text(md)
        (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
