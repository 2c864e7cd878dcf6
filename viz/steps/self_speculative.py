"""Self-speculative decoding, one step and the whole run, drawn only from the trace.

Step picture: every drafted node with the confidence the shallow draft (layers 0..k-1 + adapter) gave it,
the early-stop threshold it was compared with, which nodes the target accepted, where drafting stopped
early; beside it the step's draft milliseconds against the target's (the cost that decides whether the
method pays). Run picture: draft and target milliseconds per step with the tokens each step kept.
Reads info["tree"], info["self_spec"], info["accepted_path"], info["draft_ms"], info["target_ms"].
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..common import TraceLike, as_trace, drawn, esc, step_at, text_of
from ..palette import STATE_COLORS, method_color

DRAFT_COLOR, TARGET_COLOR = "#fd8d3c", "#4d4d4d"


def step_data(trace: TraceLike, i: int) -> dict:
    """One step's drafted nodes: token text, depth, draft confidence, state (accepted / first mismatch /
    not checked), the early stop, the draft's and the target's milliseconds."""
    tr = as_trace(trace)
    s = step_at(tr, i)
    info = s.info or {}
    tree, ss = info.get("tree") or {}, info.get("self_spec") or {}
    path = set(info.get("accepted_path") or [0])
    nodes = []
    for n in range(1, len(tree.get("tokens", []))):
        state = "matched" if n in path else "rejected" if tree["parents"][n] in path else "unchecked"
        nodes.append({"node": n, "text": text_of(tr, tree["tokens"][n]), "depth": tree["depth"][n],
                      "conf": (ss.get("draft_conf") or [None] * (n + 1))[n], "state": state})
    return {"step": s.index, "exit_layer": ss.get("exit_layer"), "layers": ss.get("layers"),
            "stop": ss.get("stop"), "early_stop": ss.get("early_stop", False), "stopped_at": ss.get("stopped_at"),
            "nodes": nodes, "accepted": len(s.accepted), "draft_ms": float(info.get("draft_ms", 0.0)),
            "target_ms": float(info.get("target_ms", 0.0)), "draft_forwards": info.get("draft_forwards", 0)}


@drawn
def figure(trace: TraceLike, i: int) -> go.Figure:
    """Left: drafted nodes' confidence (colour = verdict), the stop threshold, the early stop. Right: the
    step's draft ms against the target's ms."""
    d = step_data(trace, i)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], horizontal_spacing=0.1,
                        subplot_titles=("draft confidence per node", "step time (ms)"))
    labels = [f"{n['node']}: {esc(n['text'])}" for n in d["nodes"]]
    fig.add_trace(go.Bar(x=labels, y=[n["conf"] or 0 for n in d["nodes"]], showlegend=False,
                         marker_color=[STATE_COLORS[n["state"]] for n in d["nodes"]],
                         marker_line=dict(color="#636363", width=1),
                         customdata=[[n["depth"], n["state"]] for n in d["nodes"]],
                         hovertemplate="%{x}<br>depth %{customdata[0]}, %{customdata[1]}<br>"
                                       "confidence %{y:.3f}<extra></extra>"), row=1, col=1)
    if d["stop"] is not None:
        fig.add_hline(y=d["stop"], line=dict(color="#999", dash="dot"), row=1, col=1,
                      annotation_text=f"stop {d['stop']:g}", annotation_position="top left")
    if d["early_stop"] and d["stopped_at"] is not None and d["stopped_at"] <= len(labels):
        fig.add_annotation(x=labels[d["stopped_at"] - 1], y=1.05, text="early stop", showarrow=False, row=1, col=1)
    fig.add_trace(go.Bar(x=["draft", "target"], y=[d["draft_ms"], d["target_ms"]], showlegend=False,
                         marker_color=[DRAFT_COLOR, TARGET_COLOR],
                         text=[f"{d['draft_forwards']} forwards", "1 forward"], textposition="outside",
                         hovertemplate="%{x}: %{y:.1f} ms (%{text})<extra></extra>"), row=1, col=2)
    fig.update_yaxes(range=[0, 1.12], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    depth = f"exit layer {d['exit_layer']} of {d['layers']} + adapter" if d["exit_layer"] else "no draft"
    fig.update_layout(height=320, margin=dict(l=50, r=20, t=60, b=60), plot_bgcolor="white",
                      title=dict(text=f"step {d['step']}: {depth}; kept {d['accepted']} tokens", font=dict(size=13)))
    return fig


def run_data(trace: TraceLike) -> dict:
    tr = as_trace(trace)
    dec = [s for s in tr.steps if s.kind == "decode"]
    return {"steps": [s.index for s in dec], "draft_ms": [float(s.info.get("draft_ms", 0.0)) for s in dec],
            "target_ms": [float(s.info.get("target_ms", 0.0)) for s in dec], "accepted": [len(s.accepted) for s in dec],
            "early_stop": [bool((s.info.get("self_spec") or {}).get("early_stop")) for s in dec]}


@drawn
def run_figure(trace: TraceLike) -> go.Figure:
    """Per decode step: draft and target ms stacked (bars), tokens kept (line, right axis)."""
    tr = as_trace(trace)
    d = run_data(tr)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=d["steps"], y=d["draft_ms"], name="draft ms", marker_color=DRAFT_COLOR))
    fig.add_trace(go.Bar(x=d["steps"], y=d["target_ms"], name="target ms", marker_color=TARGET_COLOR))
    fig.add_trace(go.Scatter(x=d["steps"], y=d["accepted"], name="tokens kept", mode="lines+markers",
                             line=dict(color=method_color(tr.method), shape="hv")), secondary_y=True)
    fig.update_layout(barmode="stack", height=300, margin=dict(l=50, r=50, t=40, b=40), plot_bgcolor="white",
                      title=dict(text="self_speculative: draft cost against the target's step", font=dict(size=13)))
    fig.update_xaxes(title_text="decode step")
    fig.update_yaxes(title_text="ms", secondary_y=False)
    fig.update_yaxes(title_text="tokens", rangemode="tozero", dtick=1, secondary_y=True)
    return fig
