"""Cost pictures (from profiling's per-step FLOPs/bytes/time): FLOPs per step, tokens vs FLOPs per method,
the roofline, latency vs query size. (Was viz/profile.py: "profile" also named profiling/ and its dict.)

The profile is the plain dict profiling.profiler.profile_run() returns (schema "decodescope.profile/1");
only these keys are read, so a hand-made dict with just them works too:

    profile = {
        "method": "lookahead",                  # label (else the trace's method)
        "peaks": {"flops": 7.9e10, "bandwidth": 1.6e10, "device": "cpu:x86_64"},  # FLOP/s, byte/s; may be None
        "steps": [{"index": 6,                  # trace step index (prefill = 0)
                   "flops": 1.08e6,             # the target forward's FLOPs (roofline point)
                   "total_flops": 1.08e6,       # optional: + a draft model's FLOPs (FLOPs-vs-steps plots)
                   "bytes": 1.76e5,             # bytes moved by the step
                   "intensity": 6.1,            # flops / bytes (computed if missing)
                   "achieved_flops": 1.8e8,     # FLOP/s reached (computed from flops / wall_ms if missing)
                   "wall_ms": 6.1, "n_query": 21, "kv_len": 20,
                   "accepted": 4}]}             # optional new-token count; else len(trace.steps[i].accepted)

Also accepted for peaks: "machine": {"peak_flops", "peak_bw", "name"} or those three keys at the top
level. Latency vs query tokens needs no profile: the trace records n_query and wall_ms of every step.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..common import TraceLike, as_trace, drawn, esc, number, plot_value
from ..palette import log_axis, method_color
from ..describe import short_name
from ..steps.window import _empty

Run = tuple  # (trace, profile | None)


def machine(profile: dict) -> dict:
    """Peaks as {name, peak_flops, peak_bw} from profile["peaks"], profile["machine"] or the top level."""
    p = profile.get("peaks") or {}
    if p:
        return {"name": p.get("device") or profile.get("device"), "peak_flops": p.get("flops"),
                "peak_bw": p.get("bandwidth")}
    m = profile.get("machine") or profile
    return {k: m.get(k) for k in ("name", "peak_flops", "peak_bw")}


def steps_of(profile: dict | None, trace=None) -> list[dict]:
    """Profile steps with intensity, achieved FLOP/s and new_tokens filled in when missing."""
    if not profile:
        return []
    out = []
    for s in profile.get("steps", []):
        s = dict(s)
        if s.get("intensity") is None and s.get("bytes"):
            s["intensity"] = s["flops"] / s["bytes"]
        if s.get("achieved_flops") is None and s.get("wall_ms"):
            s["achieved_flops"] = s["flops"] / (s["wall_ms"] / 1e3)
        acc = s.get("accepted")
        s["new_tokens"] = len(acc) if isinstance(acc, list) else acc
        if s["new_tokens"] is None and trace is not None and 0 <= s.get("index", -1) < len(trace.steps):
            s["new_tokens"] = len(trace.steps[s["index"]].accepted)
        s["total_flops"] = s.get("total_flops", s["flops"])
        out.append(s)
    return out


def _runs(runs) -> list[tuple[str, object, dict | None]]:
    """Accept {name: (trace, profile)}, [(trace, profile)], or a single (trace, profile)."""
    if isinstance(runs, dict):
        items = [(name, *pair) for name, pair in runs.items()]
    elif isinstance(runs, tuple):
        items = [(None, *runs)]
    else:
        items = [(None, *pair) for pair in runs]
    out = []
    for name, tr, prof in items:
        tr = as_trace(tr) if tr is not None else None
        out.append((name or (prof or {}).get("name") or (tr.method if tr else "run"), tr, prof))
    return out


def compare_data(runs) -> list[dict]:
    """Per method: step indexes, FLOPs per step, cumulative FLOPs and cumulative new tokens."""
    res = []
    for name, tr, prof in _runs(runs):
        st = steps_of(prof, tr)
        cum_f, cum_t, f_acc, t_acc = [], [], 0.0, 0
        for s in st:
            f_acc += s["total_flops"]; t_acc += s.get("new_tokens") or 0
            cum_f.append(f_acc); cum_t.append(t_acc)
        res.append({"name": name, "steps": [s["index"] for s in st], "flops": [s["total_flops"] for s in st],
                    "cum_flops": cum_f, "cum_tokens": cum_t})
    return res


@drawn
def compare_figure(runs) -> go.Figure:
    """Left: FLOPs per step; right: cumulative tokens vs cumulative FLOPs — one colour per method."""
    data = [d for d in compare_data(runs) if d["steps"]]
    if not data:
        return _empty("no profile: run with profiling on to see FLOPs")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("FLOPs per step", "tokens generated vs FLOPs spent"))
    for d in data:
        c = method_color(d["name"])
        fig.add_trace(go.Scatter(x=[plot_value(i) for i in d["steps"]], y=d["flops"], name=esc(d["name"]),
                                 mode="lines+markers", line=dict(color=c), legendgroup=d["name"]), 1, 1)
        fig.add_trace(go.Scatter(x=d["cum_flops"], y=d["cum_tokens"], name=esc(d["name"]), mode="lines+markers",
                                 line=dict(color=c), legendgroup=d["name"], showlegend=False), 1, 2)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_yaxes(title_text="FLOPs", row=1, col=1, **log_axis([f for d in data for f in d["flops"]]))
    fig.update_xaxes(title_text="cumulative FLOPs", row=1, col=2, exponentformat="SI")  # "5G", as every axis
    fig.update_yaxes(title_text="cumulative new tokens", row=1, col=2)
    fig.update_layout(height=360, margin=dict(l=60, r=20, t=50, b=50), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.25))
    return fig


def roofline_data(profile: dict, trace=None) -> dict:
    """Per-step (intensity, achieved FLOP/s) points and the machine roofs."""
    st = [s for s in steps_of(profile, trace) if s.get("intensity") and s.get("achieved_flops")]
    return {"machine": machine(profile), "steps": [s["index"] for s in st],
            "intensity": [s["intensity"] for s in st], "achieved_flops": [s["achieved_flops"] for s in st],
            "n_query": [s.get("n_query") for s in st]}


@drawn
def roofline_figure(profile: dict | None, trace=None, others: dict | None = None) -> go.Figure:
    """Log-log roofline: attainable = min(peak_flops, intensity × peak_bw); one point per step.
    others: {name: (trace, profile)} drawn beside it (the Profile tab puts greedy beside the method)."""
    if not profile:
        return _empty("no profile: run with profiling on to see the roofline")
    tr = as_trace(trace) if trace is not None else None
    d = roofline_data(profile, tr)
    m = d["machine"]
    fig = go.Figure()
    xs = d["intensity"] or [1.0]
    if m["peak_flops"] and m["peak_bw"]:
        ridge = m["peak_flops"] / m["peak_bw"]
        lo, hi = min(min(xs), ridge) / 10, max(max(xs), ridge) * 10
        grid = [lo * (hi / lo) ** (i / 60) for i in range(61)]
        fig.add_trace(go.Scatter(x=grid, y=[min(m["peak_flops"], x * m["peak_bw"]) for x in grid], mode="lines",
                                 name=esc(f"roof ({short_name(m['name']) or 'machine'})"), line=dict(color="#444")))
        fig.add_vline(x=ridge, line=dict(dash="dot", color="#999"))
    name = profile.get("method") or (tr.method if tr is not None else None) or "steps"
    for other, (otr, oprof) in (others or {}).items():
        if other == name or not oprof:
            continue
        od = roofline_data(oprof, as_trace(otr) if otr is not None else None)
        fig.add_trace(go.Scatter(x=od["intensity"], y=od["achieved_flops"], mode="markers", name=esc(f"{other} steps"),
                                 marker=dict(size=7, color=method_color(other), symbol="diamond-open"),
                                 customdata=[[plot_value(i), plot_value(q)] for i, q in zip(od["steps"], od["n_query"])],
                                 hovertemplate=f"{esc(other)} step %{{customdata[0]}}<br>query %{{customdata[1]}} tokens<br>"
                                               "%{x:.3s} FLOP/byte<br>%{y:.3s} FLOP/s<extra></extra>"))
    xs_all = [x for t in fig.data for x in t.x] + list(d["intensity"])
    ys_all = [y for t in fig.data for y in t.y] + list(d["achieved_flops"])
    fig.add_trace(go.Scatter(x=d["intensity"], y=d["achieved_flops"], mode="markers", name=esc(f"{name} steps"),
                             marker=dict(size=8, color=method_color(name), opacity=.75),  # the method's colour
                             customdata=[[plot_value(i), plot_value(q)] for i, q in zip(d["steps"], d["n_query"])],
                             hovertemplate="step %{customdata[0]}<br>query %{customdata[1]} tokens<br>"
                                           "%{x:.3s} FLOP/byte<br>%{y:.3s} FLOP/s<extra></extra>"))
    fig.update_layout(title=dict(text="Roofline: every step's arithmetic intensity and achieved FLOP/s",
                                 font=dict(size=13)),
                      xaxis=log_axis(xs_all, title="arithmetic intensity (FLOP/byte)"),
                      yaxis=log_axis(ys_all, title="FLOP/s"), height=380, plot_bgcolor="white",
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.25))
    return fig


def latency_data(runs) -> list[dict]:
    """Per method: (n_query, wall_ms) of each decode step; from the profile if given, else the trace. A step
    whose n_query or wall_ms is not a number (a crafted trace) has no point on these numeric axes."""
    res = []
    for name, tr, prof in _runs(runs):
        st = steps_of(prof, tr)
        if not st and tr is not None:
            st = [{"index": s.index, "n_query": s.n_query, "wall_ms": s.wall_ms} for s in tr.steps
                  if s.kind == "decode"]
        st = [s for s in st if s.get("index", 1) != 0 and number(s.get("wall_ms")) is not None
              and number(s.get("n_query")) is not None]
        res.append({"name": name, "steps": [s["index"] for s in st], "n_query": [s["n_query"] for s in st],
                    "wall_ms": [s["wall_ms"] for s in st]})
    return res


@drawn
def latency_figure(runs) -> go.Figure:
    """Step latency vs query tokens: how much a wider step costs on this machine."""
    data = [d for d in latency_data(runs) if d["steps"]]
    if not data:
        return _empty("no decode steps to show")
    fig = go.Figure()
    for d in data:
        fig.add_trace(go.Scatter(x=d["n_query"], y=d["wall_ms"], mode="markers", name=esc(d["name"]),
                                 marker=dict(color=method_color(d["name"]), size=7, opacity=.7),
                                 customdata=[plot_value(i) for i in d["steps"]], hovertemplate="step %{customdata}<br>%{x} query tokens"
                                                                      "<br>%{y:.2f} ms<extra></extra>"))
    top = max(max(d["wall_ms"]) for d in data)
    span = max(max(d["n_query"]) for d in data) - min(min(d["n_query"]) for d in data)
    fig.update_layout(title=dict(text="Step latency vs query tokens", font=dict(size=13)),
                      xaxis=dict(title="query tokens in the step", dtick=1 if span <= 12 else None),
                      yaxis=dict(title="wall time (ms)", range=[0, top * 1.1 if top > 0 and math.isfinite(top) else 1]),
                      height=340, plot_bgcolor="white", margin=dict(l=60, r=20, t=50, b=50))
    return fig


def operators_data(runs, peak: dict | None = None, device: str = "H100") -> list[dict]:
    """Per run: profiling.operators' breakdown of its widest decode step (time bound per operator group, µs),
    against `peak` ({flops, bandwidth}, e.g. the measured ones) or `device`'s datasheet peak for the trace's
    dtype. A run whose trace records no model shape has no bars."""
    from profiling.operators import step_breakdown
    res = []
    for name, tr, _ in _runs(runs):
        if tr is None or not any(s.kind == "decode" for s in tr.steps):
            continue
        try:
            b = step_breakdown(tr, peak=peak, device=device)
        except (ValueError, TypeError, KeyError):
            continue
        ops = b["operators"]
        res.append({"name": name, "step": b["step"], "n_query": b["n_query"], "kv_len": b["kv_len"],
                    "operators": [o["name"] for o in ops], "time_us": [o["time_s"] * 1e6 for o in ops],
                    "bound": [o["bound"] for o in ops], "share": [o["share"] for o in ops],
                    "peak": b["peak"], "label": b["label"]})
    return res


@drawn
def operators_figure(runs, peak: dict | None = None, device: str = "H100") -> go.Figure:
    """Where a step's time goes: the roofline time bound of each operator group in each run's widest decode
    step (analytic, not measured), bars hatched where the operator is compute-bound."""
    data = operators_data(runs, peak, device)
    if not data:
        return _empty("no decode step with a recorded model shape to break down")
    fig = go.Figure()
    for d in data:
        fig.add_trace(go.Bar(x=[plot_value(o) for o in d["operators"]], y=d["time_us"], name=esc(
            f"{d['name']} (step {d['step']}: {d['n_query']} query tokens)"), marker=dict(
            color=method_color(d["name"]), pattern_shape=["/" if b == "compute" else "" for b in d["bound"]]),
            customdata=[[esc(b), 100 * s] for b, s in zip(d["bound"], d["share"])],
            hovertemplate="%{x}: %{y:.3g} µs, %{customdata[0]}-bound, %{customdata[1]:.1f}% of the step"
                          "<extra></extra>"))
    p = data[0]["peak"]
    where = esc(p.get("name") or p.get("device") or "the measured peaks")
    fig.update_layout(title=dict(text=f"Operator breakdown of the widest step on {where} — roofline lower bound, "
                                      "not measured (hatched: compute-bound)", font=dict(size=13)),
                      barmode="group", xaxis=dict(title="operator group (x layers)"),
                      yaxis=dict(title="time bound (µs)"), height=340, plot_bgcolor="white",
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.3))
    return fig
