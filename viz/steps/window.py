"""The lookahead Jacobi window of one step, drawn from the step's own query (tokens, positions, slots).

Rows are levels (row 0 = [x0, L0], then L1 .. L(N-2)), columns are window columns; the top row shows
the W guesses this step produced (info["window_next"][-1]). Each cell is coloured by the step that
produced it: level l of a window with L levels comes from step s-(L-l), like the paper's t-1/t-2/t-3
trajectories; the warm-up's random initial guesses are "init". Harvested columns (the n-grams put into
the pool this step) are outlined.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..common import TraceLike, as_trace, box, drawn, esc, plot_value, text_of
from ..palette import AGE_COLORS, INIT_COLOR, ROLE_COLORS, STATE_COLORS, age_color

MAX_COLS = 256  # ticks at most: wider than any real window (64); a crafted slot cannot make a huge axis
NEW_COLOR = AGE_COLORS[0]  # this step's output: the newest end of the age scale (never an origin colour)


def has_window(step) -> bool:
    return bool(step.info.get("window")) and "window" in step.roles


def data(trace: TraceLike, step_index: int) -> dict | None:
    """Cells of the step's window, or None when the step has no window (other methods, prefill)."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    if not has_window(step):
        return None
    n_levels = len(step.info["window"])
    grid: dict[tuple[int, int], dict] = {}
    for k, role in enumerate(step.roles):
        if role not in ("x0", "window"):
            continue
        level, col = (0, 0) if role == "x0" else step.slots[k]
        produced = step.index - 1 if role == "x0" else step.index - (n_levels - level)
        grid[(level, col)] = {"query_index": k, "token": step.tokens[k], "text": text_of(tr, step.tokens[k]),
                              "pos": step.positions[k], "level": level, "col": col, "role": role,
                              "produced": produced if produced >= 1 or role == "x0" else None}
    width = max(c for _, c in grid) + 1
    # the cells present, in column order (not range(width): a crafted slot [0, 10**9] is no loop)
    levels = [[grid[k] for k in sorted(k for k in grid if k[0] == lv)] for lv in range(n_levels)]
    top = levels[-1]
    new = []
    nxt = step.info.get("window_next") or []
    if nxt:
        shift = width - len(nxt[-1])  # the new top level sits one position after the old top level
        for j, tok in enumerate(nxt[-1]):
            below = top[j + shift] if 0 <= j + shift < len(top) else None
            new.append({"token": tok, "text": text_of(tr, tok), "pos": below["pos"] + 1 if below else None,
                        "col": j + shift, "produced": step.index})
    harvested = [list(g) for g in step.info.get("harvested") or []]
    return {"step": step.index, "levels": levels, "x0": grid[(0, 0)], "new": new, "harvested": harvested,
            "harvested_cols": list(range(len(harvested))), "width": width,
            "window": step.info["window"], "config": {k: tr.config.get(k) for k in ("window", "ngram", "guesses")}}


def _cell_style(cell: dict, step_index: int) -> tuple[str, str]:
    if cell.get("role") == "x0":
        return ROLE_COLORS["x0"], "x0 (last accepted token)"
    if cell["produced"] is None:
        return INIT_COLOR, "initial random guess"
    if cell["produced"] == step_index:
        return NEW_COLOR, "produced by this step"
    age = step_index - cell["produced"]
    return age_color(age), f"from step {cell['produced']} (t-{age})"


@drawn
def figure(trace: TraceLike, step_index: int) -> go.Figure:
    """Grid of token cells: text, absolute position, colour by producing step; harvested columns boxed."""
    tr = as_trace(trace)
    d = data(tr, step_index)
    fig = go.Figure()
    if d is None:
        return _empty(f"Step {step_index}: no Jacobi window ({tr.method})")
    rows = [(f"L{lv}" if lv else "x0 · L0", cells) for lv, cells in enumerate(d["levels"])]
    if d["new"]:
        rows.append(("new guesses", d["new"]))
    xs, ys, colors, hover, labels = [], [], [], [], []
    shapes, cells_meta = [], []
    for r, (_, cells) in enumerate(rows):
        for c in cells:
            color, why = _cell_style(c, d["step"])
            xs.append(plot_value(c["col"])); ys.append(r); colors.append(color); cells_meta.append(box(c["col"], r, c["pos"]))
            labels.append(f"<b>{esc(c['text'])}</b><br><span style='font-size:9px'>@{esc(c['pos'])}</span>")
            hover.append(f"token {esc(c['token'])} {esc(repr(c['text']))}<br>position {esc(c['pos'])}<br>{esc(why)}")
            shapes.append(dict(type="rect", x0=c["col"] - .46, x1=c["col"] + .46, y0=r - .44, y1=r + .44,
                               fillcolor=color, line=dict(color="#1f4e79" if c.get("role") == "x0" else "#999",
                                                          width=3 if c.get("role") == "x0" else 1), layer="below"))
    for j in d["harvested_cols"]:
        shapes.append(dict(type="rect", x0=j - .5, x1=j + .5, y0=-.5, y1=len(rows) - .5,
                           line=dict(color=STATE_COLORS["matched"], width=2, dash="dot"), fillcolor="rgba(0,0,0,0)"))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="text", text=labels, hovertext=hover, hoverinfo="text",
                             textfont=dict(size=12), showlegend=False))
    for name, color in _legend(d):  # colour key: invisible points that only make legend entries
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=color)))
    fig.update_layout(shapes=shapes, meta={"cells": cells_meta}, title=dict(text=_title(d), font=dict(size=13)),
                      xaxis=dict(title="window column", tickmode="array", tickvals=list(range(min(d["width"], MAX_COLS))),
                                 range=[-.6, d["width"] - .4], zeroline=False, showgrid=False),
                      yaxis=dict(tickmode="array", tickvals=list(range(len(rows))), ticktext=[n for n, _ in rows],
                                 range=[-.6, len(rows) - .4], zeroline=False, showgrid=False),
                      height=150 + 55 * len(rows), margin=dict(l=90, r=20, t=60, b=40),
                      plot_bgcolor="white", legend=dict(orientation="h", y=-0.18, font=dict(size=11)))
    return fig


def _title(d: dict) -> str:
    h = len(d["harvested"])
    harvest = f"{h} column n-grams harvested into the pool" if h else "warm-up: no n-grams harvested yet"
    return f"Jacobi window at step {esc(d['step'])}<br><span style='font-size:11px'>{harvest} (dotted boxes)</span>"


def _legend(d: dict) -> list[tuple[str, str]]:
    ages = sorted({d["step"] - c["produced"] for row in d["levels"] for c in row
                   if c["produced"] is not None and c.get("role") != "x0"})
    items = [("x0", ROLE_COLORS["x0"])] + [(esc(f"t-{a} (step {d['step'] - a})"), age_color(a)) for a in ages if a > 0]
    if any(c["produced"] is None for row in d["levels"] for c in row):
        items.append(("initial random guess", INIT_COLOR))
    if d["new"]:
        items.append(("new guess (this step)", NEW_COLOR))
    return items


def _empty(msg: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(annotations=[dict(text=esc(msg), showarrow=False, x=.5, y=.5, xref="paper", yref="paper")],
                      xaxis=dict(visible=False), yaxis=dict(visible=False), height=160,
                      margin=dict(l=10, r=10, t=10, b=10), plot_bgcolor="white")
    return fig
