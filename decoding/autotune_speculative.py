"""Pick the speculative shape (chain length K, tree widths, staged or not) for this target, draft, device
and prompts by timing short pilot runs.

Why wall-clock here, when lookahead's autotune prices steps from a latency curve: a speculative step costs
the target's forward plus up to K sequential draft forwards (fewer when the confidence stop fires), so the
target's curve alone mispredicts it; a pilot's own time includes both. Every shape runs on every pilot
prompt `reps` times, interleaved with plain greedy, and keeps its fastest repetition (on a shared machine
noise only ever adds time).
"""
from __future__ import annotations

import time
from typing import Any

from .api import run

SHAPES: list[dict] = [dict(draft_tokens=2), dict(draft_tokens=3), dict(draft_tokens=4), dict(draft_tokens=6),
                      dict(tree=[2, 1, 1]), dict(tree=[4, 2]), dict(tree=[3, 2, 1]),
                      dict(draft_tokens=6, staged=True), dict(tree=[2, 1, 1, 1, 1], staged=True)]


def label(shape: dict) -> str:
    """'chain K4', 'tree 3,2,1', 'staged chain K6' ... for tables and CLI messages."""
    kind = f"tree {','.join(map(str, shape['tree']))}" if "tree" in shape else f"chain K{shape.get('draft_tokens')}"
    return ("staged " if shape.get("staged") else "") + kind


def autotune_speculative(target, draft, tokenizer, prompt: str | list[int] | list[str], *, pilot_tokens: int = 32,
                         shapes: list[dict] = SHAPES, reps: int = 2) -> dict[str, Any]:
    """Time greedy and each shape on the pilot prompt(s); rank shapes by speed-up over greedy.

    Returns {"best": shape kwargs, "ranking": [...], "greedy_tokens_per_s": float} — plain data."""
    pilots = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else [prompt]
    runs = {"greedy": ("greedy", {})} | {label(s): ("speculative", dict(draft_model=draft, **s)) for s in shapes}
    best_s = {name: float("inf") for name in runs}
    stats: dict[str, tuple[int, int]] = {}
    for _ in range(max(reps, 1)):
        for name, (method, params) in runs.items():
            t0, tokens, steps = time.perf_counter(), 0, 0
            for p in pilots:
                st = run(target, tokenizer, p, method, max_new_tokens=pilot_tokens, trace=False, **params).stats()
                tokens, steps = tokens + st["new_tokens"], steps + st["steps"]
            best_s[name] = min(best_s[name], time.perf_counter() - t0)
            stats[name] = (tokens, steps)
    greedy_s = best_s["greedy"]
    ranking = [{"label": label(s), "shape": s, "tokens_per_s": stats[label(s)][0] / best_s[label(s)],
                "compression": stats[label(s)][0] / max(stats[label(s)][1], 1),
                "speedup": greedy_s / best_s[label(s)]} for s in shapes]
    ranking.sort(key=lambda r: -r["speedup"])
    return {"best": dict(ranking[0]["shape"]), "ranking": ranking,
            "greedy_tokens_per_s": stats["greedy"][0] / greedy_s}
