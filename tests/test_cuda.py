"""Every method on every device present and dtype: greedy, lookahead, prompt lookup, speculative chain /
tree / dynamic tree / staged, x {fp32, bf16} x {greedy, sampling}, on tiny in-process models and the
shipped assets/ models, on the graph path (static cache + graphs) and, for some methods, the dynamic path.

Why per device: on an H100, `--method speculative` crashed (a CPU index gathered CUDA probabilities) while
every CPU test passed. The matrix is written once and parametrised over the devices present:
- "cpu": the CPU with emulated CUDA graphs (decoding.fast.graphs.emulated_graphs(): capture runs the bucket's
  step under the capture checker, replay re-runs it on the capture-time buffers), so the graph path's
  bookkeeping (buckets, padded rows, capture status, the pool) runs in every CI run;
- "cuda": generated only when a CUDA device is present (no row is skipped elsewhere), with the `cuda` marker:
  `pytest -m cuda tests/test_cuda.py` is what bench/gpu/gpu_check.py runs there; real graphs, real kernels.
Rules: fp32 greedy rows must equal HF greedy ids exactly; bf16 greedy rows report their measured agreement
with HF greedy (record_property "agreement") and must run; sampling rows must run and repeat by seed; a
graph-path run must have captured every bucket it used, with no failed capture.

Rows that stay CUDA-only (tests/test_gpu_stage.py): the real capture of every bucket under
torch.cuda.set_sync_debug_mode (the sync-debug mode and the CUDA caching allocator exist only on CUDA; the
CPU stand-in is tests/test_emulated_graph.py's capture test and tests/test_speculative_syncs.py's count).
What the emulation cannot catch: real kernel timing, stream ordering, memory-pool aliasing across captures,
the SDPA backend chosen inside a capture; the CUDA rows are the only check of those.
"""
from __future__ import annotations

import contextlib
import json

import pytest
import torch

from conftest import tiny
from decoding import Sampling, generate, make_drafter
from decoding.exactness import agreement, describe_agreement, hf_greedy
from decoding.fast.graphs import emulated_graphs
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET, load

CUDA = torch.cuda.is_available()
# the devices present: no CUDA row exists without CUDA, so nothing here is skipped on a CPU machine
DEVICES = [pytest.param("cpu", id="cpu")] + (
    [pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)] if CUDA else [])
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
            target, tok = load(EMBEDDED_TARGET, device=device, dtype=dtype)
            draft, _ = load(EMBEDDED_DRAFT, device=device, dtype=dtype)
            ids = tok(ASSET_PROMPT)["input_ids"]
        _CACHE[key] = (target, draft, ids)
    return _CACHE[key]


def reference(source: str, device: str, dtype: str) -> list[int]:
    """HF greedy's N tokens for models(source, device, dtype), computed once."""
    key = ("hf", source, device, dtype)
    if key not in _CACHE:
        target, _, ids = models(source, device, dtype)
        _CACHE[key] = hf_greedy(target, ids, N)
    return _CACHE[key]


def on(device: str):
    """The graph backend of a device: emulated graphs on the CPU, real ones on CUDA."""
    return emulated_graphs() if device == "cpu" else contextlib.nullcontext()


def decode(target, draft, ids, method: str, sampling: Sampling = Sampling(), **extra):
    name, params = METHODS[method]
    if name == "speculative":
        params = dict(params, draft_model=draft)
    return generate(target, ids, make_drafter(name, **params), max_new_tokens=N, sampling=sampling, **extra)


def run(device: str, target, draft, ids, method: str, sampling: Sampling = Sampling(), static: bool = True):
    """decode() on the device's graph path (static=True) or the dynamic path; a graph-path run must have
    captured every bucket it used."""
    with on(device):
        tr = decode(target, draft, ids, method, sampling, static=static)
    if static:
        g = tr.config["graphs"]
        assert g["on"] and not g["failed"] and set(g["used"]) <= set(g["captured"]), (method, device, g)
    return tr


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("source", ["tiny", "assets"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_greedy_matches_hf_greedy(device, dtype, source, method, record_property):
    target, draft, ids = models(source, device, dtype)
    tr = run(device, target, draft, ids, method)
    a = agreement(tr.output_ids, reference(source, device, dtype))
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
    runs = [run(device, target, draft, ids, method, Sampling(0.8, top_k=20, seed=seed)).output_ids
            for seed in (3, 3)]
    assert runs[0] == runs[1], f"{method} sampling on {device} {dtype} does not repeat with the same seed"
    assert len(runs[0]) == N and all(0 <= t < vocab for t in runs[0])


@pytest.mark.parametrize("method", ["greedy", "lookahead", "chain", "tree"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_cache_path(device, dtype, method, record_property):
    """The same rules on the dynamic path (a transformers DynamicCache, no graphs; the CPU default); the
    graph path's rows are the matrix above (static=True)."""
    target, draft, ids = models("assets", device, dtype)
    tr = run(device, target, draft, ids, method, static=False)
    a = agreement(tr.output_ids, reference("assets", device, dtype))
    record_property("agreement", json.dumps({**a, "device": device, "dtype": dtype, "source": "assets",
                                             "method": method, "static": False}))
    assert len(tr.output_ids) == N
    if dtype == "fp32":
        assert a["identical"], f"{method} dynamic path fp32 on {device}: {describe_agreement(a)}"
    sampled = [run(device, target, draft, ids, method, Sampling(0.8, top_k=20, seed=5), static=False).output_ids
               for _ in range(2)]
    assert sampled[0] == sampled[1]
