"""Analytic per-step costs for the Run tab (FLOPs, bytes, ms per step) and the glue between profiling/
output and viz/ input.

Why analytic and on by default: profiling.trace_costs is arithmetic on the trace (no torch.profiler, no
extra forward): `python bench/kernels/profile_cost.py` measured costs plus the cost panel at 2% of a 400-token run
on the 2-core CPU, so the Run tab always has a profile for the selected step. Machine peaks (a ~1 s matmul/copy benchmark) are
measured once per machine and kept in the cache folder next to the presets.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from profiling import arch_of, peaks, trace_costs

from .presets import cache_dir


def machine_peaks(model) -> dict | None:
    """Measured FLOP/s and bytes/s of this device and dtype (cached on disk), None if it cannot run."""
    p = next(model.parameters())
    try:
        return peaks(p.device, p.dtype, cache_file=Path(cache_dir()) / "peaks.json")
    except Exception:  # noqa: BLE001 - a roofline without a ceiling is still useful
        return None


def run_costs(trace, model) -> dict:
    """The viz profile dict (viz/summaries/costs.py's keys) of a finished or stopped run: per-step FLOPs, bytes and ms,
    the model's shape (viz.step_profile draws greedy's cumulative-FLOPs line from it) and the machine's peaks."""
    p = next(model.parameters())
    steps = []
    for c, s in zip(trace_costs(trace, model.config, p.dtype), trace.steps):
        steps.append({**{k: c[k] for k in ("index", "kind", "n_query", "kv_len", "flops", "bytes", "intensity")},
                      "wall_ms": s.wall_ms, "accepted": len(s.accepted)})
    pk = machine_peaks(model)
    return {"method": trace.method, "steps": steps, "arch": asdict(arch_of(model.config)),
            "peaks": {"flops": pk.get("flops"), "bandwidth": pk.get("bandwidth"),
                      "device": pk.get("device") or str(p.device)} if pk else None}


def for_viz(profile: dict | None) -> dict | None:
    """profiling's profile dict with the 'machine' block viz.costs reads (name, peak_flops, peak_bw)."""
    if not profile:
        return profile
    out = dict(profile)
    pk = profile.get("peaks") or {}
    if "machine" not in out:
        out["machine"] = {"name": profile.get("device") or pk.get("device"),
                          "peak_flops": pk.get("flops"), "peak_bw": pk.get("bandwidth")}
    out.setdefault("name", profile.get("method"))
    return out
