"""Mean accepted tokens per decode step of the shipped heads by tree budget, on every held-out code prompt
(acceptance does not depend on machine load, so this needs no interleaving; bench_heads.py times them).

    nice -n 19 python bench/heads_acceptance.py eagle 8,16,32 [HEADS_ROOT (default assets/heads)] [k=v ...]

k=v: more drafter options, e.g. depth=8 branch=8 beam=8.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from decoding import load, run  # noqa: E402


def main() -> None:
    kind, budgets = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]
    rest = sys.argv[3:]
    root = Path(rest.pop(0)) if rest and "=" not in rest[0] else ROOT / "assets" / "heads"
    extra = {k: int(v) for k, v in (a.split("=") for a in rest)}
    torch.set_num_threads(1)
    model, tok = load()
    prompts = [json.loads(line)["prompt"] for line in (ROOT / "bench" / "prompts" / "code.jsonl").open()]
    for b in budgets:
        acc = dec = 0
        t0 = time.time()
        for p in prompts:
            tr = run(model, tok, p, kind, max_new_tokens=96, heads=str(root / kind), budget=b, **extra)
            steps = [s for s in tr.steps if s.kind == "decode"]
            acc += sum(len(s.accepted) for s in steps)
            dec += len(steps)
        print(f"{kind} budget {b} {extra or ''}: mean accepted/step {acc / dec:.3f} over {len(prompts)} prompts "
              f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
