"""Sampled draft trees for the self-drafting heads: exact speculative sampling instead of point-mass drafts.

Why: with deterministic top-k drafts, exact verification (verify.sampled) accepts a drafted token only with
the target's probability of it, so at temperature 1 the shipped EAGLE head kept 1.48 tokens per step
against 2.83 when greedy. Drawing each node's children from the head's own distribution q (without
replacement) lets verify.speculative accept a child with min(1, p/q): as often as the head agrees with the
target in distribution, and the output still follows the target's distribution exactly.

What keeps it exact: the children of a node are i.i.d. draws without replacement from the q recorded for
that node, in query order, and how many a node gets is fixed before they are drawn. So the tree is never
pruned by a drawn child's own probability (EAGLE-2's best-`budget` selection and the confidence cut would
bias it); scores only choose WHICH nodes are expanded (the beam), which is allowed: a node's children are
drawn after, and independently of, everything that decided to expand it. The top-k `branch` of the
greedy tree is not used here: the budget sets the shape (sampled_shape).
"""
from __future__ import annotations

import torch


def sampled_shape(budget: int, depth: int, beam: int) -> tuple[int, int]:
    """(children per expanded node, levels) of a sampled tree of at most `budget` nodes: two children a node
    (one when the budget is tiny), the `beam` best nodes expanded per level, as many levels as the budget
    pays for, at most `depth`: k + (levels - 1) * beam * k <= budget."""
    k = 2 if budget >= 4 else 1
    return k, max(1, min(depth, 1 + (budget - k) // (beam * k)))


def draw(q: torch.Tensor, k: int, gen: torch.Generator) -> list[int]:
    """k tokens drawn without replacement from q (fewer when q has fewer non-zero entries)."""
    k = min(k, int((q > 0).sum()))
    if k <= 0:
        return []
    return torch.multinomial(q, k, replacement=False, generator=gen).tolist()


def q_rows(n: int, q_of: dict[int, torch.Tensor]) -> torch.Tensor:
    """[n, vocab] draft distributions by node (zero rows for nodes without children): Plan.q."""
    first = next(iter(q_of.values()))
    q = torch.zeros((n, first.shape[-1]), dtype=torch.float32, device=first.device)  # where the rows live
    for i, row in q_of.items():
        q[i] = row
    return q
