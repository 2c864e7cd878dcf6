"""The token tree one step verified: a draft tree for speculative decoding, or any step's query tree.

Speculative steps carry info["tree"] = {tokens, parents, depth, draft_prob, target_prob, origin} aligned
with the query (index 0 = x0), info["accepted_path"] and info["first_rejected"] (query indices). Every
field is optional: without info["tree"] the query's own tokens/parents/roles are drawn (a lookahead step
is a tree too), the accepted path falls back to step.kept, and missing probabilities are left blank.
Pruned nodes (info["tree"]["pruned"] = {parents, tokens, draft_prob}; absent in old traces) are the
children the draft proposed but cut because their draft probability fell below the confidence cutoff
(trace.config["confidence"]); they are drawn faint with "p=0.21 < cutoff 0.40" so a 3,2,1 tree that
verified only 4 nodes shows why.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..common import ORIGIN_COLORS, ROLE_COLORS, TraceLike, as_trace, box, drawn, esc, is_parent, number, text_of
from ..counts import step_counts
from ..palette import STATE_COLORS, tree_legend
from .cut import cut_words
from .window import _empty



def _get(seq: list | None, i: int):
    return seq[i] if seq is not None and i < len(seq) else None


def _fixed(v: object, digits: int) -> str:
    """A probability with `digits` decimals; a crafted trace's string as it is (escaped where written)."""
    return f"{v:.{digits}f}" if number(v) is not None else str(v)


def data(trace: TraceLike, step_index: int) -> dict | None:
    """Nodes (token, text, parent, depth, probabilities, origin, accepted, rejected) of the step's tree."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    info = step.info or {}
    tree = info.get("tree") or {}
    tokens = tree.get("tokens") or step.tokens
    parents = tree.get("parents") or step.parents
    if not tokens or len(parents) != len(tokens):
        return None
    parents = [p if is_parent(p, i) else -1 for i, p in enumerate(parents)]  # a bad parent: drawn as a root
    depth = tree.get("depth")
    if not depth or len(depth) != len(tokens):
        depth = [0] * len(tokens)
        for i, p in enumerate(parents):
            depth[i] = 0 if p < 0 else depth[p] + 1
    origin = tree.get("origin") or [r if r != "x0" else "target" for r in step.roles] or ["draft"] * len(tokens)
    path = info.get("accepted_path", step.kept) or []
    path = [p for p in path if 0 <= p < len(tokens)]
    rejected = info.get("first_rejected")
    base = step.positions[0] if step.positions else step.kv_len
    nodes = [{"id": i, "token": t, "text": text_of(tr, t), "parent": parents[i], "depth": depth[i], "pos": base + depth[i] if number(base) is not None and number(depth[i]) is not None else None,
              "draft_prob": _get(tree.get("draft_prob"), i), "target_prob": _get(tree.get("target_prob"), i),
              "origin": _get(origin, i) or "draft", "accepted": i in path, "rejected": i == rejected,
              "rank": _get(tree.get("rank"), i)}
             for i, t in enumerate(tokens)]
    return {"step": step.index, "nodes": nodes, "accepted_path": path, "first_rejected": rejected,
            "accepted": list(step.accepted), "origins": list(step.origins), "from_info": bool(tree),
            "pruned": pruned_nodes(tr, tree.get("pruned"), nodes), "pruned_recorded": "pruned" in tree,
            "cutoff": tr.config.get("confidence")}


def pruned_nodes(tr, pruned: dict | None, nodes: list[dict]) -> list[dict]:
    """The cut children as nodes (id continues after the tree's), each hanging under its parent."""
    if not pruned:
        return []
    parents, toks, probs = pruned.get("parents") or [], pruned.get("tokens") or [], pruned.get("draft_prob") or []
    out = []
    for k, (p, t) in enumerate(zip(parents, toks)):
        if not is_parent(p, len(nodes)):
            continue
        out.append({"id": len(nodes) + k, "token": t, "text": text_of(tr, t), "parent": p,
                    "depth": nodes[p]["depth"] + 1, "pos": None, "draft_prob": _get(probs, k), "pruned": True})
    return out


def prune_label(n: dict, cutoff: float | None, escape: bool = True) -> str:
    """'p=0.21 < cutoff 0.40' (or just 'pruned' when a probability is missing); escape=True: as plotly text,
    the values escaped, the '<' ours (no '>' follows it, so plotly reads no tag); False: plain text."""
    p = n.get("draft_prob")
    if p is None:
        return "pruned"
    e = esc if escape else str
    p = e(_fixed(p, 2))
    return f"p={p} < cutoff {e(_fixed(cutoff, 2))}" if cutoff is not None else f"p={p} (pruned)"


def layout(nodes: list[dict]) -> dict[int, float]:
    """Tidy vertical order: leaves get consecutive rows, a parent sits at the mean of its children."""
    children: dict[int, list[int]] = {}
    for n in nodes:
        children.setdefault(n["parent"], []).append(n["id"])
    y: dict[int, float] = {}
    next_row = [0]

    def place(i: int) -> float:
        kids = children.get(i, [])
        if not kids:
            y[i] = next_row[0]
            next_row[0] += 1
        else:
            y[i] = sum(place(k) for k in kids) / len(kids)
        return y[i]

    stack_roots = children.get(-1, [])
    for r in stack_roots:
        place(r)
    return y


def _fill(origin: object) -> str:
    """A node's fill: its origin's colour, else its query role's (a lookahead step's own tree), else grey."""
    return ORIGIN_COLORS.get(origin) or ROLE_COLORS.get(origin) or "#ccc" if isinstance(origin, str) else "#ccc"


@drawn
def view(trace: TraceLike, step_index: int) -> dict | None:
    """The tree view-model: every node placed (x = depth, y = row), filled, outlined and labelled, every edge
    styled, the title said. Why: the page (views.js treeView) and the plotly figure below only place what
    this says, so the tree is drawn one way (texts are plain: each renderer escapes where it writes)."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    if step.kind == "prefill":
        return {"step": step.index, "title": f"Step {step.index} (prefill): the prompt is read as one chain — no tree",
                "nodes": [], "edges": [], "rows": 0, "depth": 0}
    d = data(tr, step_index)
    if d is None:
        return {"step": step.index, "title": f"Step {step.index}: no tree recorded", "nodes": [], "edges": [],
                "rows": 0, "depth": 0}
    nodes, pruned, cut = d["nodes"], d["pruned"], d["cutoff"]
    y = layout(nodes + pruned)
    on_path = set(d["accepted_path"])
    every = nodes + pruned
    at = {n["id"]: k for k, n in enumerate(every)}  # list index of each node (pruned ids may skip)
    edges = []
    for n in every:
        p = n["parent"]
        if p < 0:
            continue
        good = not n.get("pruned") and n["id"] in on_path and p in on_path
        colour = STATE_COLORS["pruned"] if n.get("pruned") else STATE_COLORS["matched"] if good else "#bbb"
        edges.append({"a": at[p], "b": at[n["id"]], "x0": nodes[p]["depth"], "y0": y[p], "x1": n["depth"],
                      "y1": y[n["id"]], "colour": colour, "width": 4 if good else 1.2, "dashed": bool(n.get("pruned"))})
    out = []
    for n in nodes:
        acc, bad = n["accepted"], n["rejected"]
        out.append({"x": n["depth"], "y": y[n["id"]], "pos": n["pos"], "label": n["text"], "name": f"node {n['id']}",
                    "tip": _hover(n), "fill": _fill(n["origin"]), "origin": n["origin"], "rejected": bad,
                    "pruned": False, "stroke": STATE_COLORS["matched"] if acc else STATE_COLORS["rejected"] if bad
                    else "#666", "stroke_width": 3 if acc or bad else 1.5})
    for n in pruned:
        why = prune_label(n, cut, escape=False)
        out.append({"x": n["depth"], "y": y[n["id"]], "pos": None, "label": f"{n['text']} · {why}",
                    "name": f"pruned child of node {n['parent']}", "tip": f"token {n['token']} {n['text']!r} · {why}",
                    "fill": "#ffffff", "origin": "pruned", "rejected": False, "pruned": True,
                    "stroke": STATE_COLORS["pruned"], "stroke_width": 1.5})
    rej, s = d["first_rejected"], step_counts(step)
    title = (f"Step {d['step']}: {len(nodes)}-node tree, accepted path {max(len(on_path) - 1, 0)} deep "
             f"({s.guessed} guessed token{'' if s.guessed == 1 else 's'} + {s.own} of the model's own)"
             + (f", first rejected node {rej}" if rej is not None else ""))
    if cut is not None:
        title += (f" · confidence cutoff {_fixed(cut, 2)}: "
                  + (f"{len(pruned)} proposed node(s) below it pruned (faint)" if d["pruned_recorded"]
                     else "pruned nodes not recorded in this trace"))
    title += cut_words(tr, step_index)
    return {"step": d["step"], "title": title, "nodes": out, "edges": edges,
            "rows": max(y.values()) + 1 if y else 1, "depth": max(n["depth"] for n in nodes + pruned)}


def _plotly_text(text: str) -> str:
    """Plain text as plotly text: escaped, then '&lt; ' back to '< ' ('p=0.21 < cutoff 0.40' reads as written;
    a '<' followed by a space opens no tag, so a crafted value stays inert)."""
    return esc(text).replace("&lt; ", "< ")


@drawn
def figure(trace: TraceLike, step_index: int) -> go.Figure:
    """The view-model (view()) placed as plotly traces: nodes left→right by depth, accepted path in bold green,
    first rejection ✕, pruned nodes faint and hollow. For gr.Plot, screenshots and tests."""
    v = view(trace, step_index)
    if not v["nodes"]:
        return _empty(v["title"])
    fig = go.Figure()
    for e in v["edges"]:
        fig.add_trace(go.Scatter(x=[e["x0"], e["x1"]], y=[e["y0"], e["y1"]], mode="lines", hoverinfo="skip",
                                 line=dict(color=e["colour"], width=e["width"], dash="dot" if e["dashed"] else None),
                                 showlegend=False))
    for faint in (False, True):
        group = [n for n in v["nodes"] if n["pruned"] == faint]
        if not group:
            continue
        fig.add_trace(go.Scatter(
            x=[n["x"] for n in group], y=[n["y"] for n in group], mode="markers+text", showlegend=False,
            text=[_plotly_text(n["label"]) for n in group], textposition="middle right", opacity=0.6 if faint else 1,
            textfont=dict(color="#777" if faint else "#222", size=11 if faint else 12),
            marker=dict(size=14 if faint else 18, color=[n["fill"] for n in group],
                        symbol=["x" if n["rejected"] else "circle" for n in group],
                        line=dict(color=[n["stroke"] for n in group], width=[n["stroke_width"] for n in group])),
            hovertext=[esc(f"{n['name']}: {n['tip']}").replace("\n", "<br>") for n in group], hoverinfo="text"))
    pruned = any(n["pruned"] for n in v["nodes"])
    for name, color in tree_legend(pruned):  # colour key (legend-only entries)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="circle", size=12, color=color)))
    height = max(260, min(940, 170 + 34 * v["rows"]))
    fig.update_layout(title=dict(text=esc(v["title"]), font=dict(size=13)), plot_bgcolor="white",
                      meta={"cells": [box(n["x"], n["y"], n["pos"], .3) for n in v["nodes"] if not n["pruned"]]},
                      xaxis=dict(title="depth (position after x0)", dtick=1, zeroline=False, range=[-0.3, v["depth"] + 0.8]),
                      yaxis=dict(visible=False, autorange="reversed"),
                      height=height, margin=dict(l=20, r=20, t=70, b=100),
                      legend=dict(orientation="h", y=-55 / (height - 170), yanchor="top", font=dict(size=11)))
    return fig


def _hover(n: dict) -> str:
    """The node's tip, plain text one fact a line, shown after its name ("node 3: ..."); the renderers
    escape it (plotly reads markup in hovers)."""
    parts = [f"token {n['token']} {n['text']!r}", f"depth {n['depth']}, origin {n['origin']}"]
    if n["draft_prob"] is not None:
        r = n.get("rank")
        rank = "" if r is None else f" (its head's rank {r + 1 if number(r) is not None else r})"
        parts.append(f"draft p = {_fixed(n['draft_prob'], 3)}{rank}")
    if n["target_prob"] is not None:
        parts.append(f"target p = {_fixed(n['target_prob'], 3)}")
    if n["accepted"]:
        parts.append("accepted")
    if n["rejected"]:
        parts.append("first rejected")
    return "\n".join(parts)
