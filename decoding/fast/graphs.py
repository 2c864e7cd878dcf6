"""CUDA graph capture and replay of the static cache's buckets, and the capture status a run reports.

A bucket (Qb, Rb[, hidden layers]) is captured on first use (warm-up on a side stream, as CUDA graphs
need) and replayed afterwards: one launch for a whole forward. A failed capture is recorded with its error,
retried once (CAPTURE_TRIES), then that bucket runs eagerly for the cache's lifetime; a new cache tries
again. The status (used / captured / failed) lands in the trace config (runner.py) and, when a capture
failed, in one line of the CLI and the app (capture_warning). Mixed into static_cache.StaticKV, whose
fixed buffers (io, mask), `_forward` and graph bookkeeping (graphs, tries, failed, used, pool) it uses.

Two backends behind one capture(fn, cache, key) -> (graph, static outputs): CudaGraphs (torch.cuda.CUDAGraph,
a side-stream warm-up, the cache's graph pool) and EmulatedGraphs, the CPU stand-in for CI
(DECODESCOPE_EMULATE_GRAPHS=1 or emulated_graphs()): capture warms up and runs the region under the capture
checker (capture_check.py), replay re-runs it on the capture-time buffers into the static outputs. With it
the graph path's bookkeeping (buckets, padded rows, capture status, retry, the pool) runs on CPU
(tests/test_emulated_graph.py); timing, streams and pool aliasing are only real on CUDA.
"""
from __future__ import annotations

import contextlib
import os
import warnings

import torch

from . import capture_check

CAPTURE_TRIES = 2  # a bucket whose capture failed is tried once more, then runs eagerly in this cache


def bucket_name(k: tuple) -> str:
    """"Qb", or "Qb:Rb" when the LM head ran for Rb rows only; "+h..." when hidden states were read too."""
    return (str(k[0]) if k[0] == k[1] else f"{k[0]}:{k[1]}") + (f"+h{','.join(map(str, k[2]))}" if len(k) > 2 else "")


class GraphReplay:
    """The graph side of StaticKV: run a bucket on the fixed buffers, replayed when captured."""

    def status(self) -> dict:
        """Capture status for the trace: graphs on, buckets this run used / captured / failed (with the
        error). A bucket is named "Qb", or "Qb:Rb" when the LM head ran for Rb rows only."""
        name = bucket_name
        return {"graphs": self.graphs_on, "fixed": self.fixed, "capacity": self.capacity,
                "used": [name(k) for k in sorted(self.used)], "captured": [name(k) for k in sorted(self.graphs)],
                "failed": {name(k): e for k, e in sorted(self.failed.items())}}

    def _fixed(self, key: tuple) -> tuple:
        """Bucket `key` = (Qb, Rb[, hidden layers]) on the fixed buffers: its graph replayed (captured on
        first use), or the same data path eagerly (no graphs, or its capture failed CAPTURE_TRIES times in
        this cache). Returns (logits, hidden states or None): the graph's static outputs when replayed."""
        hid = key[2] if len(key) > 2 else None
        self.used.add(key)
        args = self.bucket_args(key)
        if capture_check.active():  # the region a capture records, run once more under the checker
            capture_check.check_bucket(self, key, bucket_name(key))
        if not self.graphs_on:
            return self._forward(*args, self._bucket_fn(), hid)
        entry = self.graphs.get(key)
        if entry is None and self.tries.get(key, 0) < CAPTURE_TRIES:
            entry = self._capture(key, (*args, None, hid))
        if entry is None:
            return self._forward(*args, None, hid)
        entry[0].replay()
        return entry[1]

    def bucket_args(self, key: tuple) -> tuple:
        """What a bucket's graph captures: _forward(io, mask, capacity, rows read) on the fixed buffers."""
        qb, rb = key[0], key[1]
        return (self.io[:, :qb], self.mask[:, :, :qb], self.capacity, self.io[3, :rb] if rb < qb else 0)

    def _capture(self, key: tuple, args: tuple):
        """Capture bucket `key` (warm-up on a side stream, as CUDA graphs need), on the cache's device;
        a failure is recorded (status()) and the step runs eagerly. The emulated backend (DECODESCOPE_
        EMULATE_GRAPHS=1, emulated_graphs()) does the same bookkeeping on CPU."""
        try:
            graph, out = backend().capture(lambda: self._forward(*args), self, key)
        except Exception as e:  # noqa: BLE001 - a model that cannot be captured still decodes eagerly
            self.tries[key] = self.tries.get(key, 0) + 1
            self.failed[key] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            warnings.warn(f"CUDA graph capture failed for bucket {key} (try {self.tries[key]}), running it "
                          f"eagerly: {self.failed[key]}")
            return None
        self.failed.pop(key, None)
        entry = self.graphs[key] = (graph, out)
        return entry


class CudaGraphs:
    """The real backend: torch.cuda.CUDAGraph in the cache's memory pool, warmed up on a side stream."""
    name = "cuda"

    def capture(self, fn, kv, key: tuple):
        with torch.cuda.device(kv.device):
            if kv.pool is None:
                kv.pool = torch.cuda.graph_pool_handle()
            side = torch.cuda.Stream(kv.device)
            side.wait_stream(torch.cuda.current_stream(kv.device))
            with torch.cuda.stream(side):
                fn()  # warm-up: the real step (it is idempotent: same rows, same slots)
            torch.cuda.current_stream(kv.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=kv.pool, capture_error_mode="thread_local"):
                out = fn()
        return graph, out


class EmulatedGraph:
    """CPU stand-in for a captured CUDAGraph: replay re-runs the captured callable on the tensors it was
    captured with (a closure over the capture-time buffers: a buffer replaced later is not seen, as on
    CUDA) and writes the results into the capture's output tensors (static outputs, overwritten by every
    replay, as on CUDA)."""

    def __init__(self, fn, out):
        self.fn, self.out, self.replays = fn, out, 0

    def replay(self) -> None:
        new = self.fn()
        for o, n in zip(_tensors(self.out), _tensors(new)):
            o.copy_(n)
        self.replays += 1


class EmulatedGraphs:
    """The CPU backend: a capture warms up, runs the region once under the capture checker (a finding a
    real capture would fail on, or silently corrupt with, raises here: capture_check.unexplained) and
    poisons the outputs with NaN (a real capture computes nothing until the first replay). `fail` injects
    capture failures per bucket key (tests of the retry). What it cannot catch: real kernel timing,
    stream ordering, memory-pool aliasing across captures, the SDPA/cuDNN backend chosen inside capture,
    Python side effects of the region that a real replay would not repeat."""
    name = "emulated"

    def __init__(self):
        self.fail: dict[tuple, int] = {}
        self.captures = 0

    def capture(self, fn, kv, key: tuple):
        from .capture_check import check_callable, static_tensors, unexplained
        if self.fail.get(key, 0) > 0:
            self.fail[key] -= 1
            raise RuntimeError(f"emulated capture failure (injected) for bucket {key}")
        if kv.pool is None:
            kv.pool = ("emulated pool", id(kv))
        fn()  # warm-up
        out, findings = check_callable(fn, static_tensors(kv), kv.device, {"logits": 0, "hidden": 1})
        bad = unexplained(findings)
        if bad:
            f = bad[0]
            raise RuntimeError(f"capture-unsafe op in the region: {f['kind']} {f['op']} at {f['where']} "
                               f"{f['detail']}".strip())
        for t in _tensors(out):
            if t.is_floating_point():
                t.fill_(float("nan"))
        self.captures += 1
        return EmulatedGraph(fn, out), out


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for x in (out or ()) for t in _tensors(x)] if isinstance(out, (tuple, list)) else []


_EMULATED = EmulatedGraphs()
_EMULATE = [os.environ.get("DECODESCOPE_EMULATE_GRAPHS", "") == "1"]


def emulating() -> bool:
    """Whether graphs are emulated (DECODESCOPE_EMULATE_GRAPHS=1 or inside emulated_graphs()): then new
    static caches have graphs on on any device, captured by EmulatedGraphs."""
    return _EMULATE[0]


def backend():
    return _EMULATED if _EMULATE[0] else CudaGraphs()


@contextlib.contextmanager
def emulated_graphs(fail: dict | None = None):
    """Within the block the graph path runs on CPU with EmulatedGraphs (for tests and --rehearse);
    fail: {bucket key: captures to fail} injects failures. Yields the backend."""
    old, _EMULATE[0] = _EMULATE[0], True
    _EMULATED.fail = dict(fail or {})
    try:
        yield _EMULATED
    finally:
        _EMULATE[0] = old
        _EMULATED.fail = {}


def capture_summary(caches: list[tuple[str, "GraphReplay"]]) -> dict:
    """The run's capture status over its static caches (target, draft): graphs on, buckets used /
    captured / failed with the error; draft buckets are prefixed "draft ". Lands in trace.config["graphs"]."""
    out = {"on": any(kv.graphs_on for _, kv in caches), "used": [], "captured": [], "failed": {}}
    for role, kv in caches:
        st, pre = kv.status(), ("" if role == "target" else f"{role} ")
        out["used"] += [pre + b for b in st["used"]]
        out["captured"] += [pre + b for b in st["captured"]]
        out["failed"].update({pre + b: e for b, e in st["failed"].items()})
    return out


def capture_warning(config: dict) -> str | None:
    """One line for the CLI and the app when a CUDA graph capture failed in a run, else None."""
    g = (config or {}).get("graphs") or {}
    if not g.get("failed"):
        return None
    first = next(iter(g["failed"].values()))
    return (f"CUDA graph capture failed for bucket(s) {', '.join(g['failed'])} ({first}): those steps ran "
            "eagerly (same tokens, slower)")
