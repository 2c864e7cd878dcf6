"""Medusa's typical acceptance rule (verify.typical) on hand-made trees whose answer is known. The heads'
opt-in end to end (refused when greedy, labelled, longer paths than exact sampling): test_heads.py."""
from __future__ import annotations

import math

import torch

from decoding import Sampling
from decoding.engine.sampling import make_generator
from decoding.engine.verify import TYPICAL_DELTA, TYPICAL_EPSILON, typical

V = 8
S = Sampling(1.0, seed=0)


def _logits(probs: dict[int, float]) -> torch.Tensor:
    """Logits of a distribution over V tokens: `probs`, the rest of the mass spread evenly."""
    rest = (1.0 - sum(probs.values())) / (V - len(probs))
    p = torch.tensor([probs.get(t, rest) for t in range(V)], dtype=torch.float64)
    return p.log().float()


def _threshold(probs: torch.Tensor) -> float:
    h = float(-(probs * torch.log(probs + 1e-5)).sum())
    return min(TYPICAL_EPSILON, TYPICAL_DELTA * math.exp(-h))


def test_typical_accepts_plausible_tokens_and_stops_at_implausible_ones():
    # x0 -> a(1) -> c(3); x0 -> b(2). Node 0 spreads its mass: a and b are both plausible.
    tokens, parents, proposal = [0, 1, 2, 3], [-1, 0, 0, 1], [False, True, True, True]
    flat = _logits({1: 0.2, 2: 0.15})
    assert _threshold(flat.softmax(-1)) < 0.15  # both pass: a wider, flatter distribution lowers the bar
    peaked = _logits({5: 0.999})                 # at a: almost surely token 5, so c (token 3) fails
    logits = torch.stack([flat, peaked, flat, flat])
    v = typical(tokens, parents, proposal, logits, S, make_generator(S))
    assert v.path == [0, 1] and v.tokens == [1, 5]  # a accepted (not b: same depth, lower probability)
    # c made plausible at a: the deeper path wins
    logits[1] = _logits({3: 0.6, 5: 0.3})
    v = typical(tokens, parents, proposal, logits, S, make_generator(S))
    assert v.path == [0, 1, 3] and v.tokens[:2] == [1, 3]
    # nothing plausible at x0: only the sampled token (from the target at x0)
    logits[0] = _logits({6: 0.9999})
    v = typical(tokens, parents, proposal, logits, S, make_generator(S))
    assert v.path == [0] and v.tokens == [6]


def test_typical_ties_go_to_the_more_likely_path():
    tokens, parents, proposal = [0, 1, 2], [-1, 0, 0], [False, True, True]
    logits = torch.stack([_logits({1: 0.3, 2: 0.4}), _logits({7: 0.999}), _logits({4: 0.999})])
    v = typical(tokens, parents, proposal, logits, S, make_generator(S))
    assert v.path == [0, 2] and v.tokens == [2, 4]
