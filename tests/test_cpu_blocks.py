"""Block-quantised weights in the CPU kernel (decoding/fast/blocks.py, cpu_gemm.cpp's block_linear): recovery is
exact or refused, the block kernel equals the fp32 packed kernel bitwise for every row count (both instruction
sets this CPU has), and a packed model of exactly quantised weights still decodes HF greedy's tokens.

The weights are made here the way llama.cpp's reference quantisers (quantize_row_q4_1_ref / q8_0_ref) make them
and de-quantised the way gguf-py does, so the recovered blocks must be the very ones quantised."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.fast import blocks, cpu_gemm
from decoding.fast.cpu_gemm import PackedLinear, kernel, storage_counts, storage_report
from decoding.fast.layout import apply_layout

ISAS = ("AVX2", "AVX512")  # where the CPU has no AVX-512, select_isa keeps AVX2 and the test still runs


quantize = blocks.quantize  # llama.cpp's reference quantisers (other test files import it from here)


def quantized(n: int, k: int, kind: str, seed: int = 0) -> torch.Tensor:
    """A float32 weight that is exactly de-quantised blocks."""
    g = torch.Generator().manual_seed(seed)
    return blocks.dequantize(quantize(torch.randn(n, k, generator=g) * 0.05, kind))


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


@pytest.fixture
def isa(request):
    """Run with one instruction set, then give the process back the one it chose."""
    ops = kernel()
    yield ops.select_isa(request.param)
    ops.select_isa(cpu_gemm.isa_wanted())


@pytest.mark.parametrize("kind", ["q4_1", "q8_0"])
def test_recovery_reproduces_every_value_bitwise(kind):
    w = quantized(37, 96, kind, seed=1)
    w[0, :32] = 0.25  # a degenerate block (all equal) and an all-zero one
    w[1, 32:64] = 0.0
    w = blocks.dequantize(quantize(w, kind))
    b = blocks.recover(w)
    assert b is not None and b.kind == kind
    assert torch.equal(bits(blocks.dequantize(b)), bits(w))


def test_recovery_refuses_anything_not_exact():
    torch.manual_seed(0)
    assert blocks.recover(torch.randn(16, 64)) is None  # plain float weights
    assert blocks.recover(quantized(16, 64, "q4_1")[:, :48].contiguous()) is None  # K not a multiple of 32
    for kind in ("q4_1", "q8_0"):
        w = quantized(16, 64, kind)
        w[9, 40] = torch.nextafter(w[9, 40], torch.tensor(1.0))  # one value one ulp off, past the first rows
        assert blocks.recover(w) is None
        w[9, 40] = float("nan")
        assert blocks.recover(w) is None
        w = quantized(16, 64, kind)
        w[12, :32] = 0.0
        w[12, 7], w[12, 8] = -0.0, 0.25  # -0.0 beside +0.0 in a block with a nonzero value: no scale gives both
        assert blocks.recover(w) is None
        w[12, 8] = 0.0  # a block of zeros of both signs is stored as +0.0: the same bits out of every FMA chain
        b = blocks.recover(w)
        assert b is not None and torch.equal(blocks.dequantize(b), w)
    assert blocks.recover(quantized(16, 64, "q4_1").double()) is None


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("kind", ["q4_1", "q8_0"])
@pytest.mark.parametrize("n,k", [(1, 32), (17, 64), (50, 96), (33, 160)])
def test_block_kernel_equals_the_fp32_packed_kernel_bitwise(isa, kind, n, k):
    """The main guarantee: the same weights, the same FMA chains, so the same bits, for 1..32 rows."""
    ops = kernel()
    w = quantized(n, k, kind, seed=n + k)
    b = blocks.recover(w)
    assert b is not None and b.kind == kind
    P, F32 = ops.pack_blocks(b.q, b.d, b.m), ops.pack_panels(w)
    bias = torch.randn(n)
    torch.manual_seed(n)
    for m in range(1, 33):
        x = torch.randn(m, k)
        ref = ops.packed_linear(x, F32, n)
        assert torch.equal(bits(ops.block_linear(x, P, n)), bits(ref)), (isa, m)
        assert torch.equal(bits(ops.block_linear(x, P, n, bias)), bits(ops.packed_linear(x, F32, n, bias)))
    torch.testing.assert_close(ref, x @ w.T, rtol=1e-5, atol=1e-5 * k ** 0.5)


def test_pack_blocks_checks_its_input():
    ops = kernel()
    d = torch.ones(2, 1, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="0..15"):
        ops.pack_blocks(torch.full((2, 32), 16, dtype=torch.uint8), d, d)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        ops.pack_blocks(torch.zeros(2, 48, dtype=torch.int8), d)
    with pytest.raises(RuntimeError, match="block panels"):
        ops.block_linear(torch.randn(1, 64), ops.pack_blocks(torch.zeros(2, 32, dtype=torch.int8), d), 2)


def test_both_instruction_sets_agree_and_the_choice_is_reported():
    """AVX2 and AVX-512 (where the CPU has it) give the same bits, block and fp32 panels, any row count."""
    ops = kernel()
    assert cpu_gemm.ISA == [ops.select_isa(cpu_gemm.isa_wanted())]
    w = quantized(40, 64, "q4_1", seed=3)
    b = blocks.recover(w)
    P = ops.pack_blocks(b.q, b.d, b.m)
    w32 = torch.randn(57, 96)
    P32 = ops.pack_panels(w32)
    try:
        for m in range(1, 33):
            x, x32 = torch.randn(m, 64), torch.randn(m, 96)
            outs = []
            for name in ISAS:
                ops.select_isa(name)
                outs.append((ops.block_linear(x, P, 40), ops.packed_linear(x32, P32, 57)))
            for a, c in zip(outs[0], outs[1]):
                assert torch.equal(bits(a), bits(c)), m
    finally:
        ops.select_isa(cpu_gemm.isa_wanted())


def test_threads_split_panels_not_chains():
    """With 2 threads each output is still one chain: bitwise the 1-thread result (pairs of panels included)."""
    ops = kernel()
    w = quantized(16 * 7 + 3, 64, "q4_1", seed=7)
    b = blocks.recover(w)
    P = ops.pack_blocks(b.q, b.d, b.m)
    threads = torch.get_num_threads()
    try:
        for m in (1, 2, 5, 9):
            x = torch.randn(m, 64)
            torch.set_num_threads(1)
            one = ops.block_linear(x, P, w.shape[0])
            torch.set_num_threads(2)
            assert torch.equal(bits(ops.block_linear(x, P, w.shape[0])), bits(one))
    finally:
        torch.set_num_threads(threads)


def test_packed_linear_stores_blocks_and_repacks_after_updates():
    lin = torch.nn.Linear(64, 24)
    with torch.no_grad():
        lin.weight.copy_(quantized(24, 64, "q4_1", seed=4))
    packed = PackedLinear(lin)
    assert packed.storage == "q4_1" and packed.panels.dtype == torch.uint8
    x = torch.randn(3, 5, 64)
    ops = kernel()
    with torch.no_grad():
        assert torch.equal(packed(x), ops.packed_linear(x, ops.pack_panels(lin.weight), 24, lin.bias))
        lin.weight.mul_(1 + 1e-3)  # no longer blocks: back to fp32 panels, still F.linear's values
        y = packed(x)
        assert packed.storage == "fp32"
        torch.testing.assert_close(y, F.linear(x, lin.weight, lin.bias))
        lin.weight.copy_(quantized(24, 64, "q8_0", seed=5))
        assert torch.equal(packed(x), ops.packed_linear(x, ops.pack_panels(lin.weight), 24, lin.bias))
        assert packed.storage == "q8_0"
        with FlopCounterMode(display=False) as fc:  # the profiler and FLOP counts see the block kernel too
            packed(x)
    assert fc.get_total_flops() == 2 * 15 * 64 * 24


def quantize_model(model: torch.nn.Module, kind_of=lambda name: "q4_1") -> torch.nn.Module:
    """Every Linear weight replaced by its exactly de-quantised blocks (in place), like a GGUF conversion."""
    with torch.no_grad():
        for name, mod in model.named_modules():
            if type(mod) is torch.nn.Linear:
                mod.weight.copy_(blocks.dequantize(quantize(mod.weight, kind_of(name))))
    return model


@pytest.mark.parametrize("method,params", [("greedy", {}), ("lookahead", dict(window=3, ngram=3, guesses=3))])
def test_block_packed_model_decodes_hf_greedy_tokens(method, params):
    stock = quantize_model(tiny("llama", seed=5), lambda name: "q8_0" if name == "lm_head" else "q4_1")
    packed = copy.deepcopy(stock)
    assert apply_layout(packed, "packed") == "packed"
    n_linears = sum(type(m) is torch.nn.Linear for m in stock.modules())
    assert storage_counts(packed) == {"q4_1": n_linears - 1, "q8_0": 1, "k8": 0, "fp32": 0}
    assert packed.weight_storage_ == storage_report(packed)
    assert storage_report(packed).startswith(f"q4_1 {n_linears - 1}, q8_0 1, k8 0, fp32 0; fp32 kernel "
                                             f"{n_linears} as blocks ")
    fp32_bytes = sum(p.numel() * 4 for p in stock.parameters())
    assert cpu_gemm.bytes_read(stock) == fp32_bytes and cpu_gemm.bytes_read(packed) < 0.3 * fp32_bytes
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7]
    tr = generate(packed, prompt, make_drafter(method, **params), max_new_tokens=40)
    assert tr.output_ids == hf_greedy(stock, prompt, 40)


def test_tied_weights_stay_tied_with_block_storage():
    model = quantize_model(tiny("gpt2", seed=6))  # GPT-2's Conv1D stay; the tied LM head is a Linear
    apply_layout(model, "packed")
    assert isinstance(model.lm_head, PackedLinear) and model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.storage == "q4_1"


def test_the_roofline_counts_the_bytes_the_blocks_stream():
    """A block-packed run records what its Linears read (model["linear_weight_bytes"]) and the analytic step
    costs use it: the same FLOPs, ~1/6 of the fp32 weight bytes; a stock run records nothing; a crafted value
    (not a positive int, or absurdly large) is ignored, and a what-if in another dtype ignores it too."""
    from decoding import run
    from profiling import trace_costs
    stock = quantize_model(tiny("llama", seed=5), lambda name: "q8_0" if name == "lm_head" else "q4_1")
    packed = copy.deepcopy(stock)
    apply_layout(packed, "packed")
    prompt = [5, 6, 7, 8, 9, 5, 6, 7]
    tp, ts = (run(m, None, prompt, "greedy", max_new_tokens=4) for m in (packed, stock))
    assert "linear_weight_bytes" not in ts.model
    lb = tp.model["linear_weight_bytes"]
    linears = {id(m.weight): m.weight for m in stock.modules() if type(m) is torch.nn.Linear}
    assert 0 < lb < 0.3 * sum(w.numel() * 4 for w in linears.values())
    cp, cs = trace_costs(tp), trace_costs(ts)
    assert [c["flops"] for c in cp] == [c["flops"] for c in cs]
    assert all(a["weight_bytes"] - lb == b["weight_bytes"] - sum(w.numel() * 4 for w in linears.values())
               for a, b in zip(cp, cs))
    d = tp.to_dict()
    for bad in ("9", -1, True, 10 ** 14, 1.5):
        d["model"]["linear_weight_bytes"] = bad
        assert [c["weight_bytes"] for c in trace_costs(d)] == [c["weight_bytes"] for c in cs]
    assert trace_costs(tp, dtype="bfloat16")[1]["weight_bytes"] == trace_costs(ts, dtype="bfloat16")[1]["weight_bytes"]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("kind", ["q4_1", "q8_0", "fp32"])
def test_every_row_tiling_gives_each_row_its_one_row_bits(isa, kind):
    """Row tiles of every size and split (1..6 in pairs of panels, 7..16 in one tile, balanced tiles beyond,
    e.g. 13 = 7 + 6 for fp32 panels): each row equals its own 1-row call bitwise, up to 64 rows."""
    ops = kernel()
    w = quantized(16 * 3 + 5, 96, "q8_0" if kind == "fp32" else kind, seed=11)
    if kind == "fp32":
        P, op = ops.pack_panels(w + 1e-3), ops.packed_linear
    else:
        b = blocks.recover(w)
        P, op = ops.pack_blocks(b.q, b.d, b.m), ops.block_linear
    x = torch.randn(64, 96, generator=torch.Generator().manual_seed(2))
    one = torch.cat([op(x[i:i + 1], P, w.shape[0]) for i in range(64)])
    for m in range(1, 65):
        assert torch.equal(bits(op(x[:m], P, w.shape[0])), bits(one[:m])), (isa, kind, m)
