"""CUDA graph capture and replay of the static cache's buckets, and the capture status a run reports.

A bucket (Qb, Rb[, hidden layers]) is captured on first use (warm-up on a side stream, as CUDA graphs
need) and replayed afterwards: one launch for a whole forward. A failed capture is recorded with its error,
retried once (CAPTURE_TRIES), then that bucket runs eagerly for the cache's lifetime; a new cache tries
again. The status (used / captured / failed) lands in the trace config (runner.py) and, when a capture
failed, in one line of the CLI and the app (capture_warning). Mixed into static_cache.StaticKV, whose
fixed buffers (io, mask), `_forward` and graph bookkeeping (graphs, tries, failed, used, pool) it uses.
"""
from __future__ import annotations

import warnings

import torch

CAPTURE_TRIES = 2  # a bucket whose capture failed is tried once more, then runs eagerly in this cache


class GraphReplay:
    """The graph side of StaticKV: run a bucket on the fixed buffers, replayed when captured."""

    def status(self) -> dict:
        """Capture status for the trace: graphs on, buckets this run used / captured / failed (with the
        error). A bucket is named "Qb", or "Qb:Rb" when the LM head ran for Rb rows only."""
        name = (lambda k: (str(k[0]) if k[0] == k[1] else f"{k[0]}:{k[1]}")
                + (f"+h{','.join(map(str, k[2]))}" if len(k) > 2 else ""))  # +h: hidden states read too
        return {"graphs": self.graphs_on, "fixed": self.fixed, "capacity": self.capacity,
                "used": [name(k) for k in sorted(self.used)], "captured": [name(k) for k in sorted(self.graphs)],
                "failed": {name(k): e for k, e in sorted(self.failed.items())}}

    def _fixed(self, key: tuple) -> tuple:
        """Bucket `key` = (Qb, Rb[, hidden layers]) on the fixed buffers: its graph replayed (captured on
        first use), or the same data path eagerly (no graphs, or its capture failed CAPTURE_TRIES times in
        this cache). Returns (logits, hidden states or None): the graph's static outputs when replayed."""
        qb, rb, hid = key[0], key[1], (key[2] if len(key) > 2 else None)
        self.used.add(key)
        args = (self.io[:, :qb], self.mask[:, :, :qb], self.capacity, self.io[3, :rb] if rb < qb else 0)
        if not self.graphs_on:
            return self._forward(*args, self._bucket_fn(), hid)
        entry = self.graphs.get(key)
        if entry is None and self.tries.get(key, 0) < CAPTURE_TRIES:
            entry = self._capture(key, (*args, None, hid))
        if entry is None:
            return self._forward(*args, None, hid)
        entry[0].replay()
        return entry[1]

    def _capture(self, key: tuple, args: tuple):
        """Capture bucket `key` (warm-up on a side stream, as CUDA graphs need), on the cache's device;
        a failure is recorded (status()) and the step runs eagerly."""
        try:
            with torch.cuda.device(self.device):
                if self.pool is None:
                    self.pool = torch.cuda.graph_pool_handle()
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    self._forward(*args)  # warm-up: the real step (it is idempotent: same rows, same slots)
                torch.cuda.current_stream(self.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                    out = self._forward(*args)
        except Exception as e:  # noqa: BLE001 - a model that cannot be captured still decodes eagerly
            self.tries[key] = self.tries.get(key, 0) + 1
            self.failed[key] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            warnings.warn(f"CUDA graph capture failed for bucket {key} (try {self.tries[key]}), running it "
                          f"eagerly: {self.failed[key]}")
            return None
        self.failed.pop(key, None)
        entry = self.graphs[key] = (graph, out)
        return entry


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
