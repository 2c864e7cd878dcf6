"""Fused sibling Linears in the CPU kernel (cpu_gemm.cpp's fused_linear, cpu_gemm.py's FusedLinears): one call
computes a layer's q/k/v (or gate/up) with each output bitwise what its own Linear's call gives, for every row
count, odd widths, block and fp32 panels, both instruction sets; a fused model decodes HF greedy's tokens and
follows in-place weight updates."""
from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.fast import blocks, cpu_gemm
from decoding.fast.cpu_gemm import FusedLinears, PackedLinear, fuse_linears, kernel, pack_linears
from test_cpu_blocks import ISAS, bits, isa, quantize_model, quantized  # noqa: F401 - isa is a fixture

WIDTHS = [(37, 16, 5), (576, 192, 192), (1, 33), (48,)]


def panels_of(w: torch.Tensor, kind: str) -> tuple[torch.Tensor, object]:
    ops = kernel()
    if kind == "fp32":
        return ops.pack_panels(w), ops.packed_linear
    b = blocks.recover(w)
    assert b is not None and b.kind == kind
    return ops.pack_blocks(b.q, b.d, b.m), ops.block_linear


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("kind", ["q4_1", "q8_0", "fp32"])
@pytest.mark.parametrize("ns", WIDTHS)
@pytest.mark.parametrize("k", [32, 96])
def test_fused_call_equals_each_linears_own_call_bitwise(isa, kind, ns, k):
    ops = kernel()
    ws = [quantized(n, k, "q8_0" if kind == "fp32" else kind, seed=n + j) for j, n in enumerate(ns)]
    if kind == "fp32":
        ws = [w + 1e-3 * torch.randn(w.shape) for w in ws]  # no longer blocks
    packed = [panels_of(w, kind) for w in ws]
    fused = torch.cat([p for p, _ in packed])
    biases = [torch.randn(n) if j % 2 else None for j, n in enumerate(ns)]
    torch.manual_seed(k)
    for m in range(1, 33):
        x = torch.randn(m, k)
        outs = ops.fused_linear(x, fused, list(ns), biases)
        for out, (p, op), n, b in zip(outs, packed, ns, biases):
            assert torch.equal(bits(out), bits(op(x, p, n, b))), (isa, kind, ns, m)
    x3 = torch.randn(2, 3, k)  # any leading shape
    assert [o.shape for o in ops.fused_linear(x3, fused, list(ns), [])] == [(2, 3, n) for n in ns]


def test_fused_call_with_two_threads_gives_the_one_thread_bits():
    ops = kernel()
    ns = (16 * 5 + 3, 16 * 2 + 1, 7)
    packed = [panels_of(quantized(n, 64, "q4_1", seed=n), "q4_1") for n in ns]
    fused = torch.cat([p for p, _ in packed])
    threads = torch.get_num_threads()
    try:
        for m in (1, 2, 5, 9, 17):
            x = torch.randn(m, 64)
            torch.set_num_threads(1)
            one = ops.fused_linear(x, fused, list(ns), [])
            torch.set_num_threads(2)
            for a, b in zip(ops.fused_linear(x, fused, list(ns), []), one):
                assert torch.equal(bits(a), bits(b))
    finally:
        torch.set_num_threads(threads)


def test_fused_linear_checks_its_input():
    ops = kernel()
    p, _ = panels_of(quantized(32, 64, "q4_1"), "q4_1")
    x = torch.randn(1, 64)
    with pytest.raises(RuntimeError, match="exactly the matrices"):
        ops.fused_linear(x, p, [16], [])  # 2 panels for a 1-panel matrix
    with pytest.raises(RuntimeError, match="one width per matrix"):
        ops.fused_linear(x, p, [16, 16], [None])
    with pytest.raises(RuntimeError, match="of x's width"):
        ops.fused_linear(torch.randn(1, 32), p, [16, 16], [])
    with pytest.raises(RuntimeError, match="positive"):
        ops.fused_linear(x, p, [32, 0], [])


def fused_llama(seed: int = 5) -> tuple[torch.nn.Module, torch.nn.Module]:
    stock = quantize_model(tiny("llama", seed=seed), lambda name: "q8_0" if name == "lm_head" else "q4_1")
    packed = copy.deepcopy(stock)
    pack_linears(packed, fuse=True)
    return stock, packed


def test_a_llama_layer_fuses_qkv_and_gate_up_and_keeps_its_bits():
    stock, fused = fused_llama()
    plain = copy.deepcopy(stock)
    pack_linears(plain, fuse=False)
    layers = len(stock.model.layers)
    groups = {id(m._group): m._group for m in fused.modules() if isinstance(m, PackedLinear) and m._group}
    assert len(groups) == 2 * layers
    attn = fused.model.layers[0].self_attn
    assert attn.q_proj._group is attn.k_proj._group is attn.v_proj._group
    assert attn.k_proj.panels.data_ptr() > attn.q_proj.panels.data_ptr()  # views of one fused tensor
    assert fused.lm_head._group is None
    ids = torch.tensor([[5, 6, 7, 8, 9, 5, 6]])
    with torch.inference_mode():
        for q in (1, 7):
            assert torch.equal(bits(fused(ids[:, :q]).logits), bits(plain(ids[:, :q]).logits))
    with FlopCounterMode(display=False) as a, torch.no_grad():
        fused(ids)
    with FlopCounterMode(display=False) as b, torch.no_grad():
        plain(ids)
    assert a.get_total_flops() == b.get_total_flops() > 0


def test_qwen2_qkv_biases_stay_with_their_outputs():
    """Qwen2's q/k/v carry biases: fused, each output still gets its own bias (bitwise the unfused logits),
    and a bias replaced after fusing is the one used."""
    stock = quantize_model(tiny("qwen2", seed=4))
    fused, plain = copy.deepcopy(stock), copy.deepcopy(stock)
    pack_linears(fused, fuse=True)
    pack_linears(plain, fuse=False)
    attn = fused.model.layers[0].self_attn
    assert attn.q_proj._group is attn.v_proj._group is not None and attn.k_proj.bias is not None
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.inference_mode():
        assert torch.equal(bits(fused(ids).logits), bits(plain(ids).logits))
        new_bias = torch.nn.Parameter(torch.randn(attn.k_proj.out_features))
        for model in (fused, plain):
            model.model.layers[0].self_attn.k_proj.bias = new_bias
        assert torch.equal(bits(fused(ids).logits), bits(plain(ids).logits))


@pytest.mark.parametrize("method,params", [("greedy", {}), ("lookahead", dict(window=3, ngram=3, guesses=3))])
def test_fused_model_decodes_hf_greedy_tokens(method, params):
    stock, fused = fused_llama(seed=6)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7]
    tr = generate(fused, prompt, make_drafter(method, **params), max_new_tokens=40)
    assert tr.output_ids == hf_greedy(stock, prompt, 40)


def test_a_sibling_on_another_tensor_runs_its_own_panels():
    _, fused = fused_llama()
    attn = fused.model.layers[0].self_attn
    x, y = torch.randn(3, attn.q_proj.in_features), torch.randn(3, attn.q_proj.in_features)
    with torch.no_grad():
        q = attn.q_proj(x)
        k = attn.k_proj(y)  # not the x the group computed for: y's own result
        assert torch.equal(k, kernel().block_linear(y, attn.k_proj.panels, attn.k_proj.out_features))
        assert torch.equal(attn.v_proj(x), kernel().block_linear(x, attn.v_proj.panels, attn.v_proj.out_features))
        assert torch.equal(q, kernel().block_linear(x, attn.q_proj.panels, attn.q_proj.out_features))
        x.add_(1.0)  # changed in place since the group computed: recomputed, not the kept outputs
        attn.q_proj(x)
        x.add_(1.0)
        assert torch.equal(attn.k_proj(x), kernel().block_linear(x, attn.k_proj.panels, attn.k_proj.out_features))


def test_in_place_weight_updates_repack_and_refuse_or_keep_the_group():
    _, fused = fused_llama()
    mlp = fused.model.layers[1].mlp
    group = mlp.gate_proj._group
    x = torch.randn(4, mlp.gate_proj.in_features)
    ops = kernel()
    with torch.no_grad():
        mlp.up_proj.weight.copy_(quantized(*mlp.up_proj.weight.shape, "q4_1", seed=9))  # still Q4_1: re-packed, still fused
        up = mlp.up_proj(mlp_x := x.clone())
        assert mlp.up_proj._group is group and mlp.gate_proj.panels.data_ptr() == group.panels.data_ptr()
        assert torch.equal(up, ops.block_linear(mlp_x, ops.pack_blocks(
            *_codes(mlp.up_proj.weight)), mlp.up_proj.out_features))
        mlp.gate_proj.weight.mul_(1 + 1e-3)  # no longer blocks: fp32 panels, the group is undone
        g = mlp.gate_proj(x)
        assert mlp.gate_proj._group is None and mlp.up_proj._group is None and mlp.gate_proj.storage == "fp32"
        torch.testing.assert_close(g, x @ mlp.gate_proj.weight.T)
        assert torch.equal(mlp.up_proj(x), ops.block_linear(x, ops.pack_blocks(*_codes(mlp.up_proj.weight)),
                                                            mlp.up_proj.out_features))


def _codes(w: torch.Tensor) -> tuple:
    b = blocks.recover(w)
    return b.q, b.d, b.m


def test_shared_or_mixed_siblings_stay_unfused():
    stock = quantize_model(tiny("llama", seed=5))
    attn = stock.model.layers[0].self_attn
    stock.model.layers[1].self_attn.k_proj = attn.k_proj  # a module shared by two layers
    pack_linears(stock, fuse=True)
    assert stock.model.layers[0].self_attn.q_proj._group is None
    assert stock.model.layers[1].self_attn.q_proj._group is None
    assert stock.model.layers[0].mlp.gate_proj._group is not None
    mixed = tiny("llama", seed=5)
    quantize_model(mixed.model.layers[0].mlp.gate_proj)  # Q4_1 next to an fp32 up_proj
    pack_linears(mixed, fuse=True)
    assert mixed.model.layers[0].mlp.gate_proj._group is None
    assert isinstance(mixed.model.layers[1].mlp.gate_proj._group, FusedLinears)  # two fp32 siblings fuse
    assert fuse_linears(mixed) == 0  # nothing left to fuse
