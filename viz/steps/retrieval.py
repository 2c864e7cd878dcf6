"""A retrieval step (REST datastore or SuffixDecoding suffix cache), drawn from the trace alone.

Why its own picture: a retrieval draft has no model behind it, so what explains a step is where the text came
from: the matched suffix (the last tokens of the context), where it matched (datastore file and token offset,
or prompt / output / an earlier run), how many continuations followed it, the trie of their most frequent
prefixes with counts, the draft length the match allowed (SuffixDecoding's max_spec_factor x match length),
and the path the target accepted. Reads step.info["retrieval"] and step.info["tree"] (count per node).
Colours: the palette's copied-text colours (reference text for a datastore, text n-gram for the suffix cache).
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..common import ORIGIN_COLORS, TraceLike, as_trace, drawn, esc, text_of
from ..palette import STATE_COLORS
from .tree import layout
from .window import _empty

SOURCE_COLORS = {"datastore": ORIGIN_COLORS["reference"], "suffix": ORIGIN_COLORS["text_ngram"]}


def data(trace: TraceLike, step_index: int) -> dict | None:
    """The numbers the picture draws: suffix (ids and text), where it matched, counts, draft length, and
    the trie's nodes (token, text, parent, depth, count, accepted). None for a step without a retrieval record."""
    tr = as_trace(trace)
    step = tr.steps[step_index]
    info = step.info or {}
    rec, tree = info.get("retrieval"), info.get("tree") or {}
    if not isinstance(rec, dict) or not tree.get("tokens"):
        return None
    toks, parents = tree["tokens"], tree.get("parents") or [-1]
    depth = tree.get("depth") or [0] * len(toks)
    counts = tree.get("count") or [None] * len(toks)
    path = set(info.get("accepted_path") or [0])
    nodes = [{"id": i, "token": t, "text": text_of(tr, t), "parent": parents[i] if i < len(parents) else -1,
              "depth": depth[i] if i < len(depth) else 0, "count": counts[i] if i < len(counts) else None,
              "accepted": i in path} for i, t in enumerate(toks)]
    return {"step": step.index, "source": rec.get("source"), "suffix": list(rec.get("suffix") or []),
            "suffix_text": "".join(text_of(tr, t) for t in rec.get("suffix") or []),
            "suffix_len": rec.get("suffix_len", 0), "occurrences": rec.get("occurrences", 0), "used": rec.get("used", 0),
            "draft_len": rec.get("draft_len", 0), "at": list(rec.get("at") or []), "accepted": rec.get("accepted"),
            "drafted_from": sources(rec), "nodes": nodes}


SOURCE_WORDS = {"datastore": "the datastore", "prompt": "this prompt", "output": "this run's output",
                "earlier_run": "an earlier run of this session"}


def sources(rec: dict) -> list[str]:
    """Where the step's draft came from: the trace's `drafted_from`, or (older traces) read from `at`."""
    got = rec.get("drafted_from")
    if isinstance(got, list):
        return [str(x) for x in got]
    if rec.get("source") == "datastore":
        return ["datastore"]
    seen = {"earlier_run" if str(a.get("where", "")).startswith("run ") else str(a.get("where", ""))
            for a in rec.get("at") or [] if isinstance(a, dict)}
    return [x for x in SOURCE_WORDS if x in seen]


def headline(d: dict) -> str:
    """One line: the match and what it allowed ('suffix of 3 tokens "x = " found 41x in os.py @1200 ...')."""
    if not d["suffix_len"]:
        return "no suffix of the context occurs in the source: a plain target step"
    at = ", ".join(f"{a.get('where')} @{a.get('offset')}" for a in d["at"][:2])
    src = "datastore" if d["source"] == "datastore" else "suffix cache"
    came = " + ".join(SOURCE_WORDS.get(x, x) for x in d.get("drafted_from") or [])
    src += f" (from {came})" if came and d["source"] != "datastore" else ""
    return (f"{src}: suffix of {d['suffix_len']} tokens \u201c{d['suffix_text'][-40:]}\u201d found {d['occurrences']}x "
            f"({at}); {d['used']} continuations, trie of {len(d['nodes']) - 1} nodes (draft length {d['draft_len']}), "
            f"{d['accepted'] or 0} accepted")


@drawn
def figure(trace: TraceLike, step_index: int) -> go.Figure:
    """The trie left to right by depth; each node labelled with its token and count; the accepted path green."""
    tr = as_trace(trace)
    d = data(tr, step_index)
    if d is None:
        return _empty(f"Step {step_index}: no retrieval recorded")
    nodes = d["nodes"]
    y = layout(nodes)
    fig = go.Figure()
    for n in nodes:
        p = n["parent"]
        if 0 <= p < len(nodes):
            good = n["accepted"] and nodes[p]["accepted"]
            fig.add_trace(go.Scatter(x=[nodes[p]["depth"], n["depth"]], y=[y[p], y[n["id"]]], mode="lines",
                                     line=dict(color=STATE_COLORS["matched"] if good else "#bbb", width=4 if good else 1.2),
                                     hoverinfo="skip", showlegend=False))
    color = SOURCE_COLORS.get(d["source"], "#ccc")
    fig.add_trace(go.Scatter(
        x=[n["depth"] for n in nodes], y=[y[n["id"]] for n in nodes], mode="markers+text", showlegend=False,
        text=[esc(n["text"]) + ("" if n["count"] is None or n["id"] == 0 else f" \u00d7{n['count']}") for n in nodes],
        textposition="middle right",
        marker=dict(size=16, color=[ORIGIN_COLORS["target"] if n["id"] == 0 else color for n in nodes],
                    line=dict(color=[STATE_COLORS["matched"] if n["accepted"] else "#666" for n in nodes],
                              width=[3 if n["accepted"] else 1 for n in nodes])),
        hovertext=[f"{esc(n['text'])}: {n['count']} of {d['used']} continuations" for n in nodes], hoverinfo="text"))
    fig.update_layout(title=dict(text=esc(headline(d)), font=dict(size=12)), height=max(260, 22 * (max(y.values()) + 3)),
                      xaxis=dict(title="depth after x0", dtick=1), yaxis=dict(visible=False),
                      margin=dict(l=20, r=20, t=60, b=40), plot_bgcolor="white")
    return fig


def run_data(trace: TraceLike) -> dict:
    """Per decode step: matched suffix length, draft length allowed, trie nodes verified, tokens accepted."""
    tr = as_trace(trace)
    out = {"steps": [], "suffix_len": [], "draft_len": [], "nodes": [], "accepted": []}
    for s in tr.steps:
        rec = (s.info or {}).get("retrieval")
        if s.kind == "prefill" or not isinstance(rec, dict):
            continue
        out["steps"].append(s.index)
        out["suffix_len"].append(rec.get("suffix_len", 0))
        out["draft_len"].append(rec.get("draft_len", 0))
        out["nodes"].append(max(0, len((s.info.get("tree") or {}).get("tokens") or [0]) - 1))
        out["accepted"].append(len(s.accepted))
    return out


@drawn
def run_figure(trace: TraceLike) -> go.Figure:
    """The run at a glance: how long each step's match was, the draft it allowed, what the target kept."""
    d = run_data(trace)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=d["steps"], y=d["nodes"], name="trie nodes verified", marker_color="#d9d9d9",
                         customdata=d["steps"]))
    fig.add_trace(go.Scatter(x=d["steps"], y=d["suffix_len"], name="matched suffix (tokens)", mode="lines",
                             line=dict(color=SOURCE_COLORS["datastore"], shape="hv"), customdata=d["steps"]))
    fig.add_trace(go.Scatter(x=d["steps"], y=d["accepted"], name="tokens kept", mode="lines+markers",
                             line=dict(color=STATE_COLORS["matched"], shape="hv"), customdata=d["steps"]))
    fig.update_layout(height=280, margin=dict(l=50, r=20, t=40, b=40), plot_bgcolor="white",
                      title=dict(text="retrieval: match length, trie size and tokens kept per step", font=dict(size=13)),
                      xaxis=dict(title="decode step"), yaxis=dict(title="tokens", rangemode="tozero"))
    return fig
