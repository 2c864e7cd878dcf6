"""Roofline data for the pictures: per-step points, the roof itself, and FLOPs-vs-steps series.

Why these: a method that verifies more tokens per step does more FLOPs per step but takes fewer steps.
Decoding sits far left on the roofline (about 1 FLOP/byte), so extra tokens are nearly free until a step
crosses the ridge point; the per-step points show where each step sits, and cumulative FLOPs vs
cumulative tokens shows what each method pays in total. Everything here is plain dicts and lists.
"""
from __future__ import annotations

from typing import Any

POINT_FIELDS = ("index", "kind", "n_query", "kv_len", "wall_ms", "flops", "bytes", "intensity",
                "achieved_flops", "achieved_bandwidth", "attainable_flops", "bound", "roof_fraction")


def attainable(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """min(peak FLOP/s, intensity x bandwidth): the roof at this arithmetic intensity."""
    return min(peak_flops, intensity * bandwidth)


def ridge(peaks: dict) -> float:
    """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return peaks["flops"] / peaks["bandwidth"]


def annotate(steps: list[dict], peaks: dict | None) -> list[dict]:
    """Add achieved FLOP/s and bytes/s and, with peaks, the roof and the bound to each step.

    Time is the target forward's own (target_ms, when a draft model shares the step) else wall_ms."""
    for s in steps:
        secs = s.get("target_ms", s["wall_ms"]) / 1e3
        s["achieved_flops"] = s["flops"] / secs if secs > 0 else 0.0
        s["achieved_bandwidth"] = s["bytes"] / secs if secs > 0 else 0.0
        if peaks:
            roof = attainable(s["intensity"], peaks["flops"], peaks["bandwidth"])
            s["attainable_flops"] = roof
            s["bound"] = "memory" if s["intensity"] < ridge(peaks) else "compute"
            s["roof_fraction"] = s["achieved_flops"] / roof if roof > 0 else 0.0
    return steps


def points(profile: dict) -> list[dict]:
    """One roofline point per step (only the fields a scatter plot needs)."""
    return [{k: s[k] for k in POINT_FIELDS if k in s} for s in profile["steps"]]


def roof(peaks: dict, lo: float = 0.01, hi: float | None = None, n: int = 64) -> dict:
    """The roof as a log-spaced polyline from intensity lo to hi, with the ridge point."""
    r = ridge(peaks)
    hi = hi or max(r * 100, 1e3)
    xs = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return {"intensity": xs, "flops": [attainable(x, peaks["flops"], peaks["bandwidth"]) for x in xs],
            "ridge": r, "peak_flops": peaks["flops"], "bandwidth": peaks["bandwidth"]}


def datasheet_roofs(table: dict[str, dict[str, float]]) -> dict[str, dict]:
    """Ridge point and peaks of each datasheet GPU, to draw beside the measured roof."""
    return {name: {"flops": p["flops"], "bandwidth": p["bandwidth"], "ridge": ridge(p)}
            for name, p in table.items()}


def flops_series(steps: list[dict]) -> dict[str, list]:
    """Per-step FLOPs, and cumulative FLOPs against cumulative accepted tokens (prefill included).

    Uses total_flops (target + draft model) where a step has it."""
    out: dict[str, list] = {"index": [], "kind": [], "step_flops": [], "tokens": [], "cum_tokens": [],
                            "cum_flops": [], "cum_wall_ms": []}
    tokens = flops = wall = 0
    for s in steps:
        tokens += s.get("accepted", 0)
        f = s.get("total_flops", s["flops"])
        flops += f
        wall += s.get("wall_ms", 0.0)
        out["index"].append(s["index"])
        out["kind"].append(s["kind"])
        out["step_flops"].append(f)
        out["tokens"].append(s.get("accepted", 0))
        out["cum_tokens"].append(tokens)
        out["cum_flops"].append(flops)
        out["cum_wall_ms"].append(wall)
    return out


def totals(steps: list[dict]) -> dict[str, Any]:
    """Run totals: decode steps only for per-token numbers (prefill is the same for every method)."""
    dec = [s for s in steps if s["kind"] == "decode"]
    tok = sum(s.get("accepted", 0) for s in steps)
    dec_tok = sum(s.get("accepted", 0) for s in dec)
    dec_flops = sum(s.get("total_flops", s["flops"]) for s in dec)
    dec_wall = sum(s["wall_ms"] for s in dec)
    return {"steps": len(steps), "decode_steps": len(dec), "tokens": tok,
            "flops": sum(s.get("total_flops", s["flops"]) for s in steps),
            "bytes": sum(s["bytes"] + s.get("draft_bytes", 0) for s in steps),
            "decode_flops": dec_flops, "decode_wall_ms": dec_wall,
            "decode_flops_per_token": dec_flops / dec_tok if dec_tok else None,
            "decode_ms_per_token": dec_wall / dec_tok if dec_tok else None,
            "mean_query": sum(s["n_query"] for s in dec) / len(dec) if dec else 0.0}


def compare(profiles: dict[str, dict]) -> dict[str, dict]:
    """Method -> totals and series, for the FLOPs-vs-steps picture across methods."""
    return {m: {"totals": totals(p["steps"]), "series": flops_series(p["steps"])} for m, p in profiles.items()}
