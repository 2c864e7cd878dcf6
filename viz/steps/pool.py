"""Pool lookup and verification of one step, and the pool over the whole run.

Lookahead records info["pool_key"] (a token) and prompt lookup records info["key"] (an n-gram); both
record candidates, matched (accepted prefix length per candidate) and chosen (index or None). The step's
accepted tokens are step.accepted: the chosen candidate's matched prefix plus the model's own token.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..common import TraceLike, as_trace, box, drawn, esc, number, plot_value, text_of
from ..palette import ORIGIN_COLORS, STATE_COLORS, method_pictures, pool_legend, token_origin
from .window import _empty


def default_source(method: str) -> str:
    """Where a pool's candidates come from when an older trace does not say: a method whose spec draws a pool
    but no Jacobi window fills it from the text (prompt lookup); otherwise the window (lookahead)."""
    pictures = method_pictures(method)
    return "text" if "pool" in pictures and "window" not in pictures else ""


# Where a pool n-gram a step accepted came from, in the words every caption uses (trajectory title, step
# caption, opening banner): said from the step's own candidate_sources, so a copy of the output is never
# called a window harvest. A trace that records no source gets no claim.
SOURCE_WORDS = {"window": "harvested from earlier Jacobi windows (not this row's guesses)",
                "prompt": "copied from the prompt's text (not a Jacobi window's guess)",
                "output": "copied from this run's own output (not a Jacobi window's guess)",
                "text": "copied from earlier text",
                "reference": "copied from the reference text"}


def chosen_source(step) -> str:
    """The recorded source of the candidate the step accepted ("window", "prompt", "output", "text",
    "reference"); "" when the step chose none or its trace does not record sources."""
    info = step.info if isinstance(step.info, dict) else {}
    chosen, src = info.get("chosen"), info.get("candidate_sources") or []
    ok = isinstance(chosen, int) and not isinstance(chosen, bool) and 0 <= chosen < len(src)
    return str(src[chosen]) if ok and isinstance(src[chosen], str) else ""


def source_words(source: str) -> str:
    """The caption's words for a recorded source; "" (no claim) for an unrecorded or unknown one."""
    return SOURCE_WORDS.get(source, "")


def data(trace: TraceLike, step_index: int) -> dict | None:
    """Key, candidates, matched lengths, chosen candidate and accepted tokens; None without a lookup."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    info = step.info
    if "candidates" not in info:
        return None
    key = info.get("pool_key", info.get("key"))
    key_tokens = key if isinstance(key, list) else ([] if key is None else [key])
    cands = [list(c) for c in info["candidates"]]
    matched = list(info.get("matched") or [0] * len(cands))
    sources = list(info.get("candidate_sources") or [default_source(tr.method)] * len(cands))
    pos = {tuple(sl): p for r, sl, p in zip(step.roles, step.slots, step.positions) if r == "candidate"}
    positions = [[pos.get((g, i)) for i in range(len(c))] for g, c in enumerate(cands)]
    return {"step": step.index, "key": key_tokens, "key_text": [text_of(tr, t) for t in key_tokens],
            "candidates": cands, "candidate_text": [[text_of(tr, t) for t in c] for c in cands],
            "positions": positions, "matched": matched, "sources": sources, "chosen": info.get("chosen"),
            "accepted": list(step.accepted), "accepted_text": [text_of(tr, t) for t in step.accepted],
            "origins": list(step.origins), "pool_size": info.get("pool_size")}


@drawn
def figure(trace: TraceLike, step_index: int) -> go.Figure:
    """One row per candidate: matched tokens green, the rest red; the chosen row is marked."""
    tr = as_trace(trace)
    d = data(tr, step_index)
    if d is None:
        return _empty(f"Step {step_index}: no pool lookup ({tr.method})")
    key = " ".join(d["key_text"]) or "(none)"
    if not d["candidates"]:
        return _empty(f"Step {d['step']}: key {key!r} found no candidates — the model's own token was accepted")
    xs, ys, labels, hover, shapes = [], [], [], [], []
    names, cells_meta = [], []
    for g, (toks, texts) in enumerate(zip(d["candidates"], d["candidate_text"])):
        m = d["matched"][g] if g < len(d["matched"]) else 0
        chosen = g == d["chosen"]
        source = f" ({esc(d['sources'][g])})" if d["sources"][g] else ""
        names.append(("▶ " if chosen else "") + f"cand {g}" + source)
        for i, (t, s) in enumerate(zip(toks, texts)):
            ok = i < m
            color = (ORIGIN_COLORS[token_origin("candidate", d["sources"][g] or None)] if ok
                     else STATE_COLORS["rejected"] if i == m else STATE_COLORS["unchecked"])
            xs.append(i); ys.append(g); labels.append(esc(s)); cells_meta.append(box(i, g, d["positions"][g][i]))
            state = "matches the model" if ok else "rejected" if i == m else "not checked"
            hover.append(f"token {esc(t)} {esc(repr(s))}<br>{state}")
            shapes.append(dict(type="rect", x0=i - .46, x1=i + .46, y0=g - .4, y1=g + .4, fillcolor=color,
                               line=dict(color="#222" if chosen else "#aaa", width=2.5 if chosen else 1),
                               layer="below"))
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="text", text=labels, hovertext=hover, hoverinfo="text",
                               showlegend=False))
    for name, color in pool_legend():  # colour key: invisible points that only make legend entries
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=color)))
    n = len(d["candidates"])
    width = max(len(c) for c in d["candidates"])
    acc = "".join(d["accepted_text"])
    fig.update_layout(shapes=shapes, meta={"cells": cells_meta}, plot_bgcolor="white", height=200 + 45 * n,
                      title=dict(text=esc(f"Step {d['step']}: key {key!r} → {n} candidate(s); accepted {acc!r}"),
                                 font=dict(size=13)),
                      xaxis=dict(title="candidate token", tickvals=list(range(width)), range=[-.6, width - .4],
                                 showgrid=False, zeroline=False),
                      yaxis=dict(tickvals=list(range(n)), ticktext=names, range=[n - .4, -.6], showgrid=False,
                                 zeroline=False),
                      margin=dict(l=140, r=20, t=60, b=100), legend=dict(orientation="h", y=-55 / (45 * n + 40), yanchor="top", font=dict(size=11)))
    return fig


def contents(trace: TraceLike, step_index: int) -> dict[int, dict[str, set[tuple[int, ...]]]]:
    """The pool after step `step_index`, rebuilt from the per-step deltas a traced lookahead run records
    (info["pool_delta"]: ["t"|"w"|"x", key, *n-gram] in order; views.js replays the same ops)."""
    out: dict[int, dict[str, set[tuple[int, ...]]]] = {}
    for s in as_trace(trace).steps:
        if s.index > step_index:
            break
        for op, key, *gram in s.info.get("pool_delta") or []:
            shelf = out.setdefault(key, {"text": set(), "window": set()})
            if op == "x":
                shelf["window"].discard(tuple(gram))
            else:
                shelf["text" if op == "t" else "window"].add(tuple(gram))
    return {k: v for k, v in out.items() if v["text"] or v["window"]}


def run_data(trace: TraceLike) -> dict:
    """Per decode step: pool size, whether the key was found, whether a candidate matched; running rates."""
    tr = as_trace(trace)
    steps, size, found, hit, found_rate, hit_rate = [], [], [], [], [], []
    for s in tr.steps:
        if "candidates" not in s.info:
            continue
        f = bool(s.info["candidates"])
        h = any(number(m, 0) > 0 for m in s.info.get("matched") or [])
        steps.append(s.index); size.append(s.info.get("pool_size")); found.append(f); hit.append(h)
        found_rate.append(sum(found) / len(found)); hit_rate.append(sum(hit) / len(hit))
    return {"steps": steps, "pool_size": size, "found": found, "hit": hit,
            "found_rate": found_rate, "hit_rate": hit_rate}


@drawn
def run_figure(trace: TraceLike) -> go.Figure:
    """Pool size (left axis) and running found/hit rates (right axis) over the run."""
    tr = as_trace(trace)
    d = run_data(tr)
    if not d["steps"]:
        return _empty(f"no pool in this run ({tr.method})")
    fig = go.Figure()
    if any(v is not None for v in d["pool_size"]):
        fig.add_trace(go.Bar(x=[plot_value(i) for i in d["steps"]], y=[number(v) for v in d["pool_size"]],
                             name="pool size (n-grams)", marker_color="#d9d9d9"))
    steps = [plot_value(i) for i in d["steps"]]
    fig.add_trace(go.Scatter(x=steps, y=d["found_rate"], name="key found (running rate)", yaxis="y2",
                             mode="lines", line=dict(color="#4d4d4d", dash="dot")))
    fig.add_trace(go.Scatter(x=steps, y=d["hit_rate"], name="candidate accepted (running rate)", yaxis="y2",
                             mode="lines", line=dict(color=STATE_COLORS["matched"])))
    fig.update_layout(title=dict(text="Pool size and hit rate over the run", font=dict(size=13)),
                      xaxis=dict(title="step"), yaxis=dict(title="n-grams in pool"),
                      yaxis2=dict(title="rate", overlaying="y", side="right", range=[0, 1.05], tickformat=".0%", dtick=0.25),
                      height=300, margin=dict(l=60, r=60, t=50, b=40), legend=dict(orientation="h", y=-0.25),
                      plot_bgcolor="white")
    return fig
