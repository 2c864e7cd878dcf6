"""Lookahead and the self-drafting heads must sample from exactly the target's sampling distribution.

Setup: a 6-token vocabulary, so the exact joint distribution of the first 3 new tokens (216 outcomes)
is computed by enumeration with the model. Lookahead samples are compared to it with a chi-square
goodness-of-fit test; the bound: the test fails if p < 1e-3 (a correct sampler fails 1 run in 1000;
seeds are fixed, so the result is reproducible). A negative control shows the same test rejects a
distribution that is only slightly wrong (temperature 0.8 instead of 1.0).
"""
import pytest
import torch

from decoding import generate, make_drafter
from decoding.engine.sampling import Sampling
from sampling_check import L, PROMPT, chi2_pvalue, exact_joint, peaky_model

RUNS = 3000
HEADS_RUNS = 2000


def sampled_counts(model, method: str, runs: int, **params) -> tuple[dict[tuple, int], int]:
    """Outputs of `runs` seeded sampling runs (temperature 1, top-k 5, top-p 0.95) of a method, counted,
    and how many runs took a multi-token step (the acceptance rule was exercised)."""
    counts: dict[tuple, int] = {}
    multi = 0
    for seed in range(runs):
        tr = generate(model, PROMPT, make_drafter(method, **params), max_new_tokens=L,
                      sampling=Sampling(1.0, 5, 0.95, seed), trace=False)
        key = tuple(tr.output_ids)
        counts[key] = counts.get(key, 0) + 1
        multi += any(len(st.accepted) > 1 for st in tr.steps)
    return counts, multi


def test_lookahead_sampling_matches_target_distribution():
    model = peaky_model()
    probs = exact_joint(model, Sampling(temperature=1.0, top_k=5, top_p=0.95))
    counts, multi = sampled_counts(model, "lookahead", RUNS, window=3, ngram=3, guesses=3)
    assert multi > RUNS // 10, f"only {multi} runs accepted a candidate: the rule is barely exercised"
    assert chi2_pvalue(counts, probs, RUNS) > 1e-3


def test_chi_square_rejects_a_slightly_wrong_distribution():
    """Negative control: the same statistic on samples from a different distribution must fail."""
    model = peaky_model()
    right = exact_joint(model, Sampling(temperature=1.0))
    wrong = exact_joint(model, Sampling(temperature=0.8))
    g = torch.Generator().manual_seed(0)
    keys = list(wrong)
    draws = torch.multinomial(torch.tensor([wrong[k] for k in keys]), RUNS, replacement=True, generator=g)
    counts: dict[tuple, int] = {}
    for i in draws.tolist():
        counts[keys[i]] = counts.get(keys[i], 0) + 1
    assert chi2_pvalue(counts, right, RUNS) < 1e-3


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_heads_sampled_trees_match_target_distribution(kind, tmp_path):
    """Sampling with heads keeps the target's distribution: Medusa's deterministic top-k tree through
    verify.sampled, EAGLE's sampled tree (children drawn from the head's distribution) through
    verify.speculative (heads trained a few steps on the model's own text, so multi-token steps happen).
    The whole vocabulary drafts (a quarter of 6 tokens would leave one); budget 8 gives each expanded
    EAGLE node two children, so the without-replacement draws are exercised. Recording another q than
    the one drawn from fails this test (p ~ 1e-44, checked by hand)."""
    from conftest import hf_greedy
    from decoding.training.train_heads import train
    from test_heads import IntTok
    model = peaky_model()
    texts = [" ".join(map(str, p + hf_greedy(model, p, 60))) for p in ([0, 1, 2], [3, 4, 5], [1, 3, 5], [2, 0, 4])]
    train(model, IntTok(), kind, texts, tmp_path, seq=16, max_tokens=400, epochs=6, batch=4, lr=3e-3,
          val_every=50, log=lambda *a: None)
    probs = exact_joint(model, Sampling(temperature=1.0, top_k=5, top_p=0.95))
    counts, multi = sampled_counts(model, kind, HEADS_RUNS, heads=str(tmp_path), budget=8, draft_vocab=0)
    assert multi > HEADS_RUNS // 10, f"only {multi} runs accepted a drafted token: the rule is barely exercised"
    assert chi2_pvalue(counts, probs, HEADS_RUNS) > 1e-3
