"""What the trace keeps of a verified draft tree (medusa, eagle, retrieval, self-speculative): one
bookkeeping for every tree drafter, so the viz reads the same fields whoever drafted."""
from __future__ import annotations

import torch

from decoding.engine.drafter import Plan
from decoding.engine.verify import Verdict


def record_verdict(plan: Plan, verdict: Verdict, tracing: bool = True) -> None:
    """The tree record the viz reads: accepted path, first rejected child, the target's probability of
    every drafted token (greedy: softmax of its logits; what 'why was it cut' needs). The probabilities are
    a host read (a sync on CUDA) of values only the trace shows: read only when `tracing`."""
    info = plan.info
    path = verdict.path
    kids = [i for i in range(1, len(plan.tokens)) if plan.parents[i] == path[-1]]
    info["accepted_path"], info["first_rejected"] = list(path), kids[0] if kids else None
    if tracing and "tree" in info and verdict.logits is not None and len(plan.tokens) > 1:
        p = verdict.logits[plan.parents[1:]].softmax(-1)
        idx = torch.tensor(plan.tokens[1:], dtype=torch.long, device=p.device)[:, None]
        info["tree"]["target_prob"] = [None] + [round(x, 6) for x in p.gather(-1, idx)[:, 0].tolist()]
