"""The graph path on CPU through the emulated CUDA graph (decoding/fast/graphs.py: EmulatedGraphs,
DECODESCOPE_EMULATE_GRAPHS=1 / emulated_graphs()): capture runs the bucket's step on the fixed buffers
(under the capture checker), replay re-runs it on the capture-time buffers and overwrites the static
outputs. So the graph path's bookkeeping runs in CI: bucket choice, padded rows, capture status in
trace.config["graphs"], capture-failure retry, graphs dropped when the cache regrows, the pool's reuse.

The CPU version of test_gpu_stage's CUDA capture test runs here with emulated graphs (the real one stays
for the GPU); the method x dtype x sampling matrix on emulated graphs is tests/test_cuda.py's "cpu" rows
(written once there, over the devices present). What the emulation CANNOT catch: real
kernel timing, stream ordering (warm-up side stream, non-blocking uploads racing a replay), memory-pool
aliasing across captures sharing a pool, the SDPA / cuDNN backend chosen inside a capture, and Python
side effects of the region that a real replay would not repeat."""
from __future__ import annotations

import pytest
import torch

from conftest import hf_greedy, tiny
from decoding import generate
from decoding.engine.core import Core
from decoding.fast import cache_pool
from decoding.fast.graphs import EmulatedGraph, emulated_graphs
from gpu_cases import CASES, PROMPT, Models


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return Models(tmp_path_factory.mktemp("heads"))


@pytest.mark.parametrize("case", list(CASES))
def test_emulated_every_bucket_a_run_used_was_captured(models, case):
    """CPU version of test_gpu_stage's CUDA capture test, for every method: graphs on, every bucket used
    captured (target and draft), none failed, HF greedy output; a second run captures nothing new."""
    with emulated_graphs() as backend:
        tr = generate(models.target, PROMPT * 2, models.drafter(case), max_new_tokens=24, static=True)
        g = tr.config["graphs"]
        assert g["on"] and g["used"] and not g["failed"], g
        assert set(g["used"]) <= set(g["captured"]), g
        assert tr.output_ids == hf_greedy(models.target, PROMPT * 2, 24)
        before = backend.captures
        again = generate(models.target, PROMPT * 2, models.drafter(case), max_new_tokens=24, static=True)
        assert again.output_ids == tr.output_ids and backend.captures == before  # pooled: no new capture


def test_capture_failure_is_retried_once_then_runs_eagerly():
    """One injected failure: the retry captures it (the failure is cleared). Two: the bucket runs eagerly
    for the cache's lifetime, recorded with its error; output exact either way."""
    model = tiny("llama", seed=21)
    for fails, captured in ((1, True), (2, False)):
        cache_pool._pool(model).clear()
        with emulated_graphs(fail={(1, 1): fails}), pytest.warns(UserWarning, match="capture failed"):
            tr = generate(model, PROMPT, max_new_tokens=12, static=True)
        g = tr.config["graphs"]
        assert tr.output_ids == hf_greedy(model, PROMPT, 12)
        assert ("1" in g["captured"]) is captured and ("1" in g["failed"]) is (not captured), g
        if not captured:
            assert "injected" in g["failed"]["1"] and cache_pool._pool(model)[0].tries[(1, 1)] == 2


def test_regrowth_drops_graphs_and_replay_reads_capture_time_buffers():
    """A replay reads the buffers it was captured with; a cache that regrows gets new buffers, drops its
    graphs and captures again, with the same logits as the dynamic path."""
    model = tiny("llama", seed=22)
    with emulated_graphs():
        a, b = Core(model, static=False), Core(model, static=True, capacity=8)
        for c in (a, b):
            c.prefill(PROMPT)
            c.commit(list(range(len(PROMPT))))
        first = b.cache.io
        for step in range(3):
            la, lb = a.forward([1, 2, 3], [-1, 0, 1]), b.forward([1, 2, 3], [-1, 0, 1])
            torch.testing.assert_close(la, lb, rtol=1e-5, atol=1e-5)
            assert all(isinstance(e[0], EmulatedGraph) for e in b.cache.graphs.values())
            for c in (a, b):
                c.commit([0, 1, 2])
        assert b.cache.capacity == 256 and b.cache.graphs and all(e[0].replays for e in b.cache.graphs.values())
        b.cache.ensure(300)  # regrow: new storage and buffers, graphs dropped
        assert b.cache.io is not first and not b.cache.graphs
        torch.testing.assert_close(a.forward([4], [-1]), b.forward([4], [-1]), rtol=1e-5, atol=1e-5)
        assert b.cache.graphs  # captured again on the new buffers


def test_captured_outputs_are_garbage_until_replayed():
    """As on CUDA, a capture computes nothing: the static outputs hold NaN until the first replay."""
    model = tiny("llama", seed=23)
    with emulated_graphs(), torch.inference_mode():
        core = Core(model, static=True)
        core.prefill(PROMPT)
        core.commit(list(range(len(PROMPT))))
        kv = core.cache
        key = (1, 1)
        graph, out = kv._capture(key, (*kv.bucket_args(key), None, None))
        assert torch.isnan(out[0]).all()
        graph.replay()
        assert torch.isfinite(out[0]).all()

