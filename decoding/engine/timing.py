"""Timing one engine step, and the step-latency curve (ms per step vs query tokens) the autotuners price
steps with. Here, not in profiling/, so the engine's CLI (`--auto`) needs nothing outside decoding/.

The Core is built the way a run builds it (runner.default_static: the static, CUDA-graph path on CUDA),
so the curve prices the path users run; path_of(core) says which path a timing took."""
from __future__ import annotations

import bisect
import random
import statistics
import time

import torch

from .core import Core, core_options
from .masks import chain_parents, depths_of
from ..models import max_positions
from .runner import default_static
from ..fast.static_cache import bucket


def tree_parents(n: int, shape: str = "chain") -> list[int]:
    """chain: a causal path (draft chain); tree: a binary tree (node i under (i-1)//2)."""
    if shape == "chain":
        return chain_parents(n)
    if shape == "tree":
        return [-1] + [(i - 1) // 2 for i in range(1, n)]
    raise ValueError(f"shape must be 'chain' or 'tree', got {shape!r}")


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so host timers measure the kernels (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_step(core: Core, tokens: list[int], parents: list[int], depths: list[int], reps: int) -> list[float]:
    """Milliseconds of `reps` forwards of one step, each undone afterwards (commit nothing)."""
    out = []
    for _ in range(reps):
        sync(core.device)
        t0 = time.perf_counter()
        core.forward(tokens, parents, depths)
        sync(core.device)
        out.append((time.perf_counter() - t0) * 1e3)
        core.commit([])  # crop the step's KV entries: the cache stays at kv_len
    return out


def timing_core(model, room: int, static: bool | None = None) -> Core:
    """A Core as a run builds it: static = None takes the device default (the graph path on CUDA)."""
    static = default_static(model) if static is None else bool(static)
    with core_options(static=static, capacity=room):
        return Core(model)


def path_of(core: Core) -> dict:
    """Which path a timing took: static or dynamic, graphs on/off, buckets used / captured, capture
    errors; `label` is the one-line form reports print next to every timed row."""
    if not core.static:
        from ..fast.cpu_step import CpuKV
        one_call = isinstance(core.cache, CpuKV)  # decoding/fast/cpu_step.py: the whole step in one call
        return {"static": False, "graphs": False, "used": [], "captured": [], "failed": {},
                "label": "one-call CPU step (eager)" if one_call else "dynamic (eager)"}
    st = core.cache.status()
    label = (f"static, graphs {'on' if st['graphs'] else 'off'}, {len(st['captured'])} buckets captured"
             + (f", {len(st['failed'])} capture errors ({next(iter(st['failed'].values()))})" if st["failed"] else ""))
    return {"static": True, "graphs": st["graphs"], "used": st["used"], "captured": st["captured"],
            "failed": st["failed"], "label": label}


def latency_curve(model, kv_len: int, sizes: tuple[int, ...], shape: str = "chain", reps: int = 5,
                  warmup: int = 2, seed: int = 0, static: bool | None = None) -> tuple[Core, int, dict[int, float]]:
    """(core, kv_len used, {query tokens: median ms}) of one step against a kv_len-token cache of random
    tokens; kv_len shrinks so every position stays inside the model's range. static: the path (None =
    what a run on this device takes); path_of(core) reports it."""
    limit = max_positions(model.config)
    if limit is not None and kv_len + max(sizes) > limit:
        kv_len = max(1, limit - max(sizes))
    vocab = model.get_input_embeddings().weight.shape[0]
    rng = random.Random(seed)
    core = timing_core(model, kv_len + bucket(max(sizes)), static)
    core.prefill([rng.randrange(vocab) for _ in range(kv_len)])
    core.commit(list(range(kv_len)))
    curve = {}
    for q in sizes:
        parents = tree_parents(q, shape)
        depths = depths_of(parents)
        tokens = [rng.randrange(vocab) for _ in range(q)]
        time_step(core, tokens, parents, depths, warmup)
        curve[q] = statistics.median(time_step(core, tokens, parents, depths, reps))
    return core, kv_len, curve


def interpolate(curve: dict[int, float], q: int) -> float:
    """Latency of a q-token step from the measured sizes (linear between, extrapolated beyond)."""
    xs = sorted(curve)
    if q in curve:
        return curve[q]
    i = bisect.bisect_left(xs, q)
    if i == 0:
        return curve[xs[0]]
    if i == len(xs):
        a, b = xs[-2], xs[-1]
    else:
        a, b = xs[i - 1], xs[i]
    return curve[a] + (curve[b] - curve[a]) * (q - a) / (b - a)


def monotone(curve: dict[int, float]) -> dict[int, float]:
    """A bigger step cannot be cheaper than a smaller one: lower noisy small sizes to the running
    minimum from above, so one slow sample of the 1-token step does not inflate every prediction."""
    out, low = {}, float("inf")
    for q in sorted(curve, reverse=True):
        low = min(low, curve[q])
        out[q] = low
    return dict(sorted(out.items()))
