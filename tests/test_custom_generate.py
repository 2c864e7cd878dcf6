"""DecodeScope inside transformers' generate: custom_generate as a callable and as the repository's
custom_generate/ folder gives exactly plain greedy generate's ids on five architectures, with the trace."""
from pathlib import Path

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM

from conftest import tiny
from decoding.hf_generate import decodescope_generate

ROOT = Path(__file__).resolve().parent.parent
PROMPT = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]])
N = 32


def small(arch: str):
    if arch in ("llama", "qwen2", "gpt2"):
        return tiny(arch)
    torch.manual_seed(0)
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None)
    cfg = MistralConfig(sliding_window=None, **common) if arch == "mistral" else Phi3Config(**common)
    cfg._attn_implementation = "sdpa"
    return (MistralForCausalLM if arch == "mistral" else Phi3ForCausalLM)(cfg).eval()


@pytest.fixture(scope="module")
def models():
    return {a: small(a) for a in ("llama", "qwen2", "gpt2", "mistral", "phi3")}


def plain(model, **kw):
    with torch.no_grad():
        return model.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), max_new_tokens=N, do_sample=False,
                              pad_token_id=0, **kw)


CASES = [("lookahead", dict(window=3, ngram=3, guesses=3)), ("prompt_lookup", dict(num_tokens=4)),
         ("speculative", dict(draft_tokens=3))]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "mistral", "phi3"])
@pytest.mark.parametrize("method,params", CASES, ids=[c[0] for c in CASES])
def test_callable_equals_plain_generate(models, arch, method, params):
    model = models[arch]
    if method == "speculative":
        params = dict(params, draft_model=small(arch) if arch != "llama" else tiny("llama", seed=1))
    ref = plain(model)
    out = plain(model, custom_generate=decodescope_generate, method=method, return_dict_in_generate=True, **params)
    assert out.sequences.tolist() == ref.tolist()
    tr = out.trace
    assert tr.method == method and tr.output_ids == ref[0, PROMPT.shape[1]:].tolist()
    assert model.decodescope_trace is tr and len(tr.steps) < N + 1  # verification accepted several tokens at once


def test_repository_folder_form_equals_plain_generate(models):
    model = models["qwen2"]
    assert (ROOT / "custom_generate" / "generate.py").exists()
    out = plain(model, custom_generate=str(ROOT), trust_remote_code=True, method="lookahead", window=2, ngram=3,
                guesses=2)
    assert out.tolist() == plain(model).tolist() and model.decodescope_trace.method == "lookahead"


def test_unsupported_settings_are_refused(models):
    model = models["llama"]
    with pytest.raises(ValueError, match="RepetitionPenaltyLogitsProcessor"):
        plain(model, custom_generate=decodescope_generate, repetition_penalty=1.3)
    with pytest.raises(ValueError, match="one sequence at a time"):
        model.generate(PROMPT.repeat(2, 1), max_new_tokens=4, do_sample=False, pad_token_id=0,
                       custom_generate=decodescope_generate)
    with pytest.raises(ValueError, match="unknown method"):
        plain(model, custom_generate=decodescope_generate, method="beam")


def test_jacobi_and_self_drafting_heads_through_generate(models, tmp_path):
    """custom_generate takes every method: jacobi (block=) and Medusa / EAGLE (heads=, budget=, draft_vocab=,
    confidence=) give plain greedy generate's ids, with their traces."""
    from test_heads import _train
    model = models["qwen2"]
    ref = plain(model)
    out = plain(model, custom_generate=decodescope_generate, method="jacobi", block=4, return_dict_in_generate=True)
    assert out.sequences.tolist() == ref.tolist() and out.trace.method == "jacobi"
    for kind, extra in (("medusa", dict(budget=6)), ("eagle", dict(budget=8, draft_vocab=16, confidence=0.05))):
        heads = _train(model, kind, tmp_path / kind, epochs=4)
        out = plain(model, custom_generate=decodescope_generate, method=kind, heads=heads,
                    return_dict_in_generate=True, **extra)
        assert out.sequences.tolist() == ref.tolist(), kind
        assert out.trace.method == kind and out.trace.config["budget"] == extra["budget"]
    with pytest.raises(ValueError, match="eagle needs heads"):
        plain(model, custom_generate=decodescope_generate, method="eagle")


@pytest.mark.parametrize("form", ["callable", "folder"])
def test_sampling_follows_torch_manual_seed_unless_a_seed_is_given(models, form):
    """As HF sampling does: without seed=, torch.manual_seed(n) before generate() decides the sample (same n,
    same text; another n, another text); seed= fixes it whatever the global generator holds."""
    model = models["llama"]
    how = {"custom_generate": decodescope_generate} if form == "callable" else \
        {"custom_generate": str(ROOT), "trust_remote_code": True}

    def sample(n: int | None = None, **kw) -> list[int]:
        if n is not None:
            torch.manual_seed(n)
        return model.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), max_new_tokens=16, do_sample=True,
                              temperature=2.0, top_k=0, top_p=1.0, pad_token_id=0, method="lookahead", **how,
                              **kw)[0].tolist()

    assert sample(1) == sample(1)
    assert sample(1) != sample(2) or sample(3) != sample(1)
    assert model.decodescope_trace.config["sampling"]["seed"] is not None
    assert sample(1, seed=7) == sample(2, seed=7)
