"""Pick lookahead W/N/G for this model, device and prompt from measurements instead of folklore.

Why: the paper's GPU defaults (N=5, W=15, G=15: 120 query tokens per step) are 2x slower than greedy on a
CPU, where a 16-token step already costs ~1.75 one-token steps. Speed = compression / step latency, and
both are measurable: the step-latency curve (profiling.sweep) gives the cost of a step of q tokens on
this device, and short pilot runs on the user's own prompt give each candidate configuration's
compression. The winner maximises predicted tokens per second = compression / latency(q).
"""
from __future__ import annotations

import bisect
from typing import Any

from decoding import make_drafter, run

from .sweep import latency_sweep

# (W, N, G): from a near-greedy step to the paper's GPU setting.
GRID = [(1, 3, 1), (2, 3, 2), (3, 3, 3), (2, 4, 2), (3, 4, 3), (5, 4, 5), (3, 5, 3), (5, 5, 5),
        (7, 5, 7), (10, 5, 10), (15, 5, 15), (5, 7, 5), (10, 7, 10)]


def query_tokens(W: int, N: int, G: int) -> int:
    """Window plus at most G candidates of N-1 tokens: (W + G)(N - 1)."""
    return (W + G) * (N - 1)


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


def autotune(model, tokenizer, prompt: str | list[int], *, pilot_tokens: int = 48, grid=GRID,
             curve: dict[int, float] | None = None, kv_len: int = 256) -> dict[str, Any]:
    """Measure (or take) the latency curve, pilot every grid config on the prompt, rank by predicted speed.

    Returns {"best": {window, ngram, guesses}, "curve": {q: ms}, "ranking": [...]} — plain data."""
    if curve is None:
        sizes = tuple(sorted({1, 2, 4, 8, 16, 32, 64, 128} | {query_tokens(*c) for c in grid if query_tokens(*c) <= 128}))
        sweep = latency_sweep(model, kv_len=kv_len, sizes=sizes, reps=5)
        curve = {p["n_query"]: p["ms"] for p in sweep["points"]}
    curve = monotone(curve)
    base = interpolate(curve, 1)
    ranking = []
    for W, N, G in grid:
        tr = run(model, tokenizer, prompt, "lookahead", max_new_tokens=pilot_tokens, trace=False,
                 drafter=make_drafter("lookahead", window=W, ngram=N, guesses=G))
        st = tr.stats()
        decode_steps = max(st["steps"] - 1, 1)
        compression = max(st["new_tokens"] - 1, 1) / decode_steps  # decode steps only: prefill is shared
        decode = tr.steps[1:] or tr.steps
        q_mean = sum(s.n_query for s in decode) / len(decode)  # G' < G when the pool has fewer candidates
        ms = interpolate(curve, round(q_mean))
        ranking.append({"window": W, "ngram": N, "guesses": G, "query_tokens": q_mean,
                        "compression": compression, "step_ms": ms,
                        "predicted_speedup": compression * base / ms})
    ranking.sort(key=lambda r: -r["predicted_speedup"])
    best = {k: ranking[0][k] for k in ("window", "ngram", "guesses")}
    return {"best": best, "curve": {str(k): v for k, v in sorted(curve.items())}, "ranking": ranking}
