"""Every method on every device and dtype: greedy, lookahead, prompt lookup, speculative chain / tree /
dynamic tree / staged, x {fp32, bf16} x {greedy, sampling}, on tiny in-process models and the shipped
assets/ models.

Why per device: on an H100, `--method speculative` crashed (a CPU index gathered CUDA probabilities) while
every CPU test passed. The rows are parametrised over devices: CPU rows run in every CI run, CUDA rows
carry the `cuda` marker and skip without a GPU (`pytest -m cuda` is what bench/gpu_check.py runs there).
Rules: fp32 greedy rows must equal HF greedy ids exactly; bf16 greedy rows report their measured agreement
with HF greedy (record_property "agreement") and must run; sampling rows must run and repeat by seed.
"""
from __future__ import annotations

import inspect
import json

import pytest
import torch

from conftest import tiny
from decoding import Sampling, generate, make_drafter
from decoding.models import DEFAULT_DRAFT, DEFAULT_TARGET, load
from decoding.exactness import agreement, describe_agreement
from decoding.exactness import hf_greedy

CUDA = torch.cuda.is_available()
DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=[pytest.mark.cuda,
                                                  pytest.mark.skipif(not CUDA, reason="no CUDA device")])]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# confidence=0: tiny random drafts are unsure of everything; without it chains would stop after one token
METHODS = {"greedy": ("greedy", {}),
           "lookahead": ("lookahead", dict(window=4, ngram=3, guesses=4)),
           "prompt_lookup": ("prompt_lookup", dict(num_tokens=4, candidates=2)),
           "chain": ("speculative", dict(draft_tokens=4, confidence=0.0)),
           "tree": ("speculative", dict(tree=[3, 2, 1], confidence=0.0)),
           "dynamic": ("speculative", dict(tree_budget=12)),
           "staged": ("speculative", dict(tree=[2, 2, 1], staged=True, confidence=0.0))}
TINY_PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]
ASSET_PROMPT = "def read_config(path):\n    with open(path) as f:\n        return json.load(f)\n\n\ndef write_config("
N = 32
_CACHE: dict = {}


def models(source: str, device: str, dtype: str):
    """(target, draft, prompt ids), built once per (source, device, dtype)."""
    key = (source, device, dtype)
    if key not in _CACHE:
        if source == "tiny":
            target = tiny("llama", seed=0).to(device=device, dtype=DTYPES[dtype])
            draft = tiny("llama", seed=0, layers=1).to(device=device, dtype=DTYPES[dtype])
            ids = TINY_PROMPT
        else:
            target, tok = load(DEFAULT_TARGET, device=device, dtype=dtype)
            draft, _ = load(DEFAULT_DRAFT, device=device, dtype=dtype)
            ids = tok(ASSET_PROMPT)["input_ids"]
        _CACHE[key] = (target, draft, ids)
    return _CACHE[key]


def decode(target, draft, ids, method: str, sampling: Sampling = Sampling(), **extra):
    name, params = METHODS[method]
    if name == "speculative":
        params = dict(params, draft_model=draft)
    return generate(target, ids, make_drafter(name, **params), max_new_tokens=N, sampling=sampling, **extra)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("source", ["tiny", "assets"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_greedy_matches_hf_greedy(device, dtype, source, method, record_property):
    target, draft, ids = models(source, device, dtype)
    tr = decode(target, draft, ids, method)
    a = agreement(tr.output_ids, hf_greedy(target, ids, N))
    record_property("agreement", json.dumps({**a, "device": device, "dtype": dtype, "source": source,
                                             "method": method}))
    assert len(tr.output_ids) == N and [t for s in tr.steps for t in s.accepted] == tr.output_ids
    if dtype == "fp32":
        assert a["identical"], f"{method} fp32 on {device}: {describe_agreement(a)} from HF greedy"


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("source", ["tiny", "assets"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_sampling_runs_and_repeats_by_seed(device, dtype, source, method):
    target, draft, ids = models(source, device, dtype)
    vocab = target.get_input_embeddings().weight.shape[0]
    runs = [decode(target, draft, ids, method, Sampling(0.8, top_k=20, seed=seed)).output_ids for seed in (3, 3)]
    assert runs[0] == runs[1], f"{method} sampling on {device} {dtype} does not repeat with the same seed"
    assert len(runs[0]) == N and all(0 <= t < vocab for t in runs[0])


def _has_static() -> bool:
    return "static" in inspect.signature(generate).parameters


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("method", ["greedy", "lookahead", "chain", "tree"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_static_and_dynamic_cache(device, dtype, method, static, record_property):
    """The same rules with the static KV cache (when the runner has one) and the dynamic one."""
    if static and not _has_static():
        pytest.skip("decoding.engine.runner.generate has no `static` option in this version")
    target, draft, ids = models("assets", device, dtype)
    extra = {"static": static} if _has_static() else {}
    tr = decode(target, draft, ids, method, **extra)
    a = agreement(tr.output_ids, hf_greedy(target, ids, N))
    record_property("agreement", json.dumps({**a, "device": device, "dtype": dtype, "source": "assets",
                                             "method": method, "static": static}))
    assert len(tr.output_ids) == N
    if dtype == "fp32":
        assert a["identical"], f"{method} static={static} fp32 on {device}: {describe_agreement(a)}"
    sampled = [decode(target, draft, ids, method, Sampling(0.8, top_k=20, seed=5), **extra).output_ids
               for _ in range(2)]
    assert sampled[0] == sampled[1]
