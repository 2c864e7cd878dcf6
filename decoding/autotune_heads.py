"""Pick the Medusa / EAGLE tree budget (nodes verified per step) for this model, heads and device by timing
short pilot runs, as jacobi.autotune_block and autotune_speculative do.

Why wall-clock: a bigger tree accepts a few more tokens per step but costs a wider target forward (cheap on
a GPU, several 1-token steps on a CPU) and, for EAGLE, more head work per step; the pilot's own time
counts all three. Every budget runs on every pilot prompt `reps` times, interleaved, and keeps its fastest
repetition (on a shared machine noise only ever adds time).
"""
from __future__ import annotations

import time
from typing import Any

from .api import HEADS_METHODS, run

BUDGETS = (4, 8, 16, 24)


def autotune_heads(model, tokenizer, prompt: str | list[int] | list[str], method: str, heads: str, *,
                   pilot_tokens: int = 32, budgets=BUDGETS, reps: int = 2) -> dict[str, Any]:
    """Rank tree budgets by measured tokens/s on the pilot prompt(s).

    Returns {"best": budget, "ranking": [{"budget", "compression", "tokens_per_s"}, ...]} — plain data."""
    if method not in HEADS_METHODS:
        raise ValueError(f"autotune_heads tunes {' and '.join(HEADS_METHODS)}, not {method!r}")
    pilots = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else [prompt]
    best_s = {b: float("inf") for b in budgets}
    stats: dict[int, tuple[int, int]] = {}
    for _ in range(max(reps, 1)):
        for b in budgets:
            t0, tokens, steps = time.perf_counter(), 0, 0
            for p in pilots:
                st = run(model, tokenizer, p, method, max_new_tokens=pilot_tokens, trace=False,
                         heads=heads, budget=b).stats()
                tokens, steps = tokens + st["new_tokens"], steps + st["steps"]
            best_s[b] = min(best_s[b], time.perf_counter() - t0)
            stats[b] = (tokens, steps)
    ranking = [{"budget": b, "compression": stats[b][0] / max(stats[b][1], 1),
                "tokens_per_s": stats[b][0] / best_s[b]} for b in budgets]
    ranking.sort(key=lambda r: -r["tokens_per_s"])
    return {"best": ranking[0]["budget"], "ranking": ranking}
