"""Step latency with transformers' stock weight layout vs the engine's column-major and packed ones (decoding/fast/layout.py).

    python bench/bench_layout.py            # embedded model, q = 1..32, kv length 200, 1 thread
    python bench/bench_layout.py --quick    # tiny random model, seconds (used by the test suite)

Interleaved A/B: each repetition times one step of every layout in turn, so drift of a shared machine hits
both alike; medians per size. Writes bench/results/<device>-layout.{md,json}.
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

from bench import machine, tiny_dir  # noqa: E402
from readme_table import layout_table  # noqa: E402


def compare(models: dict, sizes: tuple[int, ...], kv_len: int, reps: int) -> list[dict]:
    cores = {}
    for name, m in models.items():
        cores[name] = Core(m)
        cores[name].prefill([1 + i % 50 for i in range(kv_len)])
        cores[name].commit(list(range(kv_len)))
    rows = []
    for q in sizes:
        times = {name: [] for name in cores}
        for r in range(reps + 3):
            for name, core in cores.items():
                t = time_step(core, list(range(1, q + 1)), chain_parents(q), list(range(q)), 1)[0]
                if r >= 3:  # the first repetitions warm caches and allocators
                    times[name].append(t)
        med = {name: statistics.median(v) for name, v in times.items()}
        rows.append({"n_query": q, **{f"{n}_ms": v for n, v in med.items()}, "speedup": med["stock"] / med["column"],
                     **({"packed_speedup": med["stock"] / med["packed"]} if "packed" in med else {})})
    return rows


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
    models = {"stock": load(name, device="cpu", layout="stock", threads=a.threads)[0],
              "column": load(name, device="cpu", layout="column", threads=a.threads)[0],
              "packed": load(name, device="cpu", layout="packed", threads=a.threads)[0]}
    sizes = (1, 2, 4, 8) if a.quick else (1, 2, 4, 8, 12, 16, 24, 32)
    rows = compare(models, sizes, a.kv_len, a.reps)
    meta = {**machine(models["column"]), "model": "tiny random" if a.quick else name or "embedded (assets/target)",
            "kv_len": a.kv_len, "reps": a.reps}
    md = (f"Step latency, stock vs column-major vs packed weights: {meta['machine']} ({meta['cpus']} CPUs, {meta['threads']} "
          f"threads), torch {meta['torch']}, model {meta['model']}, kv length {a.kv_len}, median of {a.reps} "
          f"interleaved steps.\n\n{layout_table(rows)}")
    print(md)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cpu-layout.md").write_text(md)
        (out / "cpu-layout.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
