"""Is the engine slower than at an older commit? CPU time per token of greedy, lookahead and prompt lookup,
old commit vs this checkout, on the embedded models, interleaved (old, new, old, new, ...).

Why CPU time: the dev box is shared; one-thread process time is the work, wall time is the neighbours too.
Each measurement is a fresh subprocess inside that tree, so each side imports its own decoding/.

    python bench/compare/ab_commits.py --old 64f0417 [--reps 3] [--prompts 6] [--tokens 96]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = [("greedy", {}), ("lookahead", {"window": 1, "ngram": 3, "guesses": 1}), ("prompt_lookup", {})]
CODE = r'''
import json, sys, time
import torch
sys.path.insert(0, ".")
torch.set_num_threads(1)
from decoding import load, run
method, kw, prompts, n_new = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
model, tok = load()
run(model, tok, prompts[0], method, max_new_tokens=8, **kw)
t0, n = time.process_time(), 0
for p in prompts:
    n += len(run(model, tok, p, method, max_new_tokens=n_new, trace=False, **kw).output_ids)
print(json.dumps({"cpu_ms_per_token": (time.process_time() - t0) * 1e3 / n}))
'''


def measure(tree: Path, method: str, kw: dict, prompts: list[str], tokens: int) -> float:
    out = subprocess.run([sys.executable, "-c", CODE, method, json.dumps(kw), json.dumps(prompts), str(tokens)],
                         cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["cpu_ms_per_token"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="commit to compare with (checked out into a temporary worktree)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=96)
    a = ap.parse_args()
    lines = (ROOT / "bench" / "prompts" / "code.jsonl").read_text().splitlines()[:a.prompts]
    prompts = [json.loads(x)["prompt"] for x in lines]
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), a.old], check=True)
        try:
            times: dict = {}
            for _ in range(a.reps):
                for method, kw in CASES:
                    for side, tree in (("old", old), ("new", ROOT)):
                        times.setdefault((method, side), []).append(measure(tree, method, kw, prompts, a.tokens))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    for method, _ in CASES:
        o, n = statistics.median(times[(method, "old")]), statistics.median(times[(method, "new")])
        print(f"{method}: {a.old} {o:.2f} ms/token CPU, this checkout {n:.2f}: {o / n:.2f}x the old speed")


if __name__ == "__main__":
    main()
