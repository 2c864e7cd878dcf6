"""Split attention (cache pass + tree-masked step pass, merged by log-sum-exp) equals SDPA with the full mask."""
import pytest
import torch
import torch.nn.functional as F

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.core import Core
from decoding.masks import step_mask
from decoding.split_attention import NAME, merge, split_attention_forward


class _Module(torch.nn.Module):
    pass


@pytest.mark.parametrize("heads,kv_heads,cache", [(4, 4, 9), (4, 2, 9), (2, 1, 0)])
def test_split_equals_sdpa_on_a_tree_mask(heads, kv_heads, cache):
    torch.manual_seed(0)
    parents = [-1, 0, 1, 0, 3, 3, 0]  # a small tree under x0
    q = len(parents)
    mask = step_mask(parents, cache, torch.float32, torch.device("cpu"))
    query = torch.randn(1, heads, q, 16)
    key, value = torch.randn(1, kv_heads, cache + q, 16), torch.randn(1, kv_heads, cache + q, 16)
    got, _ = split_attention_forward(_Module(), query, key, value, mask, scaling=0.3)
    rep = heads // kv_heads
    want = F.scaled_dot_product_attention(query, key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1),
                                          attn_mask=mask, scale=0.3).transpose(1, 2)
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
    # without a mask it is a causal chain over the step
    got, _ = split_attention_forward(_Module(), query, key, value, None, scaling=0.3)
    chain = step_mask(list(range(-1, q - 1)), cache, torch.float32, torch.device("cpu"))
    want = F.scaled_dot_product_attention(query, key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1),
                                          attn_mask=chain, scale=0.3).transpose(1, 2)
    assert torch.allclose(got, want, atol=1e-5)


def test_merge_handles_an_empty_part():
    out = torch.randn(1, 1, 2, 4)
    lse = torch.randn(1, 1, 2)
    empty = torch.full_like(lse, float("-inf"))
    assert torch.allclose(merge(out, lse, torch.zeros_like(out), empty), out)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_model_with_split_attention_decodes_exactly(arch):
    ref_model = tiny(arch, seed=2)
    model = tiny(arch, seed=2)
    model.set_attn_implementation(NAME)
    assert model.config._attn_implementation == NAME
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]  # repeats: lookahead accepts several tokens
    # one lookahead-shaped step: same logits as SDPA
    a, b = Core(ref_model), Core(model)
    for c in (a, b):
        c.prefill(prompt)
        c.commit(list(range(len(prompt))))
    parents = [-1, 0, 1, 0, 3]
    la, lb = a.forward([1, 2, 3, 4, 5], parents), b.forward([1, 2, 3, 4, 5], parents)
    assert torch.allclose(la, lb, atol=1e-4)
    tr = generate(model, prompt, make_drafter("lookahead", window=3, ngram=4, guesses=3), max_new_tokens=32)
    assert tr.output_ids == hf_greedy(ref_model, prompt, 32)
    assert any(len(s.accepted) > 1 for s in tr.steps)
