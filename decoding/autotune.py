"""Pick lookahead W/N/G for this model, device and prompt from measurements instead of folklore.

Why: the paper's GPU defaults (N=5, W=15, G=15: 120 query tokens per step) are 2x slower than greedy on a
CPU, where a 16-token step already costs ~1.75 one-token steps. Speed = compression / step latency, and
both are measurable: the step-latency curve (decoding.timing) gives the cost of a step of q tokens on
this device, and short pilot runs on the user's own prompt give each candidate configuration's
compression. The winner maximises predicted tokens per second: new tokens / the summed latency of the
steps the pilot really took (each step's own query size, so steps without candidates count as cheap).
Several pilot prompts make the choice less hostage to one prompt (a single pilot once picked a config
at 1.11x while fixed ones reached 1.33x).
"""
from __future__ import annotations

import bisect
from typing import Any

from .api import make_drafter, run
from .models import fitting_sizes, max_positions
from .timing import latency_curve

# (W, N, G): from a near-greedy step to the paper's GPU setting.
GRID = [(1, 3, 1), (1, 3, 2), (1, 4, 1), (1, 4, 2), (1, 5, 2), (2, 3, 2), (2, 4, 2), (2, 5, 2), (3, 4, 3),
        (5, 4, 5), (3, 5, 3), (5, 5, 5), (7, 5, 7), (10, 5, 10), (15, 5, 15), (5, 7, 5), (10, 7, 10)]


def interpolate(curve: dict[int, float], q: int) -> float:
    """Latency of a q-token step from the measured sizes (linear between, extrapolated beyond)."""
    xs = sorted(curve)
    if q in curve:
        return curve[q]
    i = bisect.bisect_left(xs, q)
    if i == 0:
        return curve[xs[0]]
    if i == len(xs):
        a, b = xs[-2], xs[-1]
    else:
        a, b = xs[i - 1], xs[i]
    return curve[a] + (curve[b] - curve[a]) * (q - a) / (b - a)


def monotone(curve: dict[int, float]) -> dict[int, float]:
    """A bigger step cannot be cheaper than a smaller one: lower noisy small sizes to the running
    minimum from above, so one slow sample of the 1-token step does not inflate every prediction."""
    out, low = {}, float("inf")
    for q in sorted(curve, reverse=True):
        low = min(low, curve[q])
        out[q] = low
    return dict(sorted(out.items()))


def autotune(model, tokenizer, prompt: str | list[int] | list[str], *, pilot_tokens: int = 48, grid=GRID,
             curve: dict[int, float] | None = None, kv_len: int = 256, **params) -> dict[str, Any]:
    """Measure (or take) the latency curve, pilot every grid config on the prompt(s), rank by predicted speed.
    params: other lookahead parameters, fixed (e.g. text_span).

    Returns {"best": {window, ngram, guesses}, "curve": {q: ms}, "ranking": [...]} — plain data."""
    pilots = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else [prompt]
    if curve is None:
        sizes, kv = fitting_sizes(model.config, sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128}), kv_len)
        curve = latency_curve(model, kv, sizes, reps=5)[2]
    curve = monotone(curve)
    base = interpolate(curve, 1)
    limit = max_positions(model.config)
    longest = max(len(p) if isinstance(p, list) else len(tokenizer(p)["input_ids"]) for p in pilots)
    ranking = []
    for W, N, G in grid:
        drafter = make_drafter("lookahead", window=W, ngram=N, guesses=G, **params)
        if limit is not None and longest + pilot_tokens + drafter.max_depth() > limit:
            continue  # this shape's window would reach past the model's positions
        tokens, decode = 0, []
        for p in pilots:
            tr = run(model, tokenizer, p, "lookahead", max_new_tokens=pilot_tokens, trace=False,
                     drafter=make_drafter("lookahead", window=W, ngram=N, guesses=G, **params))
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
    return {"best": best, "curve": {str(k): v for k, v in sorted(curve.items())}, "ranking": ranking}
