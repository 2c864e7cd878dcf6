"""The GPU stage on CPU: capture status in the trace and the CLI, the graph path's row buckets
(fixed mode = what a CUDA graph replays, run eagerly), the pool's memory budget, and host synchronisations
per step. CUDA rows carry the `cuda` marker and skip without a GPU."""
from __future__ import annotations

import gc
import os
import sys
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode

import decoding
from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.engine.core import core_options
from decoding.fast.graphs import capture_warning
from decoding.fast.static_cache import StaticKV

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]
CUDA = torch.cuda.is_available()


def test_failed_capture_is_recorded_retried_once_and_stays_exact():
    """Graphs forced on where capture cannot work (CPU): every bucket's failure and error land in the
    trace config, each bucket is tried twice (first use + one retry) then runs eagerly, output exact."""
    model = tiny("llama", seed=11)
    with pytest.warns(UserWarning, match="capture failed"), core_options(graphs=True):
        tr = generate(model, PROMPT, make_drafter("lookahead", window=4, ngram=3, guesses=4),
                      max_new_tokens=24, static=True)
    assert tr.output_ids == hf_greedy(model, PROMPT, 24)
    g = tr.config["graphs"]
    assert g["on"] and g["used"] and not g["captured"] and set(g["failed"]) == set(g["used"])
    assert all(e for e in g["failed"].values())
    line = capture_warning(tr.config)
    assert line and "capture failed" in line and "\n" not in line
    from decoding.fast.cache_pool import _pool
    kv = _pool(model)[0]
    assert max(kv.tries.values()) == 2  # retried once, then given up for this cache
    assert capture_warning(generate(model, PROMPT, max_new_tokens=4, static=False).config) is None


def test_cli_prints_one_line_when_capture_failed(tiny_dir, capsys):
    from decoding.cli.main import main
    with pytest.warns(UserWarning), core_options(graphs=True):
        assert main(["generate", "--model", tiny_dir, "--prompt", "def x ( y ) :", "--max-new-tokens", "6",
                     "--static", "on"]) == 0
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[graphs]")]
    assert len(err) == 1 and "capture failed" in err[0]


@pytest.mark.parametrize("method,params", [("lookahead", dict(window=5, ngram=4, guesses=2)),
                                           ("speculative", dict(tree=[3, 2, 1], confidence=0.0)),
                                           ("speculative", dict(staged=True, confidence=0.0))], ids=str)
def test_fixed_path_reads_only_the_rows_it_needs(method, params):
    """The LM head runs for the rows a step reads on the graph path too: a (Qb, Rb) bucket with Rb < Qb
    (lookahead: x0, top level, candidates, not the middle level); target and draft still HF greedy."""
    target, draft = tiny("llama", seed=0), tiny("llama", seed=1)
    if method == "speculative":
        params = dict(params, draft_model=draft)
    with core_options(fixed=True):
        tr = generate(target, PROMPT, make_drafter(method, **params), max_new_tokens=32, static=True)
    assert tr.output_ids == hf_greedy(target, PROMPT, 32)
    assert tr.config["graphs"]["used"] and not tr.config["graphs"]["on"]
    if method == "lookahead":  # 21 query tokens (a 32-row bucket), 12 rows read (16)
        assert "32:16" in tr.config["graphs"]["used"], tr.config["graphs"]


def test_paper_setting_runs_on_a_graph_bucket():
    """W15 N5 G15 with the default text span is a 165-token step (docs/engineering-notes.md, "Lookahead
    paper"): it runs in the 256-row graph bucket, reading 76 rows (x0, the top level, the candidates), with
    the dynamic path's logits."""
    from decoding.engine.core import Core
    from decoding.methods.windows.lookahead import lookahead_layout
    from decoding.fast.static_cache import GRAPH_MAX, bucket
    lay = lookahead_layout(15, 5, 4, 15)
    lay["parents"] = lay["parents"][:60] + [0 if i % 7 == 0 else 60 + i - 1 for i in range(105)]  # span 7
    q = len(lay["parents"])
    assert q == 165 and bucket(q) == GRAPH_MAX == 256
    rows = [0] + list(range(45, 60)) + list(range(60, 165))[:60]
    model = tiny("llama", seed=12)
    tokens = [(7 * i) % 64 for i in range(q)]
    out = []
    with core_options(fixed=True):
        for static in (False, True):
            core = Core(model, static=static)
            core.prefill(PROMPT)
            core.commit(list(range(len(PROMPT))))
            out.append(core.forward(tokens, lay["parents"], rows=rows))
    assert torch.allclose(out[0][rows], out[1][rows], atol=1e-5)
    assert core.cache.status()["used"][-1] == "256:128"  # 76 rows read -> a 128-row LM head bucket


def _live_caches(model) -> list[StaticKV]:
    return [o for o in gc.get_objects() if isinstance(o, StaticKV) and o._model() is model]


def test_pool_keeps_its_budget_after_a_long_run_and_50_short_runs(monkeypatch):
    """One LRU policy per model: after a long run and 50 short ones, at most POOL_CACHES caches are alive
    within POOL_BYTES, the long run's cache was evicted and freed by reference counting alone (gc off:
    no SlotLayer <-> StaticKV cycle keeps it)."""
    from decoding.fast import cache_pool
    from decoding.engine.core import Core
    model = tiny("llama", seed=13)
    drafter = make_drafter("lookahead", window=3, ngram=3, guesses=3)
    gc.collect()
    gc.disable()
    try:
        with core_options(fixed=True):
            core = Core(model, static=True, capacity=4000)  # a long run's cache (room for 4,000 tokens)
            core.prefill(PROMPT * 20)
            core.commit(list(range(len(PROMPT) * 20)))
            long = weakref.ref(core.cache)
            del core
            assert cache_pool._pool(model)[0] is long() and long().capacity == 4096
            generate(model, PROMPT, drafter, max_new_tokens=8, static=True)
            short = cache_pool._pool(model)[0]
            monkeypatch.setattr(cache_pool, "POOL_BYTES", int(short.nbytes() * 1.5))
            del short
            for _ in range(50):
                generate(model, PROMPT, drafter, max_new_tokens=8, static=True)
        pool = cache_pool._pool(model)
        assert long() is None, "the least recently used cache outside the budget must be freed"
        assert len(pool) <= cache_pool.POOL_CACHES and sum(c.nbytes() for c in pool) <= cache_pool.POOL_BYTES
        assert len(_live_caches(model)) <= cache_pool.POOL_CACHES
    finally:
        gc.enable()


class HostSyncs(TorchFunctionMode):
    """Counts what would block the host on a GPU, when the engine (decoding/) asks for it: device-to-host
    reads (.tolist(), .item(), float(), int(), bool(), .numpy(), .cpu()) and blocking uploads
    (torch.tensor(..., device=...), .to(device) without non_blocking). On CPU every tensor is a host
    tensor, so this counts the calls a CUDA run would sync on; bench/gpu/GPU.md runs the CUDA check."""
    READS = {"tolist", "item", "__float__", "__int__", "__bool__", "__index__", "numpy", "__array__", "cpu"}
    ENGINE = os.path.dirname(decoding.__file__) + os.sep
    TORCH = os.path.dirname(torch.__file__) + os.sep

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        upload = (name in ("tensor", "as_tensor") and kwargs.get("device") is not None) or (
            name == "to" and not kwargs.get("non_blocking") and (
                "device" in kwargs or any(isinstance(a, (str, torch.device)) for a in args[1:])))
        if name in self.READS or upload:
            f = sys._getframe(1)
            while f is not None and (f.f_code.co_filename.startswith(self.TORCH) or f.f_code.co_filename == __file__):
                f = f.f_back
            if f is not None and f.f_code.co_filename.startswith(self.ENGINE):
                self.calls.append(f"{name} {os.path.basename(f.f_code.co_filename)}:{f.f_lineno}")
        return func(*args, **kwargs)


def _per_step(model, drafter, static: bool, trace: bool) -> list[list[str]]:
    counter, steps = HostSyncs(), []

    class Mark:
        def __enter__(self):
            self.n = len(counter.calls)

        def __exit__(self, *exc):
            steps.append(counter.calls[self.n:])

    with counter:
        generate(model, PROMPT, drafter, max_new_tokens=24, static=static, trace=trace,
                 step_context=lambda i, kind: Mark())
    return steps


SYNC_METHODS = [("greedy", {}), ("lookahead", dict(window=4, ngram=3, guesses=4)), ("prompt_lookup", {}),
                ("speculative", dict(draft_tokens=4, confidence=0.0)),
                ("speculative", dict(tree=[3, 2, 1], confidence=0.0)), ("speculative", dict(tree_budget=8)),
                ("speculative", dict(tree=[2, 2, 1], staged=True, confidence=0.0))]


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("method,params", SYNC_METHODS, ids=str)
def test_at_most_two_host_syncs_per_step(method, params, static):
    """Every method, greedy, not tracing: the target side of a step syncs at most twice (its argmax and
    one commit); a speculative step adds at most one transfer per draft level (the tree is batched per
    level: tokens, probabilities, stage-2 checks and the pruned record from one transfer)."""
    target, draft = tiny("llama", seed=0), tiny("llama", seed=1)
    extra = {"draft_model": draft} if method == "speculative" else {}
    with core_options(fixed=static):
        steps = _per_step(target, make_drafter(method, **params, **extra), static, trace=False)
    levels = len(params.get("tree") or [1] * params.get("draft_tokens", 4)) if method == "speculative" else 0
    for i, calls in enumerate(steps):
        target_side = [c for c in calls if not c.split()[1].startswith("draft_tree.py")]
        assert len(target_side) <= 2, f"step {i}: {target_side}"
        assert len(calls) - len(target_side) <= levels, f"step {i}: {calls}"


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("method,params", [("greedy", {}), ("lookahead", dict(window=15, ngram=5, guesses=15)),
                                           ("speculative", dict(tree=[3, 2, 1], confidence=0.0))], ids=str)
def test_cuda_every_bucket_a_run_used_was_captured(method, params):
    target, draft = tiny("llama", seed=0).cuda(), tiny("llama", seed=1).cuda()
    if method == "speculative":
        params = dict(params, draft_model=draft)
    tr = generate(target, PROMPT * 3, make_drafter(method, **params), max_new_tokens=32)
    g = tr.config["graphs"]
    assert g["on"] and g["used"] and not g["failed"], g
    assert set(g["used"]) <= set(g["captured"]), g
    assert tr.output_ids == hf_greedy(target, PROMPT * 3, 32)


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_cuda_sync_debug_mode_counts_few_syncs():
    """torch's own sync detector on the graph path: a greedy run of 32 tokens raises no more sync
    warnings than two per step."""
    import warnings
    model = tiny("llama", seed=0).cuda()
    generate(model, PROMPT, max_new_tokens=4)  # capture outside the count
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            tr = generate(model, PROMPT, max_new_tokens=32, trace=False)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = [x for x in w if "synchroniz" in str(x.message)]
    assert len(syncs) <= 2 * len(tr.steps), [str(x.message)[:80] for x in syncs[:5]]
