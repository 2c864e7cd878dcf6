"""Glue between profiling/ output and viz/ input, and the race summary rows."""
from __future__ import annotations

from viz.race import race_figure  # noqa: F401  (drawn in viz/ now; app.py may import it from viz.race)


def for_viz(profile: dict | None) -> dict | None:
    """profiling's profile dict with the 'machine' block viz.profile reads (name, peak_flops, peak_bw)."""
    if not profile:
        return profile
    out = dict(profile)
    peaks = profile.get("peaks") or {}
    if "machine" not in out:
        out["machine"] = {"name": profile.get("device") or peaks.get("device"),
                          "peak_flops": peaks.get("flops"), "peak_bw": peaks.get("bandwidth")}
    out.setdefault("name", profile.get("method"))
    return out


def race_row(name: str, trace, greedy_trace, sampled: bool) -> dict:
    st = trace.stats()
    base = greedy_trace.stats() if greedy_trace is not None else st
    if sampled:
        badge = "n/a (sampling: same distribution, different draws)"
    elif greedy_trace is None or trace is greedy_trace:
        badge = "reference"
    elif trace.output_ids == greedy_trace.output_ids:
        badge = "✓ identical to greedy"
    else:
        n = next((i for i, (a, b) in enumerate(zip(trace.output_ids, greedy_trace.output_ids)) if a != b),
                 min(len(trace.output_ids), len(greedy_trace.output_ids)))
        badge = f"✗ differs from greedy at token {n}"
    return {"method": name, "tokens": st["new_tokens"], "steps": st["steps"],
            "compression": round(st["compression"], 3), "mean accepted": round(st["mean_accepted"], 3),
            "tokens/s": round(st["tokens_per_s"], 1), "wall s": round(st["wall_s"], 3),
            "speedup vs greedy": round(base["wall_s"] / st["wall_s"], 2) if st["wall_s"] > 0 else 0.0,
            "step saving vs greedy": round(base["steps"] / st["steps"], 2) if st["steps"] else 0.0,
            "exact": badge}
