"""Jacobi trajectories: positions × iterations, each cell the guess a step fed the model at that position.

Why: plain Jacobi decoding (a jacobi trace) and lookahead's window (a lookahead trace) both iterate
guesses for future positions; drawn the same way, side by side, they show the lesson of the lookahead
paper: a guess made from a wrong left context is rarely right, so a Jacobi block converges about one
position per step, while lookahead keeps the n-grams its trajectories produce and copies them later.

A cell is green when the guess equals the position's final token (the text the run produced): dark at
the iteration from which it stays equal ("converges here"), pale after that; grey while it differs. The
guesses a step accepted are outlined: only those (a Jacobi step accepts its block's prefix; a lookahead step
accepts a verified pool n-gram, not its window's guesses, so its row names the pool tokens instead). Rows are steps (iterations), columns absolute positions, so every
cell links to the token strip by its position like every other view.

Where the guesses come from: jacobi → step.info["jacobi"]["guesses"] at positions kv_len + 1 ...;
lookahead → the step's window cells (roles "window"), the newest level's guess where several levels sit
at one position (level l, column j sits at x0 + l + j).
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..common import TraceLike, as_trace, box, drawn, esc, text_of
from ..palette import STATE_COLORS, TRAJECTORY_COLORS
from .pool import chosen_source, source_words
from .window import _empty


def guesses(step) -> dict[int, int]:
    """{absolute position: guessed token} a decode step fed the model, {} when it has no trajectory.
    Positions, levels and a kv_len that are not integers (a crafted trace) place no guess."""
    return {p: t for p, (t, _) in _cells(step).items()}


def _cells(step) -> dict[int, tuple[int, int]]:
    """{position: (guessed token, its query row)}: the row says whether the step accepted that very guess."""
    jac = step.info.get("jacobi")
    if not _int(step.kv_len):
        return {}
    if jac:
        return {step.kv_len + 1 + i: (t, i + 1) for i, t in enumerate(jac["guesses"])}
    out: dict[int, tuple[int, int, int]] = {}
    for q, (r, sl, p, t) in enumerate(zip(step.roles, step.slots, step.positions, step.tokens)):
        if r != "window" or not _int(p) or not isinstance(sl, (list, tuple)) or not sl or not _int(sl[0]):
            continue
        if p not in out or sl[0] >= out[p][0]:
            out[p] = (sl[0], t, q)
    return {p: (t, q) for p, (_, t, q) in out.items()}


def accepted_rows(step) -> list[int]:
    """The query rows whose guesses the step accepted (the path it kept, less the last token x0 it started
    from). A lookahead step accepts a verified pool n-gram: those rows are candidates, never window cells,
    so no window guess is marked accepted. A trace without `kept`: a Jacobi step's accepted prefix."""
    kept = [q for q in (step.kept or []) if _int(q)]
    if kept:  # kept[i] made accepted[i - 1]; a run cut at max new tokens keeps more rows than it accepts
        return kept[1:1 + len(step.accepted)]
    return list(range(1, len(step.accepted))) if step.info.get("jacobi") else []


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def has_trajectory(trace: TraceLike) -> bool:
    tr = as_trace(trace)
    return any(s.kind == "decode" and guesses(s) for s in tr.steps)


def data(trace: TraceLike) -> dict:
    """Rows (one per decode step with guesses): step, x0 position, accepted positions [first, last] and
    cells {pos, token, text, final, state}; state is "wrong", "converges" or "converged"."""
    tr = as_trace(trace)
    final = list(tr.prompt_ids) + list(tr.output_ids)
    rows = []
    for s in tr.steps:
        if s.kind != "decode":
            continue
        g = _cells(s)
        if not g:
            continue
        took = set(accepted_rows(s))
        mine = {q for _, q in g.values()}
        pool = [text_of(tr, s.tokens[q]) for q in sorted(took - mine) if 0 <= q < len(s.tokens)]
        src = chosen_source(s) if pool else ""
        rows.append({"step": s.index, "x0": s.kv_len, "accepted": [s.kv_len + 1, s.kv_len + len(s.accepted)],
                     "accepted_cells": sorted(p for p, (_, q) in g.items() if q in took), "from_pool": pool,
                     "pool_source": src, "pool_words": source_words(src),
                     "cells": [{"pos": p, "token": t, "text": text_of(tr, t),
                                "final": final[p] if p < len(final) else None} for p, (t, _) in sorted(g.items())]})
    history: dict[int, list[tuple[int, bool]]] = {}  # position -> (row, guess == final) in row order
    for k, row in enumerate(rows):
        for c in row["cells"]:
            history.setdefault(c["pos"], []).append((k, c["final"] is not None and c["token"] == c["final"]))
    seen: dict[int, int | None] = {}  # position -> the row where its last run of right guesses starts
    for pos, h in history.items():
        first = None
        for k, ok in reversed(h):
            if not ok:
                break
            first = k
        seen[pos] = first
    for k, row in enumerate(rows):
        for c in row["cells"]:
            first = seen.get(c["pos"])
            c["state"] = ("converges" if first == k else "converged" if first is not None and k > first
                          else "wrong")
    n = sum(len(r["cells"]) for r in rows)
    right = sum(c["state"] != "wrong" for r in rows for c in r["cells"])
    # what the guesses are, from the data (a Jacobi step records its block; lookahead's come from its window)
    block = any(isinstance(s.info, dict) and s.info.get("jacobi") for s in tr.steps)
    return {"method": tr.method, "what": "Jacobi block" if block else "lookahead window (newest level per position)",
            "rows": rows, "cells": n, "right": right,
            "accepted_guesses": sum(len(r["accepted_cells"]) for r in rows),
            "from_pool": sum(len(r["from_pool"]) for r in rows)}


@drawn
def figure(trace: TraceLike, step_index: int | None = None, last: int = 16) -> go.Figure:
    """The `last` iterations up to step_index (default: the run's end) as a grid of token cells."""
    tr = as_trace(trace)
    d = data(tr)
    rows = [r for r in d["rows"] if step_index is None or r["step"] <= step_index][-last:]
    if not rows:
        return _empty(f"no Jacobi trajectory in this run ({tr.method})")
    lo = min(c["pos"] for r in rows for c in r["cells"])
    hi = max(c["pos"] for r in rows for c in r["cells"])
    xs, ys, labels, hover, shapes, meta = [], [], [], [], [], []
    for y, r in enumerate(rows):
        for c in r["cells"]:
            x = c["pos"]
            acc = x in r["accepted_cells"]  # this very guess was accepted (a lookahead step accepts pool n-grams)
            shapes.append(dict(type="rect", x0=x - .46, x1=x + .46, y0=y - .42, y1=y + .42, layer="below",
                               fillcolor=TRAJECTORY_COLORS[c["state"]],
                               line=dict(color=STATE_COLORS["matched"] if acc else "#999", width=3 if acc else 1)))
            xs.append(x); ys.append(y); labels.append(esc(c["text"])); meta.append(box(x, y, x))
            fin = "?" if c["final"] is None else text_of(tr, c["final"])
            hover.append(esc(f"step {r['step']} · position {x}") + "<br>" + esc(f"guess {c['text']!r} · final {fin!r}")
                         + f"<br>{c['state']}" + ("<br>accepted this step" if acc else ""))
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="text", text=labels, hovertext=hover, hoverinfo="text",
                               showlegend=False))
    fig.update_layout(shapes=shapes, meta={"cells": meta}, plot_bgcolor="white",
                      height=140 + 34 * len(rows), margin=dict(l=70, r=20, t=50, b=40),
                      title=dict(text=_title(tr, d), font=dict(size=13)),
                      xaxis=dict(title="position", range=[lo - .6, hi + .6], showgrid=False, zeroline=False),
                      yaxis=dict(tickvals=list(range(len(rows))), ticktext=[_tick(r) for r in rows],
                                 range=[len(rows) - .4, -.6], showgrid=False, zeroline=False))
    return fig


def _tick(r: dict) -> str:
    """A row's label: its step, and what it accepted from the pool where that is not the window's guesses."""
    pool = f" · pool ✓{len(r['from_pool'])}" if r["from_pool"] else ""
    return f"step {esc(r['step'])}{pool}"


def _title(tr, d: dict) -> str:
    share = d["right"] / d["cells"] if d["cells"] else 0.0
    return (f"Trajectory of the {d['what']}: {share:.0%} of guesses equal their final token; "
            f"{d['accepted_guesses']} guesses accepted"
            + (f"; {d['from_pool']} tokens accepted from the pool (not outlined: no window guess)" if d["from_pool"] else ""))
