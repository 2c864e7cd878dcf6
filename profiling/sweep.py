"""Step latency vs query tokens: how many tokens per step are nearly free on this model and device.

Why: lookahead and speculative decoding pay off only while a step with q query tokens costs about the same
as a step with one (the memory-bound region). This sweep runs one forward of q = 1, 2, 4, ... 256 new
tokens (a chain, or a binary tree like a draft tree) against a realistic KV length through the engine's
own Core (same mask and cache path as decoding), and reports the median latency of each size.
"""
from __future__ import annotations

import random
import statistics
import time
from typing import Any

import torch

from decoding.core import Core
from decoding.masks import chain_parents, depths_of
from decoding.models import max_positions

from .calibrate import device_name
from .flops import arch_of, dtype_bytes, step_cost

SIZES = tuple(2**i for i in range(9))  # 1 .. 256


def tree_parents(n: int, shape: str = "chain") -> list[int]:
    """chain: a causal path (draft chain); tree: a binary tree (node i under (i-1)//2)."""
    if shape == "chain":
        return chain_parents(n)
    if shape == "tree":
        return [-1] + [(i - 1) // 2 for i in range(1, n)]
    raise ValueError(f"shape must be 'chain' or 'tree', got {shape!r}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_step(core: Core, tokens: list[int], parents: list[int], depths: list[int], reps: int) -> list[float]:
    """Milliseconds of `reps` forwards of one step, each undone afterwards (commit nothing)."""
    out = []
    for _ in range(reps):
        _sync(core.device)
        t0 = time.perf_counter()
        core.forward(tokens, parents, depths)
        _sync(core.device)
        out.append((time.perf_counter() - t0) * 1e3)
        core.commit([])  # crop the step's KV entries: the cache stays at kv_len
    return out


def latency_sweep(model, kv_len: int = 512, sizes: tuple[int, ...] = SIZES, shape: str = "chain",
                  reps: int = 5, warmup: int = 2, free_ratio: float = 1.25, seed: int = 0) -> dict[str, Any]:
    """Median step latency per query size against a kv_len-token cache.

    nearly_free = the largest size whose latency is within free_ratio of the 1-token step."""
    limit = max_positions(model.config)
    if limit is not None and kv_len + max(sizes) > limit:
        kv_len = max(1, limit - max(sizes))  # keep every position inside the model's range
    vocab = model.get_input_embeddings().weight.shape[0]
    rng = random.Random(seed)
    core = Core(model)
    prefix = [rng.randrange(vocab) for _ in range(kv_len)]
    core.prefill(prefix)
    core.commit(list(range(kv_len)))
    arch, nbytes = arch_of(model.config), dtype_bytes(core.dtype)
    points = []
    for q in sizes:
        parents = tree_parents(q, shape)
        depths = depths_of(parents)
        tokens = [rng.randrange(vocab) for _ in range(q)]
        time_step(core, tokens, parents, depths, warmup)
        ms = statistics.median(time_step(core, tokens, parents, depths, reps))
        cost = step_cost(arch, q, kv_len, nbytes)
        points.append({"n_query": q, "ms": ms, "ms_per_token": ms / q, "flops": cost["flops"],
                       "bytes": cost["bytes"], "intensity": cost["intensity"],
                       "achieved_flops": cost["flops"] / (ms / 1e3) if ms > 0 else 0.0})
    base = points[0]["ms"]
    for p in points:
        p["relative"] = p["ms"] / base if base > 0 else 0.0
    free = [1]
    for p in points[1:]:  # the contiguous run of sizes that stay within free_ratio of one token
        if p["relative"] > free_ratio:
            break
        free.append(p["n_query"])
    return {"kv_len": kv_len, "shape": shape, "reps": reps, "device": device_name(core.device),
            "dtype": str(core.dtype).replace("torch.", ""), "free_ratio": free_ratio,
            "nearly_free": free[-1], "points": points}


def format_sweep(result: dict) -> str:
    """A small text table of the sweep for the CLI."""
    lines = [f"step latency vs query tokens ({result['shape']}, kv_len={result['kv_len']}, "
             f"{result['device']}, {result['dtype']})", f"{'q':>5} {'ms':>9} {'ms/tok':>9} {'x q=1':>7}"]
    for p in result["points"]:
        lines.append(f"{p['n_query']:>5} {p['ms']:>9.3f} {p['ms_per_token']:>9.4f} {p['relative']:>7.2f}")
    lines.append(f"nearly free up to {result['nearly_free']} tokens/step (within {result['free_ratio']}x of q=1)")
    return "\n".join(lines)
