"""The attention mask of one step, exactly as the engine builds it (decoding.engine.masks.tree_visibility).

Rows and columns are the step's query tokens labelled role·position (position relative to x0, as in
the lookahead paper's figure: for N=4, W=5, G=2 it is the 21×21 mask). Every query also sees the whole
KV cache (the accepted prefix), drawn as one collapsed column on the left.
"""
from __future__ import annotations

import plotly.graph_objects as go

from decoding.engine.masks import tree_visibility

from ..common import TraceLike, as_trace, drawn, esc, is_parent, number, rel_label, text_of
from ..palette import MASK_COLORS, ORIGIN_COLORS, ROLE_COLORS, mask_legend
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
    ok = number(base) is not None  # a crafted position or cache size is labelled as it is (escaped where drawn)
    rel = ([p - base if ok and number(p) is not None else p for p in step.positions] if step.positions
           else list(range(len(step.parents))))
    slots = step.slots or [[]] * len(step.parents)
    labels = [rel_label(r, s, p) for r, s, p in zip(step.roles, slots, rel)]
    return {"step": step.index, "matrix": vis.astype(int).tolist(), "labels": labels, "roles": list(step.roles),
            "positions": list(step.positions), "relative_positions": rel, "kv_len": step.kv_len,
            "tokens": list(step.tokens), "text": [text_of(tr, t) for t in step.tokens]}


def _runs(row: list[int]) -> list[int]:
    """A mask row's visible columns as runs [a0, b0, a1, b1, ...] (inclusive): a prefill's causal row is one
    run, a tree row a few, so the page gets the engine's cells without a matrix per step."""
    out: list[int] = []
    for j, v in enumerate(row):
        if not v:
            continue
        if out and out[-1] == j - 1:
            out[-1] = j
        else:
            out += [j, j]
    return out


def _strip(role: object, origin: object) -> str:
    """The query token's role colour (as in every other view); a drafted node by its tree origin (Medusa's
    heads, EAGLE's draft head), as the tree fills it."""
    if role == "draft" and isinstance(origin, str) and origin and origin != "target":
        return ORIGIN_COLORS.get(origin) or ROLE_COLORS["draft"]
    return ROLE_COLORS.get(role, "#ccc") if isinstance(role, str) else "#ccc"


@drawn
def view(trace: TraceLike, step_index: int, max_tokens: int = 160) -> dict:
    """The mask view-model: the first `max_tokens` queries' labels and role colours, each row's visible
    columns (runs, from the engine's tree_visibility), the cache size and the title. The page (views.js
    maskView) and figure() below only place what this says."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    d = data(tr, step_index)
    if d is None:
        return {"step": step.index, "title": f"Step {step.index}: no query recorded", "labels": [], "colours": [],
                "rows": [], "positions": [], "kv": 0, "n": 0}
    q = len(d["labels"])
    n = min(q, max_tokens)
    origins = ((step.info or {}).get("tree") or {}).get("origin")
    origins = origins if isinstance(origins, list) else []
    kv = d["kv_len"] if number(d["kv_len"]) is not None else 0
    cut = f" (first {n} of {q} shown)" if n < q else ""
    return {"step": d["step"], "n": n, "kv": kv, "labels": d["labels"][:n],
            "colours": [_strip(r, origins[k] if k < len(origins) else None) for k, r in enumerate(d["roles"][:n])],
            "rows": [_runs(row[:n]) for row in d["matrix"][:n]], "positions": d["positions"][:n],
            "title": f"Attention mask of step {d['step']}: {q}×{q}{cut}"
                     + (f" + the {kv}-token cache (left)" if kv else "")}


@drawn
def figure(trace: TraceLike, step_index: int, max_tokens: int = 160) -> go.Figure:
    """The view-model (view()) as a heatmap (dark = may attend) with the cache column. For gr.Plot,
    screenshots and tests."""
    v = view(trace, step_index, max_tokens)
    n = v["n"]
    if not n:
        return _empty(v["title"])
    labels = [f"{i}:{esc(lab)}" for i, lab in enumerate(v["labels"])]  # index keeps category labels unique
    z = []
    for runs in v["rows"]:
        row = [0] * n
        for a, b in zip(runs[::2], runs[1::2]):
            row[a:b + 1] = [1] * (b + 1 - a)
        z.append(([2] if v["kv"] else []) + row)
    cols = ([f"cache×{esc(v['kv'])}"] if v["kv"] else []) + labels
    # one hover template, not a string per cell: a 120-token step would otherwise embed 14,400 strings
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=labels, zmin=0, zmax=2, showscale=False, xgap=1, ygap=1,
                               hovertemplate="query %{y}<br>key %{x}<br>%{z}<extra>2 = KV cache, 1 = may attend,"
                                             " 0 = masked</extra>",
                               colorscale=[[0, MASK_COLORS[0]], [0.5, MASK_COLORS[1]], [1, MASK_COLORS[2]]]))
    for name, color in mask_legend():  # colour key: invisible points that only make legend entries
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=color)))
    size = max(260, min(900, 140 + 18 * n))
    off = 1 if v["kv"] else 0  # rows and columns of query tokens at the selected position
    rows = [[-.5, len(cols) - .5, i - .5, i + .5, p] for i, p in enumerate(v["positions"])]
    fig.update_layout(meta={"cells": rows + [[i + off - .5, i + off + .5, -.5, n - .5, p]
                                             for i, p in enumerate(v["positions"])]})
    fig.update_layout(title=dict(text=esc(v["title"]) + "; blue = may attend", font=dict(size=13)),
                      xaxis=dict(side="top", tickangle=-90, tickfont=dict(size=9), type="category"),
                      yaxis=dict(autorange="reversed", tickfont=dict(size=9), type="category"),
                      height=size + 40, width=size + 60, margin=dict(l=80, r=20, t=110, b=50), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.02, yanchor="top", font=dict(size=11)))
    return fig
