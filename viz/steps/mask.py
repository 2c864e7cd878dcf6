"""The attention mask of one step, exactly as the engine builds it (decoding.engine.masks.tree_visibility).

Rows and columns are the step's query tokens labelled role·position (position relative to x0, as in
the lookahead paper's figure: for N=4, W=5, G=2 it is the 21×21 mask). Every query also sees the whole
KV cache (the accepted prefix), drawn as one collapsed column on the left.
"""
from __future__ import annotations

import plotly.graph_objects as go

from decoding.engine.masks import tree_visibility

from ..common import TraceLike, as_trace, drawn, esc, is_parent, rel_label, text_of
from ..palette import MASK_COLORS, mask_legend
from .window import _empty


def data(trace: TraceLike, step_index: int) -> dict | None:
    """matrix[i][j] = query i may attend to query j; None when tracing was off for the step."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    if not step.parents:
        return None
    # a bad parent (a cycle, past the query) sees only itself, as the engine's builder gives a later parent
    vis = tree_visibility([p if is_parent(p, i) else -1 for i, p in enumerate(step.parents)])
    base = step.positions[0] if step.positions else step.kv_len
    rel = [p - base for p in step.positions] if step.positions else list(range(len(step.parents)))
    slots = step.slots or [[]] * len(step.parents)
    labels = [rel_label(r, s, p) for r, s, p in zip(step.roles, slots, rel)]
    return {"step": step.index, "matrix": vis.astype(int).tolist(), "labels": labels, "roles": list(step.roles),
            "positions": list(step.positions), "relative_positions": rel, "kv_len": step.kv_len,
            "tokens": list(step.tokens), "text": [text_of(tr, t) for t in step.tokens]}


@drawn
def figure(trace: TraceLike, step_index: int, max_tokens: int = 160) -> go.Figure:
    """Heatmap of the mask (dark = may attend), with the cache column; big prompts are cut to max_tokens."""
    tr = as_trace(trace)
    d = data(tr, step_index)
    if d is None:
        return _empty(f"Step {step_index}: no query recorded")
    n = min(len(d["labels"]), max_tokens)
    labels = [f"{i}:{esc(lab)}" for i, lab in enumerate(d["labels"][:n])]  # index keeps category labels unique
    z = [([2] if d["kv_len"] else []) + row[:n] for row in d["matrix"][:n]]
    cols = ([f"cache×{esc(d['kv_len'])}"] if d["kv_len"] else []) + labels
    # one hover template, not a string per cell: a 120-token step would otherwise embed 14,400 strings
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=labels, zmin=0, zmax=2, showscale=False, xgap=1, ygap=1,
                               hovertemplate="query %{y}<br>key %{x}<br>%{z}<extra>2 = KV cache, 1 = may attend,"
                                             " 0 = masked</extra>",
                               colorscale=[[0, MASK_COLORS[0]], [0.5, MASK_COLORS[1]], [1, MASK_COLORS[2]]]))
    for name, color in mask_legend():  # colour key: invisible points that only make legend entries
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=color)))
    cut = f" (first {n} of {len(d['labels'])} shown)" if n < len(d["labels"]) else ""
    size = max(260, min(900, 140 + 18 * n))
    off = 1 if d["kv_len"] else 0  # rows and columns of query tokens at the selected position
    rows = [[-.5, len(cols) - .5, i - .5, i + .5, p] for i, p in enumerate(d["positions"][:n])]
    fig.update_layout(meta={"cells": rows + [[i + off - .5, i + off + .5, -.5, n - .5, p]
                                             for i, p in enumerate(d["positions"][:n])]})
    fig.update_layout(title=dict(text=f"Attention mask of step {esc(d['step'])}: {len(d['labels'])}×{len(d['labels'])}"
                                      f"{cut}; blue = may attend", font=dict(size=13)),
                      xaxis=dict(side="top", tickangle=-90, tickfont=dict(size=9), type="category"),
                      yaxis=dict(autorange="reversed", tickfont=dict(size=9), type="category"),
                      height=size + 40, width=size + 60, margin=dict(l=80, r=20, t=110, b=50), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.02, yanchor="top", font=dict(size=11)))
    return fig
