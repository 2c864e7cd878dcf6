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
from ..palette import STATE_COLORS, tree_legend
from .window import _empty

NODE_COLORS = {**ORIGIN_COLORS, **ROLE_COLORS}


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
    nodes = [{"id": i, "token": t, "text": text_of(tr, t), "parent": parents[i], "depth": depth[i], "pos": base + depth[i],
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


def prune_label(n: dict, cutoff: float | None) -> str:
    """'p=0.21 < cutoff 0.40' (or just 'pruned' when a probability is missing), as plotly text: the values
    escaped, the '<' ours (no '>' follows it, so plotly reads no tag)."""
    p = n.get("draft_prob")
    if p is None:
        return "pruned"
    p = esc(_fixed(p, 2))
    return f"p={p} < cutoff {esc(_fixed(cutoff, 2))}" if cutoff is not None else f"p={p} (pruned)"


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


@drawn
def figure(trace: TraceLike, step_index: int) -> go.Figure:
    """Nodes left→right by depth, coloured by origin; accepted path in bold green, first rejection ✕."""
    tr = as_trace(trace)
    d = data(tr, step_index)
    if d is None:
        return _empty(f"Step {step_index}: no tree recorded")
    nodes, pruned = d["nodes"], d["pruned"]
    y = layout(nodes + pruned)
    on_path = set(d["accepted_path"])
    fig = go.Figure()
    for n in nodes:
        p = n["parent"]
        if p >= 0:
            good = n["id"] in on_path and p in on_path
            fig.add_trace(go.Scatter(x=[nodes[p]["depth"], n["depth"]], y=[y[p], y[n["id"]]], mode="lines",
                                     line=dict(color=STATE_COLORS["matched"] if good else "#bbb", width=4 if good else 1.2),
                                     hoverinfo="skip", showlegend=False))
    for origin in dict.fromkeys(n["origin"] for n in nodes):
        group = [n for n in nodes if n["origin"] == origin]
        fig.add_trace(go.Scatter(
            x=[n["depth"] for n in group], y=[y[n["id"]] for n in group], mode="markers+text", showlegend=False,
            text=[esc(n["text"]) for n in group], textposition="middle right",
            marker=dict(size=18, color=NODE_COLORS.get(origin, "#ccc"),
                        symbol=["x" if n["rejected"] else "circle" for n in group],
                        line=dict(color=[STATE_COLORS["matched"] if n["accepted"] else STATE_COLORS["rejected"]
                                         if n["rejected"] else "#666"
                                         for n in group], width=[3 if n["accepted"] or n["rejected"] else 1
                                                                 for n in group])),
            hovertext=[_hover(n) for n in group], hoverinfo="text"))
    if pruned:
        _draw_pruned(fig, nodes, pruned, y, d["cutoff"])
    for name, color in tree_legend(bool(pruned)):  # colour key (legend-only entries)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="circle", size=12, color=color)))
    rows = max(y.values()) + 1 if y else 1
    height = max(260, min(940, 170 + 34 * rows))
    rej = d["first_rejected"]
    title = esc(f"Step {d['step']}: {len(nodes)}-node tree, accepted path {len(on_path) - 1 if on_path else 0} deep"
                + (f", first rejected node {rej}" if rej is not None else ""))
    if d["cutoff"] is not None:
        said = (f"{len(pruned)} proposed node(s) below it were pruned (faint)" if d["pruned_recorded"]
                else "pruned nodes were not recorded in this trace")
        title += f"<br><span style='font-size:11px'>confidence cutoff {esc(_fixed(d['cutoff'], 2))}: {said}</span>"
    fig.update_layout(title=dict(text=title, font=dict(size=13)), plot_bgcolor="white",
                      meta={"cells": [box(n["depth"], y[n["id"]], n["pos"], .3) for n in nodes]},
                      xaxis=dict(title="depth (position after x0)", dtick=1, zeroline=False,
                                 range=[-0.3, max(n["depth"] for n in nodes + pruned) + 0.8]),
                      yaxis=dict(visible=False, autorange="reversed"),
                      height=height, margin=dict(l=20, r=20, t=70, b=100),
                      legend=dict(orientation="h", y=-55 / (height - 170), yanchor="top", font=dict(size=11)))
    return fig


def _hover(n: dict) -> str:
    """The node's hover label: every trace value escaped (plotly reads markup in hover text)."""
    parts = [f"node {n['id']} token {n['token']} {n['text']!r}", f"depth {n['depth']}, origin {n['origin']}"]
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
    return "<br>".join(esc(p) for p in parts)


def _draw_pruned(fig: go.Figure, nodes: list[dict], pruned: list[dict], y: dict, cutoff: float | None) -> None:
    """Faint dashed edges and hollow grey markers labelled with their probability against the cutoff."""
    for n in pruned:
        p = nodes[n["parent"]]
        fig.add_trace(go.Scatter(x=[p["depth"], n["depth"]], y=[y[p["id"]], y[n["id"]]], mode="lines",
                                 line=dict(color=STATE_COLORS["pruned"], width=1, dash="dot"), hoverinfo="skip",
                                 showlegend=False))
    fig.add_trace(go.Scatter(
        x=[n["depth"] for n in pruned], y=[y[n["id"]] for n in pruned], mode="markers+text", showlegend=False,
        text=[f"{esc(n['text'])} · {prune_label(n, cutoff)}" for n in pruned], textposition="middle right",
        textfont=dict(color="#888", size=11), opacity=0.6,
        marker=dict(size=14, color="white", line=dict(color=STATE_COLORS["pruned"], width=2)),
        hovertext=[esc(f"pruned child of node {n['parent']}: token {n['token']} {n['text']!r}") + "<br>" +
                   prune_label(n, cutoff) for n in pruned], hoverinfo="text"))
