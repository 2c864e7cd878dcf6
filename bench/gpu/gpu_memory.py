"""GPU memory of a long-lived server: 100 mixed runs (methods x lengths) on the embedded pair, memory after
the first 10 against after all 100 (goal: within 1.1x), with the static-cache pool's contents.

    python bench/gpu/gpu_memory.py --out DIR     # on the GPU (embedded models, their default dtype)
    python bench/gpu/gpu_memory.py --quick       # CPU, tiny models, a few runs: checks it runs

Memory = torch.cuda.memory_allocated / memory_reserved on CUDA; on CPU the pool's bytes (cache_pool)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from decoding import generate, load, make_drafter  # noqa: E402
from decoding.methods.registry import SPECS  # noqa: E402
from decoding.fast.cache_pool import pool_status  # noqa: E402
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET  # noqa: E402

MIX = [("greedy", {}), ("lookahead", dict(window=15, ngram=5, guesses=15)), ("prompt_lookup", {}),
       ("speculative", dict(tree=[2, 1, 1, 1, 1], staged=True)), ("lookahead", dict(window=5, ngram=4, guesses=5))]
LENGTHS = [16, 96, 400, 32, 200]


def memory(device: str, target) -> dict:
    pool = pool_status(target)
    out = {"pool_caches": len(pool["caches"]), "pool_bytes": sum(c["bytes"] for c in pool["caches"])}
    if device == "cuda":
        torch.cuda.synchronize()
        out.update(allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved())
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() and not a.quick else "cpu"
    if a.quick:
        from bench import tiny_dir
        t, d, runs, scale = tiny_dir(seed=0), tiny_dir(seed=1), 12, 8
    else:
        t, d, runs, scale = EMBEDDED_TARGET, EMBEDDED_DRAFT, a.runs, 1
    target, tok = load(t, device=device)
    draft, _ = load(d, device=device)
    prompt = tok("def read_config(path):\n    with open(path) as f:\n")["input_ids"]
    marks = {}
    for i in range(runs):
        method, params = MIX[i % len(MIX)]
        if "draft_model" in SPECS[method].needs:
            params = dict(params, draft_model=draft)
        generate(target, prompt, make_drafter(method, **params), max_new_tokens=max(4, LENGTHS[i % len(LENGTHS)] // scale),
                 trace=i % 2 == 0, static=True if a.quick else None)
        if i + 1 in (10, runs):
            marks[i + 1] = memory(device, target)
    key = "reserved" if device == "cuda" else "pool_bytes"
    ratio = marks[runs][key] / max(marks[10][key], 1)
    doc = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "runs": runs, "mix": MIX,
           "lengths": LENGTHS, "after_10": marks[10], f"after_{runs}": marks[runs], "measure": key, "ratio": ratio,
           "goal": 1.1, "pass": ratio <= 1.1, "command": "python bench/gpu/gpu_memory.py " + " ".join(argv or sys.argv[1:])}
    text = (f"GPU memory ({doc['device']}, {runs} mixed runs): {key} after 10 runs {marks[10][key] / 2**20:.0f} MiB, "
            f"after {runs} {marks[runs][key] / 2**20:.0f} MiB = {ratio:.2f}x (goal <= 1.1x); pool "
            f"{marks[runs]['pool_caches']} caches, {marks[runs]['pool_bytes'] / 2**20:.0f} MiB.")
    print(text)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_memory.json").write_text(json.dumps(doc, indent=1, default=str))
        (out / "gpu_memory.md").write_text(text + "\n")
    return doc


if __name__ == "__main__":
    main()
