"""The lookahead paper's scaling picture: compression (tokens per step) against per-step FLOPs on a log
axis, one line per n-gram size N, one point per window W (G = W), greedy as the reference cross.

Moved here from appkit/race/sweep.py (which still runs the points): drawing belongs to viz/ and its colours to
viz/palette.py. points = [{"N", "W", "G", "compression", "flops_per_step", ...}]; N == 1 is greedy, N == 0
plain Jacobi decoding with block K = W (the flat line lookahead is measured against). Points with a
"budget" are self-drafting heads runs ({"method": "medusa" | "eagle", "budget": nodes per step}): one
line per method in its method colour, one point per tree budget.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..escape import esc
from ..palette import EXTRA_COLORS, log_axis, method_color

# N lines: one hue family per N, kept apart from the method colours (greedy is the method colour).
N_COLORS = ["#1b9e77", "#66a61e", "#1f78b4", "#a6761d", "#17becf", "#999999", "#8dd3c7"]


def n_color(n: int) -> str:
    """The colour of the N-line (N = 2 is the first); lookahead's own colour for the paper's N = 4 is not
    required, only that one N keeps one colour across sweeps."""
    return N_COLORS[(n - 2) % len(N_COLORS)] if n >= 2 else EXTRA_COLORS[0]


def figure(points: list[dict], title: str = "") -> go.Figure:
    """Compression against per-step FLOPs (decades only on the log axis)."""
    fig = go.Figure()
    heads = [p for p in points if p.get("budget") is not None]
    points_all, points = points, [p for p in points if p.get("budget") is None]
    base = [p for p in points if p["N"] == 1]
    if base:
        fig.add_trace(go.Scatter(x=[base[0]["flops_per_step"]], y=[base[0]["compression"]], mode="markers+text",
                                 name="greedy", text=["greedy"], textposition="bottom right",
                                 marker=dict(size=11, color=method_color("greedy"), symbol="x")))
    for n in sorted({p["N"] for p in points if p["N"] > 1}):
        pts = sorted((p for p in points if p["N"] == n), key=lambda p: p["W"])
        c = n_color(n)
        fig.add_trace(go.Scatter(
            x=[p["flops_per_step"] for p in pts], y=[p["compression"] for p in pts], mode="lines+markers+text",
            name=f"N={n}", text=[f"W={p['W']}" for p in pts], textposition="top left",
            marker=dict(size=9, color=c), line=dict(color=c),
            hovertemplate="N=%{customdata[0]} W=%{customdata[1]}<br>%{y:.2f} tokens/step<br>%{x:.3g} FLOPs/step"
                          "<extra></extra>",
            customdata=[[p["N"], p["W"]] for p in pts]))
    jac = sorted((p for p in points if p["N"] == 0), key=lambda p: p["W"])
    if jac:
        c = method_color("jacobi")
        fig.add_trace(go.Scatter(
            x=[p["flops_per_step"] for p in jac], y=[p["compression"] for p in jac], mode="lines+markers+text",
            name="Jacobi (block K = W)", text=[f"K={p['W']}" for p in jac], textposition="bottom right",
            marker=dict(size=9, color=c, symbol="diamond"), line=dict(color=c, dash="dash"),
            hovertemplate="Jacobi K=%{customdata}<br>%{y:.2f} tokens/step<br>%{x:.3g} FLOPs/step<extra></extra>",
            customdata=[p["W"] for p in jac]))
    for m in sorted({p["method"] for p in heads}):
        pts = sorted((p for p in heads if p["method"] == m), key=lambda p: p["budget"])
        c = method_color(m)
        fig.add_trace(go.Scatter(
            x=[p["flops_per_step"] for p in pts], y=[p["compression"] for p in pts], mode="lines+markers+text",
            name=esc(f"{m} (tree budget)"), text=[f"B={p['budget']}" for p in pts], textposition="bottom right",
            marker=dict(size=9, color=c, symbol="square"), line=dict(color=c, dash="dot"),
            hovertemplate=esc(m) + " budget %{customdata}<br>%{y:.2f} tokens/step<br>%{x:.3g} FLOPs/step<extra></extra>",
            customdata=[p["budget"] for p in pts]))
    window = any(p["N"] != 1 for p in points)
    default = {(True, False): "Lookahead scaling: compression vs per-step FLOPs (G = W)",
               (False, True): "Tree size: compression vs per-step FLOPs (self-drafting heads)",
               (True, True): "Window (lookahead, G = W) and tree size (heads): compression vs per-step FLOPs",
               }.get((window, bool(heads)), "Compression vs per-step FLOPs")
    fig.update_layout(title=title or default,
                      xaxis=log_axis([p["flops_per_step"] for p in points_all], title="FLOPs per step (log scale)"),
                      yaxis=dict(title="compression = tokens / step"), height=440, plot_bgcolor="white",
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.2))
    return fig
