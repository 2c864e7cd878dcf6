"""Mean accepted tokens per decode step of the shipped heads by tree budget, on every held-out code prompt
(acceptance does not depend on machine load, so this needs no interleaving; bench_heads.py times them).

    nice -n 19 python bench/methods/heads_acceptance.py eagle 8,16,32 [HEADS_ROOT (default assets/heads)] [k=v ...]

k=v: more drafter options, e.g. depth=8 branch=8 beam=8; temperature=T (and seed=S) samples instead of
greedy, e.g. `medusa 8 temperature=1.0 acceptance=typical` beside `medusa 8 temperature=1.0`; model=M (default:
the embedded target) and prompts=SET (a bench/prompts set, default code; chat requests get the chat template),
e.g. `eagle 8,16 assets/heads/smollm2 model=default prompts=heldout_chat`.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from decoding import Sampling, load, run  # noqa: E402
from decoding.models import EMBEDDED_TARGET  # noqa: E402


def main() -> None:
    kind, budgets = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]
    rest = sys.argv[3:]
    root = Path(rest.pop(0)) if rest and "=" not in rest[0] else ROOT / "assets" / "heads"
    extra = {k: _value(v) for k, v in (a.split("=") for a in rest)}
    sampling = Sampling(float(extra.pop("temperature", 0.0)), seed=int(extra.pop("seed", 0)))
    torch.set_num_threads(1)
    name = extra.pop("model", "embedded")
    model, tok = load(None if name == "default" else EMBEDDED_TARGET if name == "embedded" else name)
    sys.path.insert(0, str(ROOT / "bench"))
    from bench import load_prompts
    prompts = [p["prompt"] for p in load_prompts([extra.pop("prompts", "code")], tok)]
    for b in budgets:
        acc = dec = 0
        t0 = time.time()
        for p in prompts:
            tr = run(model, tok, p, kind, max_new_tokens=96, heads=str(root / kind), budget=b, sampling=sampling,
                     **extra)
            steps = [s for s in tr.steps if s.kind == "decode"]
            acc += sum(len(s.accepted) for s in steps)
            dec += len(steps)
        temp = f" temperature {sampling.temperature:g}" if not sampling.greedy else ""
        print(f"{kind} budget {b}{temp} {extra or ''}: mean accepted/step {acc / dec:.3f} over {len(prompts)} prompts "
              f"({time.time() - t0:.0f} s)", flush=True)


def _value(v: str) -> int | float | str:
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


if __name__ == "__main__":
    main()
