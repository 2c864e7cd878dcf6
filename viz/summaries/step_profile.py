"""Per-step cost numbers for the step view's profile panel: the selected step on the machine's roofline,
its FLOPs, bytes and milliseconds, and cumulative FLOPs against tokens beside greedy's line.

Why greedy's line needs no greedy run: greedy makes one 1-token step per token, so its cost for the same
tokens is analytic (profiling.flops.step_cost with n_query = 1 against a growing cache), from the model
config the trace recorded. The panel is drawn client-side by stepper.js from data(); selecting a step only
moves the highlighted point.

costs: profiling's profile dict (profile_run(): {"steps": [...], "peaks": {...}, "arch": {...}}) or the
plain list profiling.trace_costs(trace) returns (then times come from the trace and there is no roof
unless peaks={"flops": FLOP/s, "bandwidth": byte/s, "device": name} is given).
"""
from __future__ import annotations

from ..common import TraceLike, as_trace, drawn, number
from ..describe import short_name
from ..palette import log_axis, method_color


def _steps(costs: dict | list) -> list[dict]:
    return list(costs.get("steps") or []) if isinstance(costs, dict) else list(costs or [])


def _peaks(costs: dict | list, peaks: dict | None) -> dict | None:
    p = peaks or (costs.get("peaks") if isinstance(costs, dict) else None)
    if not p or not p.get("flops") or not p.get("bandwidth"):
        return None
    return {"flops": float(p["flops"]), "bandwidth": float(p["bandwidth"]), "device": short_name(p.get("device"))}


def greedy_line(trace: TraceLike, costs: dict | list) -> dict | None:
    """Cumulative FLOPs of greedy decoding for 1..T tokens (prefill + one 1-token step per token)."""
    from profiling.flops import Arch, arch_of, dtype_bytes, step_cost
    tr = as_trace(trace)
    model = tr.model if isinstance(tr.model, dict) else {}
    try:
        arch_d = costs.get("arch") if isinstance(costs, dict) else None
        arch = Arch(**arch_d) if arch_d else arch_of(model.get("config") or {})
        nb = dtype_bytes(model.get("dtype", "float32"))
    except (TypeError, ValueError, KeyError, AttributeError):  # no usable model config: no greedy line
        return None
    P, T = len(tr.prompt_ids), len(tr.output_ids)
    if not T:
        return None
    total = step_cost(arch, P, 0, nb)["flops"]
    tokens, flops = [1], [total]
    for j in range(1, T):
        total += step_cost(arch, 1, P + j - 1, nb)["flops"]
        tokens.append(j + 1)
        flops.append(total)
    return {"tokens": tokens, "flops": flops}


@drawn
def data(trace: TraceLike, costs: dict | list | None, peaks: dict | None = None) -> dict | None:
    """Per step: index, n_query, flops, bytes, ms, intensity, achieved FLOP/s, cumulative tokens/FLOPs;
    the roof (when peaks are known), greedy's cumulative line, and decade-only log axes."""
    if not costs:
        return None
    tr = as_trace(trace)
    by_index = {s.index: s for s in tr.steps}
    rows, cum_t, cum_f = [], 0, 0.0
    for c in _steps(costs):
        s = by_index.get(c.get("index"))
        if s is None:
            continue
        ms = number(c.get("target_ms", c.get("wall_ms", s.wall_ms)))  # a crafted time: no achieved rate
        flops, nbytes = float(c["flops"]), float(c.get("bytes") or 0)
        cum_t += len(s.accepted)
        cum_f += float(c.get("total_flops", flops))
        rows.append({"index": s.index, "n_query": s.n_query, "flops": flops, "bytes": nbytes, "ms": ms,
                     "intensity": flops / nbytes if nbytes else None,
                     "achieved": flops / (ms / 1e3) if ms else None, "cum_tokens": cum_t, "cum_flops": cum_f,
                     "bound": c.get("bound")})
    if not rows:
        return None
    pk = _peaks(costs, peaks)
    xs = [r["intensity"] for r in rows if r["intensity"]]
    ys = [r["achieved"] for r in rows if r["achieved"]]
    roof = None
    if pk:
        ridge = pk["flops"] / pk["bandwidth"]
        lo, hi = min(xs + [ridge]) / 4, max(xs + [ridge]) * 4
        roof = {"intensity": [lo, ridge, hi], "attainable": [lo * pk["bandwidth"], pk["flops"], pk["flops"]],
                "ridge": ridge, **pk}
        xs, ys = xs + [lo, hi], ys + [lo * pk["bandwidth"], pk["flops"]]
    greedy = greedy_line(tr, costs)
    from profiling.flops import bytes_counted
    counted = bytes_counted(tr.model if isinstance(tr.model, dict) else {})
    return {"method": tr.method, "color": method_color(tr.method), "greedy_color": method_color("greedy"),
            "bytes_counted": counted, "steps": rows, "roof": roof, "greedy": greedy,
            "axes": {"intensity": log_axis(xs), "achieved": log_axis(ys)}}
