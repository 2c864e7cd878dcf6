"""Step latency vs query tokens: how many tokens per step are nearly free on this model and device.

Why: lookahead and speculative decoding pay off only while a step with q query tokens costs about the same
as a step with one (the memory-bound region). This sweep runs one forward of q = 1, 2, 4, ... 256 new
tokens (a chain, or a binary tree like a draft tree) against a realistic KV length through the engine's
own Core (same mask and cache path as decoding), and reports the median latency of each size.
"""
from __future__ import annotations

from typing import Any

from decoding.models import fitting_sizes
from decoding.engine.timing import latency_curve, path_of, time_step, tree_parents  # noqa: F401 - re-exported for callers

from .calibrate import device_name
from .flops import arch_of, dtype_bytes, step_cost

SIZES = tuple(2**i for i in range(9))  # 1 .. 256


def latency_sweep(model, kv_len: int = 512, sizes: tuple[int, ...] = SIZES, shape: str = "chain",
                  reps: int = 5, warmup: int = 2, free_ratio: float = 1.25, seed: int = 0,
                  static: bool | None = None) -> dict[str, Any]:
    """Median step latency per query size against a kv_len-token cache.

    nearly_free = the largest size whose latency is within free_ratio of the 1-token step; path = the
    path timed (static None = what a run on this device takes: the graph path on CUDA)."""
    sizes, kv_len = fitting_sizes(model.config, sizes, kv_len)  # never past the model's positions
    core, kv_len, curve = latency_curve(model, kv_len, sizes, shape, reps, warmup, seed, static)
    arch, nbytes = arch_of(model.config), dtype_bytes(core.dtype)
    points = []
    for q, ms in curve.items():
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
            "nearly_free": free[-1], "points": points, "path": path_of(core)}


def format_sweep(result: dict) -> str:
    """A small text table of the sweep for the CLI."""
    lines = [f"step latency vs query tokens ({result['shape']}, kv_len={result['kv_len']}, "
             f"{result['device']}, {result['dtype']})", f"{'q':>5} {'ms':>9} {'ms/tok':>9} {'x q=1':>7}"]
    for p in result["points"]:
        lines.append(f"{p['n_query']:>5} {p['ms']:>9.3f} {p['ms_per_token']:>9.4f} {p['relative']:>7.2f}")
    lines.append(f"nearly free up to {result['nearly_free']} tokens/step (within {result['free_ratio']}x of q=1)")
    return "\n".join(lines)
