"""The one-call CPU step (decoding/fast/cpu_step.py, cpu_step.cpp): a packed Llama model's Core runs its whole
step in decodescope::llama_step; its logits and hidden states are transformers' (through the same packed
Linears) to float32 rounding, for 1..32 rows, chains and trees, fp32 and Q4_1/Q8_0 block panels, both
instruction sets; every method returns HF greedy's tokens; anything it cannot run keeps transformers' forward."""
from __future__ import annotations

import copy
import random

import pytest
import torch

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.engine.core import Core
from decoding.engine.masks import chain_parents
from decoding.fast import cpu_step
from decoding.fast.cpu_step import CpuKV
from decoding.fast.layout import apply_layout
from test_cpu_blocks import ISAS, isa, quantize_model  # noqa: F401 - isa is a fixture


def models(kind: str, seed: int = 5, hidden: int = 64, layers: int = 3, arch: str = "llama"):
    """(stock, packed) copies of one tiny Llama (or Qwen2): fp32 weights, or weights that are exactly ggml blocks."""
    stock = tiny(arch, seed=seed, hidden=hidden, layers=layers, vocab=96)
    if kind == "blocks":
        quantize_model(stock, lambda name: "q8_0" if name == "lm_head" else "q4_1")
    packed = copy.deepcopy(stock)
    assert apply_layout(packed, "packed") == "packed"
    return stock, packed


def random_tree(rng: random.Random, q: int) -> list[int]:
    return [-1] + [rng.randrange(-1, i) for i in range(1, q)]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("kind,arch", [("fp32", "llama"), ("blocks", "llama"), ("fp32", "qwen2")])
def test_logits_and_hidden_states_equal_transformers_forward(isa, kind, arch):
    _, packed = models(kind, arch=arch)
    fused, plain = Core(packed), Core(packed, fused=False)
    assert isinstance(fused.cache, CpuKV) and not isinstance(plain.cache, CpuKV)
    rng = random.Random(0)
    prompt = [rng.randrange(96) for _ in range(23)]
    a, b = fused.prefill(prompt), plain.prefill(prompt)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    fused.commit(list(range(len(prompt))))
    plain.commit(list(range(len(prompt))))
    for q in (1, 2, 3, 5, 8, 13, 16, 17, 32):
        parents = random_tree(rng, q) if q % 2 else chain_parents(q)
        tokens = [rng.randrange(96) for _ in range(q)]
        layers = (0, 1, -1, 3)
        (la, ha), (lb, hb) = (c.forward(tokens, parents, hidden=list(range(q)), layers=layers)
                              for c in (fused, plain))
        torch.testing.assert_close(la, lb, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ha, hb, rtol=1e-5, atol=1e-5)
        assert torch.equal(ha[0], hb[0])  # the embeddings themselves
        keep = [0] + [i for i in range(1, q) if parents[i] == 0][-1:]  # a root-first path, moved down if i > 1
        for c in (fused, plain):
            c.commit(keep)
    # rows read: the last k, or a list (the others zero)
    last2 = fused.forward([1, 2, 3], chain_parents(3), rows=2)
    fused.commit([])
    picked = fused.forward([1, 2, 3], chain_parents(3), rows=[0, 2])
    fused.commit([])
    full = fused.forward([1, 2, 3], chain_parents(3))
    fused.commit([])
    assert last2.shape == (2, 96) and torch.equal(last2, full[1:])
    assert torch.equal(picked[[0, 2]], full[[0, 2]]) and not picked[1].any()


@pytest.mark.parametrize("kind,arch", [("fp32", "llama"), ("blocks", "llama"), ("blocks", "qwen2")])
@pytest.mark.parametrize("method,params", [
    ("greedy", {}),
    ("lookahead", dict(window=4, ngram=3, guesses=4)),
    ("prompt_lookup", {}),
    ("jacobi", dict(block=4)),
])
def test_methods_return_hf_greedy_tokens(kind, arch, method, params):
    stock, packed = models(kind, arch=arch)
    multi = False
    for prompt in ([5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12], list(range(40, 60))):
        tr = generate(packed, prompt, make_drafter(method, **params), max_new_tokens=40)
        assert tr.output_ids == hf_greedy(stock, prompt, 40), (kind, method)
        multi |= any(len(s.accepted) > 1 for s in tr.steps)
    assert multi or method == "greedy"


def test_speculative_target_and_draft_both_run_the_step():
    stock, packed = models("blocks", seed=5)
    _, draft = models("blocks", seed=6, hidden=32, layers=2)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7]
    for kw in (dict(draft_tokens=3), dict(tree=[2, 2, 1])):
        tr = generate(packed, prompt, make_drafter("speculative", draft_model=draft, **kw), max_new_tokens=40)
        assert tr.output_ids == hf_greedy(stock, prompt, 40)


def test_the_store_grows_past_its_first_capacity():
    stock, packed = models("blocks", hidden=32, layers=2)
    prompt = list(range(10, 30))
    tr = generate(packed, prompt, make_drafter("lookahead", window=3, ngram=3, guesses=3), max_new_tokens=300)
    assert tr.output_ids == hf_greedy(stock, prompt, 300)
    core = Core(packed)
    core.prefill([i % 96 for i in range(300)])
    assert core.cache.capacity == 2 * cpu_step.ROUND


def test_what_it_cannot_run_keeps_transformers_forward(monkeypatch):
    stock, packed = models("fp32")
    assert "not packed" in cpu_step.why_not(stock)
    assert cpu_step.why_not(packed) is None
    gpt2 = tiny("gpt2", hidden=64)
    apply_layout(gpt2, "packed")
    assert "LlamaForCausalLM" in cpu_step.why_not(gpt2) and not isinstance(Core(gpt2).cache, CpuKV)
    _, qwen = models("fp32", arch="qwen2")
    assert cpu_step.why_not(qwen) is None and isinstance(Core(qwen).cache, CpuKV)
    qwen.config.sliding_window, qwen.config.layer_types = 8, ["sliding_attention"] * 3
    assert "sliding" in cpu_step.why_not(qwen)
    handle = packed.model.layers[1].mlp.register_forward_hook(lambda *a: None)
    assert "hooks" in cpu_step.why_not(packed) and not isinstance(Core(packed).cache, CpuKV)
    handle.remove()
    monkeypatch.setenv("DECODESCOPE_CPU_STEP", "0")
    assert "DECODESCOPE_CPU_STEP" in cpu_step.why_not(packed)
    assert not isinstance(Core(packed).cache, CpuKV)


def test_an_in_place_weight_update_is_packed_again():
    stock, packed = models("fp32")
    prompt = [5, 6, 7, 8, 9, 10]
    assert generate(packed, prompt, make_drafter("greedy"), max_new_tokens=20).output_ids == hf_greedy(stock, prompt, 20)
    with torch.no_grad():
        for m in (stock, packed):
            m.model.layers[0].self_attn.k_proj.weight.mul_(1.5)
            m.model.layers[2].mlp.down_proj.weight.mul_(-1.0)
    tr = generate(packed, prompt, make_drafter("greedy"), max_new_tokens=20)
    assert tr.output_ids == hf_greedy(stock, prompt, 20)


def test_the_kernel_checks_its_input():
    _, packed = models("fp32")
    kv = CpuKV(packed)
    kv.reserve(8)
    x, cs = torch.zeros(2, 64), torch.zeros(2, 16)
    mask = torch.zeros(2, 4)
    dims = [4, 2, 16, 128]
    op = torch.ops.decodescope.llama_step
    with pytest.raises(RuntimeError, match="6 weights per layer"):
        op(x, cs, cs, kv.store, mask, kv.weights()[:-2], [], dims, 1e-6, 0.25, [])
    with pytest.raises(RuntimeError, match="3 per layer"):
        op(x, cs, cs, kv.store, mask, kv.weights(), [torch.zeros(64)], dims, 1e-6, 0.25, [])
    with pytest.raises(RuntimeError, match="head shapes"):
        op(x, cs, cs, kv.store, mask, kv.weights(), [], [4, 3, 16, 128], 1e-6, 0.25, [])
    with pytest.raises(RuntimeError, match="mask"):
        op(x, cs, cs, kv.store, torch.zeros(2, 1), kv.weights(), [], dims, 1e-6, 0.25, [])
    with pytest.raises(RuntimeError, match="hidden-state indices"):
        op(x, cs, cs, kv.store, mask, kv.weights(), [], dims, 1e-6, 0.25, [4])
    out = op(x, cs, cs, kv.store, mask, kv.weights(), [], dims, 1e-6, 0.25, [0, 3])
    assert [t.shape for t in out] == [(2, 64)] * 3


def test_the_weight_list_is_built_again_only_after_an_in_place_update():
    """The op's weight list is kept between steps (rebuilding it from the modules cost ~1 ms a step) and built
    again, re-packed, once a weight's version moves."""
    _, packed = models("fp32")
    w = cpu_step.Weights(list(packed.model.layers), [packed.model.norm.weight])
    first = w.get()
    assert w.get() is first
    with torch.no_grad():
        packed.model.layers[1].mlp.down_proj.weight.mul_(2.0)
    second = w.get()
    assert second is not first and torch.equal(second[6 + 5], first[6 + 5] * 2)  # layer 1's down panels, re-packed
    assert w.get() is second
