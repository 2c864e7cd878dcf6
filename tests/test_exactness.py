"""The foundation: every greedy method returns exactly the ids of transformers' greedy generate."""
import pytest
import torch

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter

ARCHS = ["llama", "qwen2", "gpt2"]
CONFIGS = [
    ("lookahead", dict(window=5, ngram=4, guesses=5), True),
    ("lookahead", dict(window=3, ngram=2, guesses=3), True),     # N = 2 (the reference crashes here)
    ("lookahead", dict(window=1, ngram=3, guesses=2), True),     # W = 1
    ("lookahead", dict(window=4, ngram=5, guesses=0), False),    # G = 0: window only, no verification
    ("lookahead", dict(window=1, ngram=2, guesses=0), False),
    ("lookahead", dict(window=6, ngram=3, guesses=4, prompt_ngrams=False, output_ngrams=False), True),
    ("lookahead", dict(window=4, ngram=4, guesses=6, dedupe=False), True),     # the paper's layout
    ("prompt_lookup", dict(), True),
    ("prompt_lookup", dict(num_tokens=4, max_ngram=2, candidates=3), True),
    ("greedy", dict(), False),
]


def prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    rand = torch.randint(0, vocab, (20,), generator=g).tolist()
    code_like = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]  # repeats: prompt n-grams pay off
    return [rand, code_like]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,params,expect_multi", CONFIGS, ids=lambda x: str(x))
def test_matches_hf_greedy(tiny_models, arch, method, params, expect_multi):
    model = tiny_models[arch]
    multi = False
    for prompt in prompts(model.config.vocab_size):
        ref = hf_greedy(model, prompt, 48)
        tr = generate(model, prompt, make_drafter(method, **params), max_new_tokens=48)
        assert tr.output_ids == ref, f"{method} {params} diverged from HF greedy on {arch}"
        assert len(tr.output_ids) == 48
        multi |= any(len(s.accepted) > 1 for s in tr.steps)
        # the trace's accepted tokens are the output, in order
        assert [t for s in tr.steps for t in s.accepted] == tr.output_ids
    if expect_multi:
        assert multi, "no step accepted more than one token: the test would not exercise verification"
    else:
        assert not multi


def test_full_match_accepts_bonus_token():
    """On a full candidate match lookahead takes N tokens in a step (the reference caps at N-1)."""
    model = tiny("llama", seed=3)
    tr = generate(model, prompts(64)[1], make_drafter("lookahead", window=4, ngram=4, guesses=4, text_span=3),
                  max_new_tokens=64)
    assert tr.output_ids == hf_greedy(model, prompts(64)[1], 64)
    assert max(len(s.accepted) for s in tr.steps) == 4


def test_text_span_offers_longer_text_continuations():
    """Text n-grams continue past N-1 tokens (up to text_span), output stays exact, and accepts grow."""
    model = tiny("llama", seed=3)
    ref = hf_greedy(model, prompts(64)[1], 64)
    longest = {}
    for span in (3, 9):
        tr = generate(model, prompts(64)[1], make_drafter("lookahead", window=4, ngram=4, guesses=4, text_span=span),
                      max_new_tokens=64)
        assert tr.output_ids == ref
        cands = [c for s in tr.steps for c in s.info.get("candidates", [])]
        assert max(len(c) for c in cands) <= span
        longest[span] = max(len(s.accepted) for s in tr.steps)
    assert longest[3] == 4 and longest[9] > 4


def test_larger_model_longer_run():
    """More layers, a longer run with the KV cache compacted many times."""
    model = tiny("qwen2", seed=5, hidden=64, layers=4, vocab=128)
    prompt = prompts(128)[0] * 3
    for method, params in [("lookahead", dict(window=7, ngram=5, guesses=7)), ("prompt_lookup", {})]:
        tr = generate(model, prompt, make_drafter(method, **params), max_new_tokens=150)
        assert tr.output_ids == hf_greedy(model, prompt, 150)
