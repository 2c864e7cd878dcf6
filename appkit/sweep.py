"""The lookahead paper's scaling picture on the current model: compression (tokens per step) against the
log of the per-step FLOPs, one line per n-gram size N, one point per window W (G = W).

Every point is a real greedy lookahead run of the same prompt; FLOPs per step are the analytic counts of
profiling.trace_costs averaged over the decode steps.
"""
from __future__ import annotations

import plotly.graph_objects as go

from decoding import run
from profiling import trace_costs

COLORS = ["#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#d6616b", "#8c6d31"]


def grid(ns: list[int], ws: list[int]) -> list[tuple[int, int]]:
    return [(n, w) for n in sorted(set(ns)) for w in sorted(set(ws))]


def point(model, tok, prompt: str, n: int, w: int, max_new_tokens: int, on_step=None) -> dict:
    tr = run(model, tok, prompt, "lookahead", max_new_tokens=max_new_tokens, trace=False,
             window=w, ngram=n, guesses=w, text_span=n - 1, on_step=on_step)  # the paper's pool: the law is about W
    p = next(model.parameters())
    costs = [c for c in trace_costs(tr, model.config, p.dtype) if c["kind"] == "decode"] or \
        trace_costs(tr, model.config, p.dtype)
    st = tr.stats()
    return {"N": n, "W": w, "G": w, "compression": st["compression"], "steps": st["steps"],
            "tokens": st["new_tokens"], "flops_per_step": sum(c["flops"] for c in costs) / len(costs),
            "query_per_step": sum(c["n_query"] for c in costs) / len(costs), "tokens_per_s": st["tokens_per_s"]}


def baseline(model, tok, prompt: str, max_new_tokens: int, on_step=None) -> dict:
    tr = run(model, tok, prompt, "greedy", max_new_tokens=max_new_tokens, trace=False, on_step=on_step)
    p = next(model.parameters())
    costs = [c for c in trace_costs(tr, model.config, p.dtype) if c["kind"] == "decode"] or \
        trace_costs(tr, model.config, p.dtype)
    st = tr.stats()
    return {"N": 1, "W": 0, "G": 0, "compression": st["compression"], "steps": st["steps"],
            "tokens": st["new_tokens"], "flops_per_step": sum(c["flops"] for c in costs) / len(costs),
            "query_per_step": 1.0, "tokens_per_s": st["tokens_per_s"]}


def figure(points: list[dict], title: str = "") -> go.Figure:
    fig = go.Figure()
    base = [p for p in points if p["N"] == 1]
    if base:
        fig.add_trace(go.Scatter(x=[base[0]["flops_per_step"]], y=[base[0]["compression"]], mode="markers+text",
                                 name="greedy", text=["greedy"], textposition="bottom right",
                                 marker=dict(size=11, color="#000", symbol="x")))
    for k, n in enumerate(sorted({p["N"] for p in points if p["N"] > 1})):
        pts = sorted((p for p in points if p["N"] == n), key=lambda p: p["W"])
        fig.add_trace(go.Scatter(
            x=[p["flops_per_step"] for p in pts], y=[p["compression"] for p in pts], mode="lines+markers+text",
            name=f"N={n}", text=[f"W={p['W']}" for p in pts], textposition="top left",
            marker=dict(size=9, color=COLORS[k % len(COLORS)]), line=dict(color=COLORS[k % len(COLORS)]),
            hovertemplate="N=%{customdata[0]} W=%{customdata[1]}<br>%{y:.2f} tokens/step<br>%{x:.3g} FLOPs/step"
                          "<extra></extra>",
            customdata=[[p["N"], p["W"]] for p in pts]))
    fig.update_layout(title=title or "Lookahead scaling: compression vs per-step FLOPs (G = W)",
                      xaxis=dict(type="log", title="FLOPs per step (log scale)"),
                      yaxis=dict(title="compression = tokens / step"), height=440,
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.2))
    return fig
