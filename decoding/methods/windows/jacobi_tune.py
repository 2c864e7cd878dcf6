"""Plain Jacobi's tuner: the block size, timed on the wall clock (decoding/tuning/tune.py drives it, PilotKit).

Why a tuner at all: compression hardly grows with K on real models (a guess made from a wrong left context
is rarely right) while a K-token step costs more than a 1-token step, so the best K is usually small, and how
small depends on the device's latency curve.
"""
from __future__ import annotations

from contextlib import nullcontext

from decoding.methods.spec import PilotKit, Tuner

BLOCKS = (1, 2, 4, 8, 16)


def autotune_block(kit: PilotKit, model, tokenizer, prompt: str | list[int], *, pilot_tokens: int = 32,
                   blocks=BLOCKS, reps: int = 2, pause=nullcontext) -> dict:
    """The block size with the best measured tokens/s on this prompt and device.
    Returns {"best": K, "ranking": [{"block", "compression", "tokens_per_s"}, ...]}."""
    runs = {str(k): ("jacobi", {"block": k}) for k in blocks}
    t = kit.time_pilots(model, tokenizer, [prompt], runs, pilot_tokens=pilot_tokens, reps=reps, pause=pause)
    rows = [{"block": k, "compression": t[str(k)]["compression"], "tokens_per_s": t[str(k)]["tokens_per_s"]}
            for k in blocks]
    rows.sort(key=lambda r: -r["tokens_per_s"])
    return {"best": rows[0]["block"], "ranking": rows}


def _run(kit: PilotKit, model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None,
         draft_tokenizer=None, **fixed) -> dict:
    res = autotune_block(kit, model, tok, kit.pilots(prompts)[0], pilot_tokens=pilot_tokens, reps=reps, **fixed)
    return {"params": {"block": res["best"]}, "label": f"block {res['best']}", "result": res}


TUNER = Tuner(_run, ("block",), "block", pilot_runs=lambda prompts, reps: len(BLOCKS) * reps, reps=2)
