"""Medusa's and EAGLE's tuner: the tree budget and the confidence cut, timed on the wall clock.

A bigger tree accepts a few more tokens per step but costs a wider target forward and, for EAGLE, more head
work; the cut paid on the 2-core CPU (bench/methods/eagle_shapes.py) and should not on a GPU, so it is measured too.
decoding/tuning/tune.py drives it and lends it the API (PilotKit): a method's file may not import the API.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from decoding.methods.spec import PilotKit, Tuner

BUDGETS = (4, 8, 16, 24)
CUTS = (0.0, 0.1)  # the confidence cut: nodes whose path probability is below it are not verified


def autotune_heads(kit: PilotKit, model, tokenizer, prompt: str | list[int] | list[str], method: str, heads: str, *,
                   pilot_tokens: int = 32, budgets=BUDGETS, cuts=CUTS, reps: int = 2,
                   pause=nullcontext) -> dict[str, Any]:
    """Rank tree budgets x confidence cuts by measured tokens/s on the pilot prompt(s).

    Returns {"best": budget, "params": the winner's drafter parameters, "ranking": [{"budget", "confidence",
    "compression", "tokens_per_s"}, ...], "pilots": n} — plain data."""
    tuned = [n for n, s in kit.specs.items() if "heads" in s.needs]
    if method not in tuned:
        raise ValueError(f"autotune_heads tunes {' and '.join(tuned)}, not {method!r}")
    settings = [(b, c) for b in budgets for c in cuts]
    runs = {f"{b}|{c}": (method, dict(heads=heads, budget=b, confidence=c)) for b, c in settings}
    pilots = kit.pilots(prompt)
    t = kit.time_pilots(model, tokenizer, pilots, runs, pilot_tokens=pilot_tokens, reps=reps, pause=pause)
    ranking = [{"budget": b, "confidence": c, "compression": t[f"{b}|{c}"]["compression"],
                "tokens_per_s": t[f"{b}|{c}"]["tokens_per_s"]} for b, c in settings]
    ranking.sort(key=lambda r: -r["tokens_per_s"])
    top = ranking[0]
    return {"best": top["budget"], "params": {"budget": top["budget"], "confidence": top["confidence"]},
            "ranking": ranking, "pilots": len(pilots)}


def heads_label(r: dict) -> str:
    """'budget 8' or 'budget 8, cut 0.1' (one ranking row or parameter set)."""
    c = r.get("confidence")
    return f"budget {r['budget']}" + (f", cut {c:g}" if c else "")


def _run(kit: PilotKit, model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None,
         draft_tokenizer=None, **fixed) -> dict:
    res = autotune_heads(kit, model, tok, prompts, method, heads, pilot_tokens=pilot_tokens, reps=reps, **fixed)
    return {"params": res["params"], "label": f"tree {heads_label(res['params'])}", "result": res,
            "detail": ", ".join(f"{heads_label(r)}: {r['tokens_per_s']:.1f} tokens/s" for r in res["ranking"])}


def measured(res: dict) -> str:
    r = res["ranking"]
    top = "; ".join(f"tree {heads_label(x)}: {x['compression']:.2f} tokens/step, {x['tokens_per_s']:.1f} tokens/s"
                    for x in r[:2])
    return f"timed {len(r)} tree budgets (and cuts) on {res.get('pilots', 1)} prompts, best first: {top}"


TUNER = Tuner(_run, ("budget",), "tree budget",
              pilot_runs=lambda prompts, reps: len(BUDGETS) * len(CUTS) * prompts * reps,
              fixed=lambda p: {"cuts": (p["confidence"],)} if p.get("confidence") is not None else {},
              measured=measured)
