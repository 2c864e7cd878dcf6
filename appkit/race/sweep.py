"""The lookahead paper's scaling picture on the current model: compression (tokens per step) against the
log of the per-step FLOPs, one line per n-gram size N, one point per window W (G = W); and the same axes
for the self-drafting heads' tree size: one line per heads method (Medusa, EAGLE), one point per tree
budget (nodes verified per step).

Every point is a real greedy lookahead run of the same prompt; FLOPs per step are the analytic counts of
profiling.trace_costs averaged over the decode steps.
"""
from __future__ import annotations

from decoding import run
from decoding.methods.registry import BASELINE
from profiling import trace_costs


def grid(ns: list[int], ws: list[int]) -> list[tuple[int, int]]:
    return [(n, w) for n in sorted(set(ns)) for w in sorted(set(ws))]


def _measured(model, tr, **keys) -> dict:
    """A sweep point: `keys` (what the run was) + its compression, steps and tokens/s, and the target's
    FLOPs and query tokens per decode step (all steps when it had no decode step)."""
    p = next(model.parameters())
    costs = [c for c in trace_costs(tr, model.config, p.dtype) if c["kind"] == "decode"] or \
        trace_costs(tr, model.config, p.dtype)
    st = tr.stats()
    return {**keys, "compression": st["compression"], "steps": st["steps"], "tokens": st["new_tokens"],
            "flops_per_step": sum(c["flops"] for c in costs) / len(costs),
            "query_per_step": sum(c["n_query"] for c in costs) / len(costs), "tokens_per_s": st["tokens_per_s"]}


def point(model, tok, prompt: str, n: int, w: int, max_new_tokens: int, on_step=None) -> dict:
    """One lookahead run (N = n, W = G = w); n == 0 is plain Jacobi decoding with block K = w, the line
    lookahead's scaling is measured against (its compression stays near 1 whatever the FLOPs)."""
    if n == 0:
        tr = run(model, tok, prompt, "jacobi", max_new_tokens=max_new_tokens, trace=False, block=w, on_step=on_step)
    else:
        tr = run(model, tok, prompt, "lookahead", max_new_tokens=max_new_tokens, trace=False,
                 window=w, ngram=n, guesses=w, text_span=n - 1, on_step=on_step)  # the paper's pool: the law is about W
    return _measured(model, tr, N=n, W=w, G=w if n else 0)


def heads_point(model, tok, prompt: str, method: str, heads: str, budget: int, max_new_tokens: int,
                on_step=None) -> dict:
    """One medusa / eagle run with a tree of `budget` nodes: the tree-size sweep's point. FLOPs per step
    are the target's (the heads' own work shows in tokens/s, not on this axis)."""
    tr = run(model, tok, prompt, method, max_new_tokens=max_new_tokens, trace=False, heads=heads, budget=budget,
             on_step=on_step)
    return _measured(model, tr, N=None, W=None, G=None, method=method, budget=budget)


def baseline(model, tok, prompt: str, max_new_tokens: int, on_step=None) -> dict:
    tr = run(model, tok, prompt, BASELINE, max_new_tokens=max_new_tokens, trace=False, on_step=on_step)
    return {**_measured(model, tr, N=1, W=0, G=0), "query_per_step": 1.0}
