"""What the Run tab's always-on profile costs: a 400-token lookahead run of the embedded model, then the
analytic per-step costs (appkit.run.costs.run_costs) and the step view drawn with and without its cost panel.

Why: profiling stays on by default only if it costs under 10% of the run. Prints the share per
repetition (the first one pays one-time imports and is reported separately). Run:
    python bench/kernels/profile_cost.py [--tokens 400] [--reps 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import viz  # noqa: E402
from appkit.run.costs import run_costs  # noqa: E402
from appkit.run.presets import SHIPPED_CPU  # noqa: E402
from appkit.page.ui import EXAMPLES  # noqa: E402
from decoding import load, run  # noqa: E402
from decoding.models import EMBEDDED_TARGET  # noqa: E402


def once(model, tok, prompt: str, tokens: int) -> tuple[float, float]:
    """(run seconds, profile seconds = costs + the panel's share of drawing the step view)."""
    t0 = time.perf_counter()
    tr = run(model, tok, prompt, "lookahead", max_new_tokens=tokens, **SHIPPED_CPU["lookahead"])
    t1 = time.perf_counter()
    costs = run_costs(tr, model)
    t2 = time.perf_counter()
    viz.step_view_html(tr, profile=costs, initial_step=len(tr.steps) - 1)
    t3 = time.perf_counter()
    viz.step_view_html(tr, initial_step=len(tr.steps) - 1)
    t4 = time.perf_counter()
    return t1 - t0, (t2 - t1) + max(0.0, (t3 - t2) - (t4 - t3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load(EMBEDDED_TARGET)
    prompt = EXAMPLES[0][0]  # the app's default prompt
    first = once(model, tok, prompt, 16)
    print(f"first call (imports, one-time): profile {first[1]:.3f} s")
    shares = []
    for _ in range(args.reps):
        r, p = once(model, tok, prompt, args.tokens)
        shares.append(p / r)
        print(f"run {r:.3f} s, profile {p:.3f} s = {p / r:.1%}")
    print(f"median profile share {statistics.median(shares):.1%} of a {args.tokens}-token run "
          f"({torch.__version__}, {torch.get_num_threads()} thread)")


if __name__ == "__main__":
    main()
