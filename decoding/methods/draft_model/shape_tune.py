"""Speculative decoding's tuner: the draft shape, timed on the wall clock against greedy.

A speculative step costs the target's forward plus up to K sequential draft forwards, so the target's
latency curve alone mispredicts it; a pilot's own time counts everything. decoding/tuning/tune.py drives it and
lends it the API (PilotKit): a method's file may not import the API. The Tuner itself is
declared in speculative.py, which checks the draft against the target before any pilot runs.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from decoding.methods.spec import BASELINE, PilotKit

SHAPES: list[dict] = [dict(draft_tokens=2), dict(draft_tokens=3), dict(draft_tokens=4), dict(draft_tokens=6),
                      dict(tree=[2, 1, 1]), dict(tree=[4, 2]), dict(tree=[3, 2, 1]),
                      dict(draft_tokens=6, staged=True), dict(tree=[2, 1, 1, 1, 1], staged=True)]


def label(shape: dict) -> str:
    """'chain K4', 'tree 3,2,1', 'staged chain K6' ... for tables and CLI messages."""
    kind = f"tree {','.join(map(str, shape['tree']))}" if "tree" in shape else f"chain K{shape.get('draft_tokens')}"
    return ("staged " if shape.get("staged") else "") + kind


def autotune_speculative(kit: PilotKit, target, draft, tokenizer, prompt: str | list[int] | list[str], *,
                         pilot_tokens: int = 32, shapes: list[dict] = SHAPES, reps: int = 2,
                         pause=nullcontext) -> dict[str, Any]:
    """Time greedy and each shape on the pilot prompt(s); rank shapes by speed-up over greedy.

    Returns {"best": shape kwargs, "ranking": [...], "greedy_tokens_per_s": float} — plain data."""
    runs = {BASELINE: (BASELINE, {})} | {label(s): ("speculative", dict(draft_model=draft, **s)) for s in shapes}
    t = kit.time_pilots(target, tokenizer, kit.pilots(prompt), runs, pilot_tokens=pilot_tokens, reps=reps,
                        pause=pause)
    greedy_s = t[BASELINE]["seconds"]
    ranking = [{"label": label(s), "shape": s, "tokens_per_s": t[label(s)]["tokens_per_s"],
                "compression": t[label(s)]["compression"], "speedup": greedy_s / t[label(s)]["seconds"]}
               for s in shapes]
    ranking.sort(key=lambda r: -r["speedup"])
    return {"best": dict(ranking[0]["shape"]), "ranking": ranking, "greedy_tokens_per_s": t[BASELINE]["tokens_per_s"]}


def measured(res: dict) -> str:
    r = res["ranking"]
    top = "; ".join(f"{x['label']}: {x['compression']:.2f} tokens/step, {x['speedup']:.2f}x greedy" for x in r[:2])
    return f"timed greedy ({res['greedy_tokens_per_s']:.0f} tokens/s) and {len(r)} draft shapes, best first: {top}"


