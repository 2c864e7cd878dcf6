"""Lookahead's tuner: W, N, G from the device's latency curve and pilot compression.

The paper's GPU defaults (N=5, W=15, G=15: 120 query tokens per step) are 2x slower than greedy on a CPU,
where a 16-token step already costs ~1.75 one-token steps. Speed = compression / step latency, and both are
measurable: the curve (engine timing) gives the cost of a step of q tokens, and short pilot runs on the
user's own prompts give each configuration's compression. Several pilot prompts make the choice less hostage
to one prompt (a single pilot once picked a config at 1.11x while fixed ones reached 1.33x).
decoding/tuning/tune.py drives it and lends it the API (PilotKit): a method's file may not import the API.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from decoding.engine.timing import interpolate, latency_curve, monotone
from decoding.methods.spec import PilotKit, Tuner
from decoding.models import fitting_sizes, max_positions

# (W, N, G): from a near-greedy step to the paper's GPU setting.
GRID = [(1, 3, 1), (1, 3, 2), (1, 4, 1), (1, 4, 2), (1, 5, 2), (2, 3, 2), (2, 4, 2), (2, 5, 2), (3, 4, 3),
        (5, 4, 5), (3, 5, 3), (5, 5, 5), (7, 5, 7), (10, 5, 10), (15, 5, 15), (5, 7, 5), (10, 7, 10)]


def autotune(kit: PilotKit, model, tokenizer, prompt: str | list[int] | list[str], *, pilot_tokens: int = 48,
             grid=GRID, curve: dict[int, float] | None = None, kv_len: int = 256, pause=nullcontext,
             **params) -> dict[str, Any]:
    """Measure (or take) the latency curve, pilot every grid config on the prompt(s), rank by predicted speed.
    params: other lookahead parameters, fixed (e.g. text_span).

    Returns {"best": {window, ngram, guesses}, "curve": {q: ms}, "ranking": [...], "pilots": n} — plain data."""
    pilots = kit.pilots(prompt)
    if curve is None:
        sizes, kv = fitting_sizes(model.config, sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128}), kv_len)
        with pause():
            curve = latency_curve(model, kv, sizes, reps=5)[2]
    curve = monotone(curve)
    base = interpolate(curve, 1)
    limit = max_positions(model.config)
    longest = max(len(p) if isinstance(p, list) else len(tokenizer(p)["input_ids"]) for p in pilots)
    ranking = []
    for W, N, G in grid:
        drafter = kit.make_drafter("lookahead", window=W, ngram=N, guesses=G, **params)
        if limit is not None and longest + pilot_tokens + drafter.max_depth() > limit:
            continue  # this shape's window would reach past the model's positions
        tokens, decode = 0, []
        for p in pilots:
            with pause():
                tr = kit.run(model, tokenizer, p, "lookahead", max_new_tokens=pilot_tokens, trace=False,
                             drafter=kit.make_drafter("lookahead", window=W, ngram=N, guesses=G, **params))
            tokens += max(len(tr.output_ids) - 1, 0)  # decode steps only: the prefill's token is shared
            decode += tr.steps[1:]
        decode = decode or tr.steps
        q_mean = sum(s.n_query for s in decode) / len(decode)  # G' < G when the pool has fewer candidates
        ms = sum(interpolate(curve, s.n_query) for s in decode) / len(decode)
        compression = max(tokens, 1) / len(decode)
        ranking.append({"window": W, "ngram": N, "guesses": G, "query_tokens": q_mean,
                        "compression": compression, "step_ms": ms,
                        "predicted_speedup": compression * base / ms})
    if not ranking:
        raise ValueError(f"the prompt ({longest} tokens) leaves no room for a lookahead pilot within the model's "
                         f"{limit} positions; shorten it or set --window/--ngram/--guesses yourself")
    ranking.sort(key=lambda r: -r["predicted_speedup"])
    best = {k: ranking[0][k] for k in ("window", "ngram", "guesses")}
    return {"best": best, "curve": {str(k): v for k, v in sorted(curve.items())}, "ranking": ranking,
            "pilots": len(pilots)}


def _run(kit: PilotKit, model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None,
         draft_tokenizer=None, **fixed) -> dict:
    res = autotune(kit, model, tok, prompts, pilot_tokens=pilot_tokens, **fixed)
    b = res["best"]
    return {"params": dict(b), "label": f"window {b['window']}, ngram {b['ngram']}, guesses {b['guesses']}",
            "result": res}


def measured(res: dict) -> str:
    """What it measured, in one sentence: the 1-token step, then best and runner-up."""
    r, curve = res["ranking"], res["curve"]
    top = "; ".join(f"W{x['window']} N{x['ngram']} G{x['guesses']}: {x['compression']:.2f} tokens/step at "
                    f"{x['step_ms']:.1f} ms/step → {x['predicted_speedup']:.2f}x" for x in r[:2])
    return (f"1-token step {float(curve.get('1', 0)):.1f} ms; piloted {len(r)} W/N/G configs on "
            f"{res.get('pilots', 1)} prompts, best first: {top}")


TUNER = Tuner(_run, ("window", "ngram", "guesses"), "shape", pilot_runs=lambda prompts, reps: len(GRID) * prompts,
              measured=measured)
