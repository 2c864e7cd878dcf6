"""The int8 kernel (decoding/fast/cpu_int8.cpp): block weights times per-32-block int8 activations, int32 block
sums combined in one fixed order. Its promise is batch invariance, bitwise: a row's output does not depend on how
many rows share the call (1..32, odd widths, fused or not), nor on the instruction set (VNNI or AVX2), nor, for the
whole step, on the chain or tree it sits in; so every method returns exactly this mode's greedy tokens. Its values
are checked against a float64 model of the same arithmetic, and the fp32 kernel's panels are left as they were."""
from __future__ import annotations

import copy
import random

import pytest
import torch

from conftest import tiny
from decoding import generate, make_drafter
from decoding.engine.core import Core
from decoding.engine.masks import chain_parents
from decoding.fast import blocks, cpu_gemm
from decoding.fast.cpu_step import CpuKV
from decoding.fast.layout import apply_layout
from decoding.models import describe
from test_cpu_blocks import ISAS, isa, quantize_model, quantized  # noqa: F401 - isa is a fixture

ROWS = range(1, 33)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def reference(x: torch.Tensor, b: blocks.Blocks) -> torch.Tensor:
    """The int8 mode's arithmetic in float64: codes round(x / d), d = amax / 127 per 32-block of a row; per block
    the exact integer dot product times d_w * d_x (plus m_w * d_x * sum(codes) for Q4_1), summed over blocks."""
    m, k = x.shape
    xb = x.reshape(m, k // 32, 32)
    d = xb.abs().amax(-1) / 127
    q = torch.round(xb * torch.where(d > 0, 1 / d, torch.zeros_like(d))[..., None]).clamp(-127, 127)
    w = b.q.float().reshape(b.q.shape[0], k // 32, 32)
    isum = torch.einsum("mbk,nbk->mnb", q.double(), w.double())
    out = b.d.double()[None] * d.double()[:, None] * isum
    if b.kind == "q4_1":
        out += b.m.double()[None] * (d.double() * q.double().sum(-1))[:, None]
    return out.sum(-1)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("kind", ["q4_1", "q8_0"])
@pytest.mark.parametrize("n,k", [(1, 32), (17, 64), (50, 96), (33, 160), (130, 576)])
def test_a_row_is_bitwise_the_same_for_every_row_count(isa, kind, n, k):
    ops = cpu_gemm.kernel()
    b = blocks.recover(quantized(n, k, kind, seed=n + k))
    P = ops.pack_blocks_i8(b.q, b.d, b.m)
    assert P.dtype == torch.int8 and P.shape == ops.pack_blocks(b.q, b.d, b.m).shape
    x = torch.randn(32, k, generator=torch.Generator().manual_seed(k)) * 3
    bias = torch.randn(n)
    full = ops.block_linear(x, P, n, bias)
    for m in ROWS:
        assert torch.equal(bits(ops.block_linear(x[:m], P, n, bias)), bits(full[:m])), (isa, m)
        assert torch.equal(bits(ops.block_linear(x[m - 1:m], P, n, bias)), bits(full[m - 1:m])), (isa, m)
    want = reference(x, b) + bias.double()
    torch.testing.assert_close(full.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def test_both_instruction_sets_give_the_same_bits():
    ops = cpu_gemm.kernel()
    try:
        for kind in ("q4_1", "q8_0"):
            b = blocks.recover(quantized(57, 192, kind, seed=3))
            P = ops.pack_blocks_i8(b.q, b.d, b.m)
            x = torch.randn(13, 192)
            outs = []
            for name in ISAS:
                ops.select_isa(name)
                outs.append(ops.block_linear(x, P, 57))
            assert torch.equal(bits(outs[0]), bits(outs[1])), kind
    finally:
        ops.select_isa(cpu_gemm.isa_wanted())


def test_the_int8_mode_differs_from_fp32_by_activation_rounding_only():
    """Not the fp32 kernel's values (the activations are rounded to 8 bits), but close to them."""
    ops = cpu_gemm.kernel()
    b = blocks.recover(quantized(48, 256, "q4_1", seed=9))
    x = torch.randn(5, 256)
    int8 = ops.block_linear(x, ops.pack_blocks_i8(b.q, b.d, b.m), 48)
    fp32 = ops.block_linear(x, ops.pack_blocks(b.q, b.d, b.m), 48)
    assert not torch.equal(int8, fp32)
    assert float((int8 - fp32).abs().max()) < 0.05 * float(fp32.abs().max())


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_a_fused_call_equals_each_matrix_alone(isa):
    ops = cpu_gemm.kernel()
    ws = [blocks.recover(quantized(n, 96, "q4_1", seed=n)) for n in (40, 17, 33)]
    P = torch.cat([ops.pack_blocks_i8(b.q, b.d, b.m) for b in ws])
    biases = [torch.randn(40), None, torch.randn(33)]
    for m in (1, 3, 8, 17, 32):
        x = torch.randn(m, 96)
        outs = ops.fused_linear(x, P, [40, 17, 33], biases)
        for b, o, bias in zip(ws, outs, biases):
            alone = ops.block_linear(x, ops.pack_blocks_i8(b.q, b.d, b.m), o.shape[-1], bias)
            assert torch.equal(bits(o), bits(alone)), m


def test_malformed_panels_and_codes_are_refused():
    ops = cpu_gemm.kernel()
    b = blocks.recover(quantized(16, 64, "q8_0"))
    with pytest.raises(RuntimeError, match="-127..127"):
        ops.pack_blocks_i8(torch.full((16, 64), -128, dtype=torch.int8), b.d)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        ops.pack_blocks_i8(torch.zeros(16, 40, dtype=torch.int8), torch.zeros(16, 1, dtype=torch.half))
    P = ops.pack_blocks_i8(b.q, b.d)
    with pytest.raises(RuntimeError, match="block panels"):
        ops.block_linear(torch.randn(2, 96), P, 16)


def models(seed: int = 5, hidden: int = 64, layers: int = 3, arch: str = "llama"):
    """(stock, int8-packed, fp32-packed) copies of one tiny model whose Linears are exactly ggml blocks."""
    stock = quantize_model(tiny(arch, seed=seed, hidden=hidden, layers=layers, vocab=96),
                           lambda name: "q8_0" if name == "lm_head" else "q4_1")
    int8, fp32 = copy.deepcopy(stock), copy.deepcopy(stock)
    assert apply_layout(int8, "packed", kernel="int8") == "packed"
    assert apply_layout(fp32, "packed", kernel="fp32") == "packed"
    return stock, int8, fp32


def path_to(parents: list[int], i: int) -> list[int]:
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_whole_step_gives_each_row_its_one_row_bits(isa, arch):
    """A tree or chain of q rows in one step: each row's logits and last hidden state are bitwise what feeding its
    path one token a step computes, whatever q (so verification is exact in this mode by construction)."""
    _, model, _ = models(arch=arch)
    rng = random.Random(1)
    prompt = [rng.randrange(96) for _ in range(21)]

    def fresh() -> Core:
        core = Core(model)
        assert isinstance(core.cache, CpuKV)
        core.prefill(prompt)
        core.commit(list(range(len(prompt))))
        return core

    for q in (2, 5, 8, 9, 16, 17, 32):
        parents = chain_parents(q) if q % 2 == 0 else [-1] + [rng.randrange(-1, i) for i in range(1, q)]
        tokens = [rng.randrange(96) for _ in range(q)]
        logits, hidden = fresh().forward(tokens, parents, hidden=list(range(q)), layers=(-1,))
        for i in rng.sample(range(q), min(q, 4)):
            core = fresh()
            for j in path_to(parents, i):
                one, h = core.forward([tokens[j]], [-1], hidden=[0], layers=(-1,))
                core.commit([0])
            assert torch.equal(bits(one[0]), bits(logits[i])), (q, i)
            assert torch.equal(bits(h[0, 0]), bits(hidden[0, i])), (q, i)


CONFIGS = [
    ("lookahead", dict(window=4, ngram=3, guesses=4)),
    ("lookahead", dict(window=1, ngram=3, guesses=2)),
    ("prompt_lookup", {}),
    ("prompt_lookup", dict(num_tokens=4, max_ngram=2, candidates=3)),
    ("jacobi", dict(block=4)),
]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("method,params", CONFIGS, ids=str)
def test_every_method_returns_the_int8_modes_own_greedy(arch, method, params):
    _, model, _ = models(arch=arch)
    multi = False
    for prompt in ([5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12], list(range(40, 60))):
        want = generate(model, prompt, make_drafter("greedy"), max_new_tokens=40).output_ids
        tr = generate(model, prompt, make_drafter(method, **params), max_new_tokens=40)
        assert tr.output_ids == want, (method, params)
        multi |= any(len(s.accepted) > 1 for s in tr.steps)
    assert multi, "no step accepted more than one token: verification was not exercised"


def test_speculative_with_a_draft_returns_the_int8_greedy():
    _, model, _ = models(seed=5)
    _, draft, _ = models(seed=6, hidden=32, layers=2)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7]
    want = generate(model, prompt, make_drafter("greedy"), max_new_tokens=40).output_ids
    for kw in (dict(draft_tokens=3), dict(tree=[2, 2, 1])):
        tr = generate(model, prompt, make_drafter("speculative", draft_model=draft, **kw), max_new_tokens=40)
        assert tr.output_ids == want, kw


def test_the_fp32_kernel_is_kept_and_the_trace_says_which_ran(monkeypatch):
    stock, int8, fp32 = models(hidden=32, layers=2)
    assert {m.panels.dtype for m in fp32.modules() if isinstance(m, cpu_gemm.PackedLinear)} == {torch.uint8}
    assert {m.panels.dtype for m in int8.modules() if isinstance(m, cpu_gemm.PackedLinear)} == {torch.int8}
    assert describe(fp32)["cpu_kernel"]["kernel"] == "fp32"
    k = describe(int8)["cpu_kernel"]
    assert k["kernel"] == "int8" and k["isa"] in ("AVX512-VNNI", "AVX2") and "own greedy" in k["exact"]
    assert "cpu_kernel" not in describe(stock)
    plain = copy.deepcopy(tiny("llama", seed=2, hidden=32, vocab=96))  # float weights: no block to run int8
    apply_layout(plain, "packed", kernel="int8")
    assert describe(plain)["cpu_kernel"]["kernel"] == "fp32" and describe(plain)["cpu_kernel"]["asked"] == "int8"
    monkeypatch.setenv("DECODESCOPE_CPU_KERNEL", "int8")
    env = copy.deepcopy(stock)
    apply_layout(env, "packed")
    assert env.cpu_kernel_ == "int8"
    monkeypatch.setenv("DECODESCOPE_CPU_KERNEL", "int4")
    with pytest.raises(ValueError, match="fp32, int8"):
        apply_layout(copy.deepcopy(stock), "packed")
    with pytest.raises(ValueError, match="packed layout only"):
        apply_layout(copy.deepcopy(stock), "column", kernel="int8")


def cli(*args: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "decoding", "generate", *args], capture_output=True, text=True,
                          timeout=180, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def test_the_cli_runs_the_int8_kernel_and_says_what_exact_means(tmp_path, capsys):
    """The first run goes through `python -m decoding` in a fresh process; the --check-exact run and the refusal
    call the same main() in this one (a fresh interpreter costs an import and a kernel load, ~20 s on 2 cores)."""
    import json
    from decoding.cli.main import main
    from transformers import AutoModelForCausalLM
    from conftest import save_tiny_dir
    from decoding import load, run
    folder = save_tiny_dir(tmp_path / "tiny", seed=3)
    model = AutoModelForCausalLM.from_pretrained(folder)
    quantize_model(model, lambda name: "q8_0" if name == "lm_head" else "q4_1").save_pretrained(folder)
    prompt = "def x ( y ) : return y + 1 def x ( y ) :"
    out = tmp_path / "run.json"
    r = cli("--model", folder, "--prompt", prompt, "--max-new-tokens", "16", "--method", "prompt_lookup",
            "--kernel", "int8", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "[exactness] int8 kernel" in r.stderr
    doc = json.loads(out.read_text())
    assert doc["model"]["cpu_kernel"]["kernel"] == "int8"
    m8, tok = load(folder, device="cpu", layout="packed", kernel="int8")
    assert doc["output_ids"] == run(m8, tok, prompt, "greedy", max_new_tokens=16, trace=False).output_ids
    capsys.readouterr()
    code = main(["generate", "--model", folder, "--prompt", prompt, "--max-new-tokens", "16", "--kernel", "int8",
                 "--check-exact", "--json", str(out)])
    checked = capsys.readouterr()
    assert code == 0, checked.err
    from conftest import hf_greedy
    from decoding.exactness import agreement
    want = agreement(json.loads(out.read_text())["output_ids"], hf_greedy(model, tok(prompt)["input_ids"], 16))
    assert not want["identical"]  # this model's int8 greedy leaves HF's float32 greedy at token 1 (seed 3)
    assert json.loads(out.read_text())["agreement"] == {**want, **{k: v for k, v in json.loads(
        out.read_text())["agreement"].items() if k not in want}}  # measured against float32 HF greedy
    assert "vs HF greedy" in checked.err
    code = main(["generate", "--model", folder, "--prompt", prompt, "--kernel", "int8", "--layout", "column"])
    bad = capsys.readouterr()  # an exception of ours would have propagated here instead of a status
    assert code != 0 and "packed layout only" in bad.err and "Traceback" not in bad.err
    assert len(bad.err.strip().splitlines()) == 1, bad.err


def test_eagle_and_medusa_heads_return_the_int8_greedy(tmp_path):
    """Heads trained on the model draft on the int8 kernel beside an int8 target; the output stays the int8
    greedy's, with fixed and priced (adaptive) trees."""
    from decoding.api import run
    from test_heads import PROMPTS, _train
    stock, int8, _ = models(hidden=32, layers=2)
    multi = False
    for kind in ("eagle", "medusa"):
        heads = _train(stock, kind, tmp_path / kind, epochs=2)
        for prompt in PROMPTS[:2]:
            want = run(int8, None, prompt, "greedy", max_new_tokens=32, trace=False).output_ids
            for kw in (dict(budget=8), dict(budget=8, adaptive=1)) if kind == "eagle" else (dict(budget=8),):
                tr = run(int8, None, prompt, kind, max_new_tokens=32, heads=heads, **kw)
                assert tr.output_ids == want, (kind, kw)
                multi |= any(len(s.accepted) > 1 for s in tr.steps)
    assert multi
