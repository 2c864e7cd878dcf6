"""The sampling check's one home (tests/test_sampling.py, tests/test_every_method.py): a confident 6-token
model, the exact joint distribution of its first L sampled tokens by enumeration (216 outcomes), and a
Pearson chi-square of counted samples against it."""
from __future__ import annotations

import itertools

import torch

from conftest import tiny
from decoding.engine.sampling import Sampling, warp

VOCAB, L = 6, 3
PROMPT = [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 4, 5]


def peaky_model():
    """A confident model, so drafted candidates get accepted often."""
    model = tiny("llama", vocab=VOCAB, seed=7)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)
    return model


def exact_joint(model, s: Sampling) -> dict[tuple, float]:
    """The exact distribution of the first L sampled tokens after PROMPT, by enumeration."""
    probs = {}
    with torch.no_grad():
        for seq in itertools.product(range(VOCAB), repeat=L):
            ids = torch.tensor([PROMPT + list(seq)])
            logits = model(ids).logits[0, len(PROMPT) - 1:len(PROMPT) - 1 + L]
            p = warp(logits, s)
            probs[seq] = float(torch.prod(p[torch.arange(L), torch.tensor(seq)]))
    return probs


def chi2_pvalue(counts: dict[tuple, int], probs: dict[tuple, float], n: int) -> float:
    """Pearson chi-square with cells of expected count < 5 merged into one."""
    stat, small_obs, small_exp, cells = 0.0, 0, 0.0, 0
    for k, p in probs.items():
        e, o = p * n, counts.get(k, 0)
        if e < 5:
            small_obs, small_exp = small_obs + o, small_exp + e
            continue
        stat += (o - e) ** 2 / e
        cells += 1
    if small_exp > 0:
        stat += (small_obs - small_exp) ** 2 / small_exp
        cells += 1
    return float(torch.special.gammaincc(torch.tensor((cells - 1) / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))
