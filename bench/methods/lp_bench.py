"""Lookahead parallelism, measured: per-step compute and communication per rank, tokens/s against the same
lookahead in one process, the tokens checked identical, and the projection of the paper's setting.

    torchrun --nproc-per-node 2 bench/methods/lp_bench.py [--model DIR] [--prompts code] [--count 3] [--max-new-tokens 64]
        [--window 5 --ngram 4 --guesses 5] [--gpus 8 --device A100 --link nvlink]

Every rank runs the LP decode; rank 0 also runs one-process lookahead (the others wait at a barrier) and
writes bench/results/lp-<device>-<model>-<P>.md / .json. On a 2-core CPU expect no speed-up: both ranks
share the cores, and gloo's collectives cost about as much as a tiny model's forward. The projection
(profiling/interconnect.py, lp_project) replays each recorded step's split on datasheet rooflines with
its inputs named: GPUs, device, link, dtype and the model shape (the trace's, and LLaMA-2-7B's, the
paper's smallest model).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from decoding.api import run  # noqa: E402
from decoding.models import load  # noqa: E402
from decoding.parallel.group import ensure, finish  # noqa: E402


def prompts(sets: list[str], n: int) -> list[str]:
    out = []
    for name in sets:
        for line in (ROOT / "bench" / "prompts" / f"{name}.jsonl").read_text().splitlines():
            entry = json.loads(line)
            if "prompt" in entry:
                out.append(entry["prompt"])
    return out[:n]


def per_rank(traces: list, world: int) -> list[dict]:
    """Median per decode step, per rank: compute ms, communication ms, query tokens."""
    rows = []
    for r in range(world):
        steps = [s.info["lp"] for tr in traces for s in tr.steps if s.kind == "decode"]
        rows.append({"rank": r, "compute_ms": statistics.median(s["compute_ms"][r] for s in steps),
                     "comm_ms": statistics.median(s["comm_ms"][r] for s in steps),
                     "query": statistics.median(s["query"][r] for s in steps), "steps": len(steps)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the default model (SmolLM2-135M-Instruct)")
    ap.add_argument("--prompts", default="code")
    ap.add_argument("--count", type=int, default=3, help="prompts from the set")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--ngram", type=int, default=4)
    ap.add_argument("--guesses", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=8, help="projection: GPUs (the paper scaled to 8)")
    ap.add_argument("--device", default="A100", help="projection: datasheet GPU (the paper ran A100s)")
    ap.add_argument("--link", default="nvlink", choices=("nvlink", "pcie"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rank, world, backend = ensure("cpu")
    model, tok = load(a.model)
    shape = dict(window=a.window, ngram=a.ngram, guesses=a.guesses)
    texts = prompts(a.prompts.split(","), a.count)
    run(model, tok, texts[0], "lookahead", max_new_tokens=4, lp=True, **shape)  # warm-up, both paths
    lp_traces, one_traces, same = [], [], True
    for text in texts:
        tr = run(model, tok, text, "lookahead", max_new_tokens=a.max_new_tokens, lp=True, **shape)
        lp_traces.append(tr)
        if rank == 0:
            one = run(model, tok, text, "lookahead", max_new_tokens=a.max_new_tokens, **shape)
            one_traces.append(one)
            same &= one.output_ids == tr.output_ids
        dist.barrier()
    if rank == 0:
        from profiling.interconnect import LLAMA_7B, lp_project
        load_avg = os.getloadavg()
        rows = per_rank(lp_traces, world)
        lp_tps = sum(len(t.output_ids) for t in lp_traces) / sum(t.wall_s for t in lp_traces)
        one_tps = sum(len(t.output_ids) for t in one_traces) / sum(t.wall_s for t in one_traces)
        proj = {"trace_model": [lp_project(t, a.device, a.gpus, a.link, "fp16") for t in one_traces],
                "llama_7b": [lp_project(t, a.device, a.gpus, a.link, "fp16", arch=LLAMA_7B) for t in one_traces]}
        mean = {k: {m: statistics.mean(p[m] for p in v) for m in ("speedup_vs_greedy", "speedup_vs_one_gpu_lookahead")}
                for k, v in proj.items()}
        result = {"world_size": world, "backend": backend, "model": getattr(model, "name_or_path_", ""),
                  "shape": shape, "prompts": len(texts), "max_new_tokens": a.max_new_tokens,
                  "identical_tokens": same, "lp_tokens_per_s": lp_tps, "one_process_tokens_per_s": one_tps,
                  "per_rank": rows, "load_avg": load_avg, "cpu_count": os.cpu_count(),
                  "projection_inputs": proj["llama_7b"][0]["inputs"], "projection_mean": mean,
                  "date": time.strftime("%Y-%m-%d")}
        name = f"lp-cpu-{Path(result['model']).name or 'model'}-{world}"
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(result, indent=1))
        lines = [f"# Lookahead parallelism, {world} processes ({backend}), {result['model']}", "",
                 f"`torchrun --nproc-per-node {world} bench/methods/lp_bench.py {' '.join(argv or sys.argv[1:])}` on "
                 f"{os.cpu_count()} CPU cores, load average {load_avg[0]:.2f}; W={a.window} N={a.ngram} G={a.guesses}, "
                 f"{len(texts)} prompts x {a.max_new_tokens} tokens. Tokens identical to one-process lookahead: {same}.",
                 "", "| rank | median compute ms / step | median communication ms / step | median query tokens |",
                 "|---|---|---|---|"]
        lines += [f"| {r['rank']} | {r['compute_ms']:.2f} | {r['comm_ms']:.2f} | {r['query']:.0f} |" for r in rows]
        lines += ["", f"Measured: LP {lp_tps:.1f} tokens/s, one process {one_tps:.1f} tokens/s (same cores shared by "
                      "both ranks: no speed-up is expected here).", "",
                  f"Projection ({a.gpus} x {a.device}, {a.link}, fp16, datasheet rooflines; profiling/interconnect.py, "
                  "not a measurement), these runs' steps replayed:",
                  f"- with the traced model's shape: {mean['trace_model']['speedup_vs_greedy']:.2f}x vs greedy, "
                  f"{mean['trace_model']['speedup_vs_one_gpu_lookahead']:.2f}x vs one-GPU lookahead",
                  f"- with LLaMA-2-7B's shape: {mean['llama_7b']['speedup_vs_greedy']:.2f}x vs greedy, "
                  f"{mean['llama_7b']['speedup_vs_one_gpu_lookahead']:.2f}x vs one-GPU lookahead"]
        (out / f"{name}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
