"""The CPU layouts' attention (decoding/fast/cpu_attention.py): a masked step of several rows reads the shared
key/value heads in place instead of transformers' repeat_kv copy, with bitwise the same output, and the engine
still returns HF greedy's tokens."""
from __future__ import annotations

import copy

import pytest
import torch
import transformers.integrations.sdpa_attention as hf_sdpa
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.engine.core import Core
from decoding.fast.cpu_attention import NAME, gqa_sdpa_forward, use_gqa_attention
from decoding.fast.layout import apply_layout


class Heads(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def tree_mask(q: int, kv: int, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """An additive mask as the engine builds it: the cached prefix visible, a random tree among the new rows."""
    vis = torch.ones(q, kv, dtype=torch.bool)
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, q)]
    new = torch.zeros(q, q, dtype=torch.bool)
    for i, p in enumerate(parents):
        new[i, i] = True
        if p >= 0:
            new[i] |= new[p]
    vis[:, kv - q:] = new
    return torch.zeros(1, 1, q, kv, dtype=dtype).masked_fill_(~vis, torch.finfo(dtype).min)


@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (4, 2, 16), (6, 1, 32), (4, 4, 16)])
def test_equals_transformers_sdpa_bitwise(heads, kv_heads, dim):
    g = torch.Generator().manual_seed(heads * 10 + dim)
    mod = Heads(heads // kv_heads)
    for q in list(range(1, 17)) + [24, 32]:
        for past in (0, 5, 200):
            kv = past + q
            query = torch.randn(1, heads, q, dim, generator=g)
            key, value = (torch.randn(1, kv_heads, kv, dim, generator=g) for _ in range(2))
            for mask in (tree_mask(q, kv, g), None):
                ref = sdpa_attention_forward(mod, query, key, value, mask, scaling=dim ** -0.5)[0]
                out = gqa_sdpa_forward(mod, query, key, value, mask, scaling=dim ** -0.5)[0]
                assert out.shape == ref.shape and out.is_contiguous()
                assert torch.equal(out.view(torch.int32), ref.view(torch.int32)), (q, past, mask is None)


def test_a_masked_multi_row_step_copies_no_cache(monkeypatch):
    def no_copy(*a, **k):
        raise AssertionError("repeat_kv copied the cache")
    monkeypatch.setattr(hf_sdpa, "repeat_kv", no_copy)
    g = torch.Generator().manual_seed(0)
    mod, q, kv = Heads(3), 8, 40
    query, key, value = torch.randn(1, 9, q, 64), torch.randn(1, 3, kv, 64), torch.randn(1, 3, kv, 64)
    gqa_sdpa_forward(mod, query, key, value, tree_mask(q, kv, g))
    with pytest.raises(AssertionError, match="copied"):  # what transformers' own path does here
        sdpa_attention_forward(mod, query, key, value, tree_mask(q, kv, g))


def test_the_cpu_layouts_switch_to_it_and_stock_or_eager_stay():
    for layout, switched in (("packed", True), ("column", True), ("stock", False)):
        model = tiny("llama", seed=2)
        apply_layout(model, layout)
        assert (model.config._attn_implementation == NAME) is switched, layout
    eager = tiny("llama", seed=2)
    eager.set_attn_implementation("eager")
    assert not use_gqa_attention(eager) and eager.config._attn_implementation == "eager"


def test_engine_steps_keep_their_bits_and_hf_greedy_tokens():
    stock = tiny("llama", seed=3)
    assert stock.config.num_key_value_heads < stock.config.num_attention_heads
    ours = copy.deepcopy(stock)
    assert use_gqa_attention(ours)
    cores = [Core(m) for m in (stock, ours)]
    prompt = [5, 6, 7, 8, 9, 10, 11, 12]
    for c in cores:
        c.prefill(prompt)
        c.commit(list(range(len(prompt))))
    tree = [-1, 0, 0, 1, 1, 2, 3, 6]
    a, b = (c.forward([13, 14, 15, 16, 17, 18, 19, 20], tree) for c in cores)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    tr = generate(ours, prompt, make_drafter("lookahead", window=3, ngram=3, guesses=3), max_new_tokens=30)
    assert tr.output_ids == hf_greedy(stock, prompt, 30)
