"""Pick the Medusa / EAGLE tree budget (nodes verified per step; EAGLE's depth and beam follow it) and the
confidence cut for this model, heads and device by timing short pilot runs, as
jacobi.autotune_block and autotune_speculative do.

Why wall-clock: a bigger tree accepts a few more tokens per step but costs a wider target forward (cheap on
a GPU, several 1-token steps on a CPU) and, for EAGLE, more head work per step; the pilot's own time
counts all three. The cut (EAGLE nodes whose path probability is below it are not verified) trades tokens
per step for fewer verified rows: it paid on the 2-core CPU (bench/eagle_shapes.py: budget 16 0.89x -> 1.06x
greedy) and should not on a GPU, where extra rows are nearly free, so it is measured too. Every setting
runs on every pilot prompt `reps` times, interleaved, and keeps its fastest repetition (on a shared machine
noise only ever adds time).
"""
from __future__ import annotations

import time
from typing import Any

from .api import HEADS_METHODS, run

BUDGETS = (4, 8, 16, 24)
CUTS = (0.0, 0.1)  # the confidence cut: nodes whose path probability is below it are not verified


def autotune_heads(model, tokenizer, prompt: str | list[int] | list[str], method: str, heads: str, *,
                   pilot_tokens: int = 32, budgets=BUDGETS, cuts=CUTS, reps: int = 2) -> dict[str, Any]:
    """Rank tree budgets x confidence cuts by measured tokens/s on the pilot prompt(s).

    Returns {"best": budget, "params": the winner's drafter parameters, "ranking": [{"budget", "confidence",
    "compression", "tokens_per_s"}, ...]} — plain data."""
    if method not in HEADS_METHODS:
        raise ValueError(f"autotune_heads tunes {' and '.join(HEADS_METHODS)}, not {method!r}")
    pilots = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else [prompt]
    settings = [(b, c) for b in budgets for c in cuts]
    best_s = {k: float("inf") for k in settings}
    stats: dict[tuple, tuple[int, int]] = {}
    for _ in range(max(reps, 1)):
        for b, c in settings:
            t0, tokens, steps = time.perf_counter(), 0, 0
            for p in pilots:
                st = run(model, tokenizer, p, method, max_new_tokens=pilot_tokens, trace=False,
                         heads=heads, budget=b, confidence=c).stats()
                tokens, steps = tokens + st["new_tokens"], steps + st["steps"]
            best_s[b, c] = min(best_s[b, c], time.perf_counter() - t0)
            stats[b, c] = (tokens, steps)
    ranking = [{"budget": b, "confidence": c, "compression": stats[b, c][0] / max(stats[b, c][1], 1),
                "tokens_per_s": stats[b, c][0] / best_s[b, c]} for b, c in settings]
    ranking.sort(key=lambda r: -r["tokens_per_s"])
    top = ranking[0]
    params = {"budget": top["budget"], "confidence": top["confidence"]}
    return {"best": top["budget"], "params": params, "ranking": ranking}


def label(r: dict) -> str:
    """'budget 8' or 'budget 8, cut 0.1' (one ranking row or parameter set)."""
    c = r.get("confidence")
    return f"budget {r['budget']}" + (f", cut {c:g}" if c else "")
