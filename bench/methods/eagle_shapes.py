"""EAGLE tree shapes on this machine: speed against greedy and tokens per step, one interleaved run.

Why: on a CPU every drafting level (one EAGLE-layer call + the LM head over the beam) and every verified
node costs real time, so the best shape is not the paper's. Rows: budgets with the shape that follows them
(eagle.tree_shape), the drafting vocabulary (all 8,192 tokens vs the default quarter, heads.DraftLM) and
the confidence cut. Prompts: the held-out code prompts (bench/prompts/code.jsonl) but the 1,205-token one;
96 new tokens; rounds interleaved.

    python bench/methods/eagle_shapes.py [--rounds 2] [--heads assets/heads/eagle]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from decoding import load, run  # noqa: E402

SHAPES = [dict(budget=16, draft_vocab=0), dict(budget=16), dict(budget=16, confidence=0.1),
          dict(budget=8, draft_vocab=0), dict(budget=8), dict(budget=8, confidence=0.1),
          dict(budget=4), dict(budget=16, depth=6, beam=4)]
COLUMNS = ("budget", "depth", "beam", "draft_vocab", "confidence")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--heads", default=str(ROOT / "assets" / "heads" / "eagle"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load()
    prompts = [json.loads(x)["prompt"] for x in (ROOT / "bench" / "prompts" / "code.jsonl").open()]
    prompts = [p for p in prompts if len(tok(p)["input_ids"]) < 1000]
    rows = [("greedy", {})] + [("eagle", dict(s, heads=a.heads)) for s in SHAPES]
    wall, tokens, steps, cfg = [0.0] * len(rows), [0] * len(rows), [0] * len(rows), [{}] * len(rows)
    for _ in range(a.rounds):
        for p in prompts:
            for i, (m, kw) in enumerate(rows):
                t0 = time.perf_counter()
                tr = run(model, tok, p, m, max_new_tokens=96, trace=False, **kw)
                wall[i] += time.perf_counter() - t0
                st, cfg[i] = tr.stats(), tr.config
                tokens[i], steps[i] = tokens[i] + st["new_tokens"], steps[i] + st["steps"]
    print(f"{len(prompts)} prompts x {a.rounds} rounds, 96 new tokens, 1 thread, torch {torch.__version__}\n")
    print("| method | " + " | ".join(COLUMNS) + " | speed vs greedy | tokens per step |\n|" + "---|" * (len(COLUMNS) + 3))
    for i, (m, kw) in enumerate(rows):
        shape = " | ".join(str(cfg[i].get(k, "")) if kw else "" for k in COLUMNS)
        print(f"| {m} | {shape} | {wall[0] / wall[i]:.2f}x | {tokens[i] / steps[i]:.2f} |")


if __name__ == "__main__":
    main()
