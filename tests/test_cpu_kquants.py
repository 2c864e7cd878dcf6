"""K-quants and the other ggml formats on the CPU block kernels (decoding/fast/blocks.py, cpu_gemm.cpp): every
format a llama.cpp file mixes (Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_0) is recovered bit for bit from the float32
values gguf-py's own `gguf.quants.dequantize` gives, the block kernel equals the fp32 panels bitwise on them, and a
GGUF mixing Q4_K, Q5_0, Q6_K and Q8_0 (Gemma 3's Q4_K_M mix) converts with every matrix on the block kernel, decodes
HF greedy's tokens in fp32, and every method returns the int8 mode's own greedy tokens (the int8 kernel runs k8 too).

gguf-py cannot quantise the K formats, so their blocks are written here as bytes: random codes and scales (every
bit pattern is a valid block), float16 scales chosen for weights of a sensible size, and of either sign where the
format allows it (a negative scale de-quantises a zero code to -0.0, which the recovery must reproduce)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from decoding.fast import blocks, cpu_gemm
from decoding.fast.cpu_gemm import kernel
from test_fetch_model import CHAT_TEMPLATE, MERGES, SPECIALS, tokens

gguf = pytest.importorskip("gguf", reason="the gguf package de-quantises and writes the test's blocks")
T = gguf.GGMLQuantizationType
ISAS = ("AVX2", "AVX512")  # where the CPU has no AVX-512, select_isa keeps AVX2 and the test still runs
# byte offset of each float16 scale in a block, and its magnitude; signed: either sign (the format allows it)
SCALES = {T.Q4_0: [(0, 4e-3, True)], T.Q5_0: [(0, 2e-3, True)], T.Q8_0: [(0, 4e-4, False)],
          T.Q5_1: [(0, 2e-3, False), (2, 3e-2, True)], T.Q4_K: [(0, 1e-4, False), (2, 1e-4, False)],
          T.Q5_K: [(0, 5e-5, False), (2, 1e-4, False)], T.Q6_K: [(208, 3e-5, True)]}
STORED = {T.Q4_0: "q8_0", T.Q5_0: "q8_0", T.Q8_0: "q8_0", T.Q5_1: "k8", T.Q4_K: "k8", T.Q5_K: "k8", T.Q6_K: "k8"}


def random_blocks(kind, n: int, k: int, seed: int) -> np.ndarray:
    """The bytes of an [n, k] matrix in ggml format `kind`: random codes, scales of SCALES' size."""
    size, type_size = gguf.constants.GGML_QUANT_SIZES[kind]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n * k // size, type_size), dtype=np.uint8)
    if kind == T.Q8_0:
        raw[:, 2:][raw[:, 2:] == 128] = 129  # ggml's Q8_0 codes are -127..127
    for at, scale, signed in SCALES[kind]:
        v = (scale * rng.uniform(0.25, 1.0, len(raw)) * (rng.choice([-1, 1], len(raw)) if signed else 1))
        raw[:, at:at + 2] = v.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(n, k // size * type_size)


def dequantized(kind, n: int, k: int, seed: int = 0) -> torch.Tensor:
    """gguf-py's float32 values of random `kind` blocks [n, k]: what a conversion stores."""
    return torch.from_numpy(gguf.quants.dequantize(random_blocks(kind, n, k, seed), kind).reshape(n, k).copy())


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def same_weights(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, except that a block of zeros may hold zeros of the other sign (blocks.zeros says why)."""
    return bool(((bits(a) == bits(b)) | ((a == 0) & (b == 0))).all())


@pytest.fixture
def isa(request):
    ops = kernel()
    yield ops.select_isa(request.param)
    ops.select_isa(cpu_gemm.isa_wanted())


@pytest.mark.parametrize("kind", list(STORED), ids=lambda t: t.name)
def test_every_format_is_recovered_bit_for_bit(kind):
    w = dequantized(kind, 24, 512, seed=int(kind))
    if kind in (T.Q4_0, T.Q5_0, T.Q6_K):
        assert bool((bits(w) == blocks.NEG_ZERO).any()), "the blocks include negative scales times zero codes"
    b = blocks.recover(w)
    assert b is not None and b.kind == STORED[kind]
    assert same_weights(blocks.dequantize(b), w)
    assert int((bits(blocks.dequantize(b)) != bits(w)).sum()) <= int((w == 0).sum())


@pytest.mark.parametrize("kind", list(STORED), ids=lambda t: t.name)
def test_the_one_block_screens_pass_every_block_a_format_holds(kind):
    """recover() refuses a float weight on its first block (blocks._q8_0_could / _k8_could: every guess at once)
    instead of ~1,300 guesses one by one: a screen may refuse only what the fit would. Every non-zero block of
    every format passes the screen of the storage it is recovered as."""
    w = dequantized(kind, 8, 512, seed=int(kind) + 7)
    qk = blocks.QK16 if STORED[kind] == "k8" else blocks.QK
    could = blocks._k8_could if STORED[kind] == "k8" else blocks._q8_0_could
    v = w.reshape(-1, qk)
    live = (~blocks.zeros(v)).nonzero().squeeze(1)
    assert live.numel() > 100
    neg = blocks.negative(v)
    assert all(could(v[i], bool(neg[i])) for i in live.tolist())


def test_a_float_weight_is_refused_on_its_first_block():
    """A trained (float) weight is no ggml format: refused in milliseconds (the embedded model's 43 matrices took
    ~10 s to load before the screens), by the screens, never by a fit that would have succeeded."""
    import time
    torch.manual_seed(0)
    w = torch.randn(1024, 256) * 0.02
    v16, v32 = w.reshape(-1, blocks.QK16), w.reshape(-1, blocks.QK)
    assert not blocks._k8_could(v16[0], False) and not blocks._q8_0_could(v32[0], False)
    blocks.recover(w[:8])
    t0 = time.process_time()
    for _ in range(10):
        assert blocks.recover(w) is None
    assert time.process_time() - t0 < 1.0  # CPU time of 10 refusals: ~0.03 s; the fits' ~1,300 guesses took 2 s


def test_a_value_off_by_one_ulp_refuses_the_matrix():
    for kind in (T.Q4_K, T.Q6_K, T.Q5_0):
        w = dequantized(kind, 16, 256, seed=3)
        w[9, 40] = torch.nextafter(w[9, 40], torch.tensor(1.0))
        assert blocks.recover(w) is None, kind.name
        w = dequantized(kind, 16, 256, seed=3)
        w[11, 7] = float("nan")
        assert blocks.recover(w) is None, kind.name
    torch.manual_seed(0)
    assert blocks.recover(torch.randn(32, 256) * 0.05) is None  # plain float weights stay float32


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("kind", [T.Q4_K, T.Q6_K, T.Q5_1], ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 37])
def test_k8_block_kernel_equals_the_fp32_panels_bitwise(isa, kind, n):
    """k8 records through every row tiling (pairs of panels, one-panel tiles, de-quantised scratch panels)."""
    ops = kernel()
    w = dequantized(kind, n, 256, seed=n)
    b = blocks.recover(w)
    assert b is not None and b.kind == "k8"
    P, F32 = ops.pack_blocks(b.q, b.d, b.m), ops.pack_panels(w)
    assert P.dtype == torch.uint8 and P.shape[2] == blocks.RECORD_BYTES["k8"]
    assert P.numel() == blocks.stored_bytes("k8", n, 256)
    bias = torch.randn(n)
    g = torch.Generator().manual_seed(n)
    for m in (*range(1, 18), 24, 33):
        x = torch.randn(m, 256, generator=g)
        assert torch.equal(bits(ops.block_linear(x, P, n)), bits(ops.packed_linear(x, F32, n))), (isa, m)
        assert torch.equal(bits(ops.block_linear(x, P, n, bias)), bits(ops.packed_linear(x, F32, n, bias)))


@pytest.mark.parametrize("kind", [T.Q4_K, T.Q6_K, T.Q5_1], ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 37])
def test_the_int8_kernel_gives_k8_rows_their_own_bits(kind, n):
    """int8 k8 panels: every row's output is its 1-row call's bits for 1..33 rows, under both instruction sets
    (AVX2 and AVX-512 VNNI give the same bits), and close to the float64 product (activations rounded to 8 bits)."""
    ops = kernel()
    w = dequantized(kind, n, 256, seed=n)
    b = blocks.recover(w)
    P = ops.pack_blocks_i8(b.q, b.d, b.m)
    assert P.dtype == torch.int8 and P.shape[2] == blocks.RECORD_BYTES["k8"]
    x = torch.randn(33, 256, generator=torch.Generator().manual_seed(n))
    outs = []
    try:
        for name in ISAS:
            ops.select_isa(name)
            one = torch.cat([ops.block_linear(x[i:i + 1], P, n) for i in range(33)])
            for m in (2, 5, 9, 17, 33):
                assert torch.equal(bits(ops.block_linear(x[:m], P, n)), bits(one[:m])), (name, m)
            outs.append(one)
    finally:
        ops.select_isa(cpu_gemm.isa_wanted())
    assert torch.equal(bits(outs[0]), bits(outs[1]))
    ref = x.double() @ w.double().T
    assert (outs[0].double() - ref).abs().max() < 0.03 * ref.abs().max()


def test_k8_weights_fuse_and_run_the_int8_kernel():
    """q/k/v all k8: one fused call, each output its own call's bits, in both kernels; coverage counts what each
    kernel streams (under int8 every block matrix, k8 and q8_0 alike)."""
    from decoding.fast.cpu_gemm import PackedLinear, coverage, fuse_linears
    mods = torch.nn.ModuleDict({n: torch.nn.Linear(256, 48, bias=False) for n in ("q_proj", "k_proj", "v_proj")})
    mods["o_proj"] = torch.nn.Linear(256, 40, bias=False)
    with torch.no_grad():
        for i, (name, kind) in enumerate(zip(mods, (T.Q4_K, T.Q6_K, T.Q5_K, T.Q5_0))):
            mods[name].weight.copy_(dequantized(kind, mods[name].out_features, 256, seed=10 + i))
    for kernel_name in ("fp32", "int8"):
        packed = torch.nn.ModuleDict({n: PackedLinear(m, kernel_name=kernel_name) for n, m in mods.items()})
        assert [m.storage for m in packed.values()] == ["k8", "k8", "k8", "q8_0"]
        assert fuse_linears(packed) == 1
        x = torch.randn(3, 256)
        with torch.no_grad():
            outs = [packed[n](x) for n in ("q_proj", "k_proj", "v_proj")]
            for n, out in zip(("q_proj", "k_proj", "v_proj"), outs):
                alone = kernel().block_linear(x, packed[n].panels.contiguous(), 48)
                assert torch.equal(bits(out), bits(alone)), (kernel_name, n)
        c = coverage(packed)
        total = 3 * blocks.stored_bytes("k8", 48, 256) + blocks.stored_bytes("q8_0", 40, 256)
        on = "int8" if kernel_name == "int8" else "fp32_blocks"
        assert c[on] == {"matrices": 4, "bytes": total} and c["fp32_panels"]["matrices"] == 0


# --- a GGUF with Gemma 3's Q4_K_M mix -----------------------------------------------------------------------------

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 256, 512, 2, 4, 2  # K-quant rows are whole 256-blocks
MIX = {("attn_q", 0): T.Q5_0, ("attn_k", 0): T.Q5_0, ("attn_v", 0): T.Q8_0, ("attn_output", 0): T.Q4_K,
       ("ffn_gate", 0): T.Q5_0, ("ffn_up", 0): T.Q5_0, ("ffn_down", 0): T.Q6_K,
       ("attn_q", 1): T.Q4_0, ("attn_k", 1): T.Q5_1, ("attn_v", 1): T.Q6_K, ("attn_output", 1): T.Q4_K,
       ("ffn_gate", 1): T.Q5_K, ("ffn_up", 1): T.Q4_K, ("ffn_down", 1): T.Q6_K}
SHAPES = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (HIDDEN // HEADS * KV_HEADS, HIDDEN),
          "attn_v": (HIDDEN // HEADS * KV_HEADS, HIDDEN), "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (FFN, HIDDEN),
          "ffn_up": (FFN, HIDDEN), "ffn_down": (HIDDEN, FFN)}
PROMPT = "the the a the in the the a"
N = 16


def write_kquant_gguf(path: Path) -> None:
    """A tiny llama GGUF whose matrices are MIX's formats (the embedding, tied to the LM head, Q8_0)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny k-quant llama")
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens()))
    w.add_file_type(15)  # MOSTLY_Q4_K_M
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens())
    w.add_token_types([gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens()) - 3))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    w.add_tensor("token_embd.weight", random_blocks(T.Q8_0, len(tokens()), HIDDEN, 1), raw_dtype=T.Q8_0)
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    for (short, layer), kind in MIX.items():
        w.add_tensor(f"blk.{layer}.{short}.weight", random_blocks(kind, *SHAPES[short], seed=100 * layer + int(kind)),
                     raw_dtype=kind)
    for layer in range(LAYERS):
        w.add_tensor(f"blk.{layer}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        w.add_tensor(f"blk.{layer}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def kquant_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("kquant_gguf") / "tiny-q4_k_m.gguf"
    write_kquant_gguf(path)
    return path


def generate(argv: list[str], capsys) -> tuple[int, str]:
    from decoding.cli.main import main
    rc = main(["generate", "--prompt", PROMPT, "--max-new-tokens", str(N), "--stop", "none", *argv])
    return rc, capsys.readouterr().err


def test_a_q4_k_m_gguf_runs_every_matrix_on_the_block_kernels(kquant_gguf, tmp_path, monkeypatch, capsys):
    """The done-when of K-quants on the block kernels: the conversion says every matrix is blocks, the loaded model
    streams them so, fp32 greedy is HF's greedy on the converted folder, and under int8 every method returns the
    int8 greedy's tokens (batch invariance) with the int8 kernel streaming every matrix."""
    from decoding import load
    from decoding.models.gguf import converted
    from test_gguf_model import hf_reference
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    rc, err = generate(["--model", str(kquant_gguf), "--method", "greedy", "--json", str(tmp_path / "g.json")], capsys)
    assert rc == 0, err
    n = len(MIX) + 1  # and the tied LM head
    k8 = sum(STORED[k] == "k8" for k in MIX.values())
    assert f"streams {n} of {n} matrices as blocks (q4_1 0, q8_0 {n - k8}, k8 {k8}:" in err, err
    assert f"0 de-quantised to float32 (0.0 MB); --kernel int8 runs {n} of them (" in err and "100% of the" in err
    folder = converted(kquant_gguf)
    said = json.loads((folder / "gguf.json").read_text())
    assert said["tensor_types"] == {"Q8_0": 2, "Q5_0": 4, "Q4_K": 3, "Q6_K": 3, "Q4_0": 1, "Q5_1": 1, "Q5_K": 1,
                                    "F32": 5}
    model, _ = load(str(kquant_gguf), layout="packed")
    assert cpu_gemm.storage_counts(model) == said["cpu_block_storage"] == {"q4_1": 0, "q8_0": n - k8, "k8": k8,
                                                                          "fp32": 0}
    fp32_ids = json.loads((tmp_path / "g.json").read_text())["output_ids"]
    assert fp32_ids == hf_reference(folder, PROMPT, N)
    rc, err = generate(["--model", str(kquant_gguf), "--method", "greedy", "--kernel", "int8", "--json",
                        str(tmp_path / "i.json")], capsys)
    assert rc == 0, err
    trace = json.loads((tmp_path / "i.json").read_text())
    ref = trace["output_ids"]
    streams = trace["model"]["cpu_kernel"]["streams"]
    assert trace["model"]["cpu_kernel"]["kernel"] == "int8"
    assert (streams["int8"]["matrices"], streams["fp32_blocks"]["matrices"], streams["fp32_panels"]["matrices"]) \
        == (n, 0, 0)
    methods = {"lookahead": ["--window", "3", "--ngram", "3", "--guesses", "3"], "prompt_lookup": [], "jacobi": []}
    for m, extra in methods.items():
        out = tmp_path / f"{m}.json"
        rc, err = generate(["--model", str(kquant_gguf), "--method", m, "--kernel", "int8", "--json", str(out),
                            *extra], capsys)
        assert rc == 0, (m, err)
        assert json.loads(out.read_text())["output_ids"] == ref, m
