"""Lookahead parallelism's 2D window, coloured by the rank that computed each cell.

Rows are window levels (row 0 = [x0, L0]), columns are window columns, as in viz/steps/window.py. A column is
one Jacobi trajectory, owned by one rank (decoding/parallel/lookahead_parallel.py): its upper levels are
computed there only. Row-0 cells left of a rank's columns are recomputed by that rank too (a column needs
row 0 up to itself): those cells are drawn in the owner's colour with the other ranks named in the hover
and a dashed outline. Reads step.info["lp"]["cells"] (per rank, [level, column]) and the step's window.

    python -m viz lp-window TRACE.json [--step K] [--out lp_window.html]
"""
from __future__ import annotations


import plotly.graph_objects as go

from ..common import TraceLike, as_trace, drawn, esc, text_of

RANK_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6")
MAX_CELLS = 65_536  # a crafted trace cannot make a huge figure


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]


def data(trace: TraceLike, step_index: int) -> dict | None:
    """{cell (level, column): {"owner", "ranks", "token", "text"}} of a lookahead-parallel step, or None."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    lp = step.info.get("lp") or {}
    cells_by_rank = lp.get("cells")
    if not cells_by_rank or not step.info.get("window"):
        return None
    window = step.info["window"]
    x0 = step.tokens[0] if step.tokens else None
    ranks: dict[tuple[int, int], list[int]] = {}
    for r, cells in enumerate(cells_by_rank[:len(RANK_COLORS) * 64]):
        for level, col in cells[:MAX_CELLS]:
            ranks.setdefault((int(level), int(col)), []).append(r)
    top = max((lv for lv, _ in ranks), default=0)
    out = {}
    for (level, col), rs in ranks.items():
        owner = next((r for r in rs if any(c == col and lv == top for lv, c in cells_by_rank[r])), rs[-1])
        if level == 0:
            tok = x0 if col == 0 else (window[0][col - 1] if col - 1 < len(window[0]) else None)
        else:
            tok = window[level][col] if level < len(window) and col < len(window[level]) else None
        out[(level, col)] = {"owner": owner, "ranks": sorted(rs), "token": tok,
                             "text": "" if tok is None else text_of(tr, tok)}
    return {"step": step.index, "cells": out, "world": len(cells_by_rank), "winner": lp.get("winner")}


@drawn
def figure(trace: TraceLike, step_index: int) -> go.Figure:
    d = data(trace, step_index)
    fig = go.Figure()
    if d is None:
        fig.update_layout(title="this step has no lookahead-parallel window (run with --lp, pick a decode step)")
        return fig
    for r in range(d["world"]):
        mine = [(k, c) for k, c in d["cells"].items() if c["owner"] == r]
        fig.add_trace(go.Scatter(
            x=[k[1] for k, _ in mine], y=[k[0] for k, _ in mine], mode="markers+text", name=f"rank {r}",
            text=[esc(c["text"]) for _, c in mine], textposition="middle center",
            marker=dict(symbol="square", size=44, color=rank_color(r),
                        line=dict(width=[3 if len(c["ranks"]) > 1 else 0 for _, c in mine], color="#333")),
            hovertext=[f"level {k[0]}, column {k[1]}: computed by rank(s) {', '.join(map(str, c['ranks']))}"
                       for k, c in mine], hoverinfo="text"))
    fig.update_layout(title=f"step {d['step']}: window cells by rank (outlined: recomputed by several ranks; "
                            f"accepted tokens from rank {d['winner']})",
                      xaxis=dict(title="window column", dtick=1), yaxis=dict(title="level", dtick=1),
                      plot_bgcolor="white", height=160 + 60 * (1 + max(k[0] for k in d["cells"])))
    return fig
