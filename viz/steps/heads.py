"""Self-drafting heads over a run: how often each Medusa head (or each EAGLE depth) was right.

vLLM reports this as one counter; here it is per head/depth, plus accepted tokens per step over the run,
so "why is my acceptance length low" has a picture: a head that is rarely right cuts every path through
it. Reads only the trace's tree records (info["tree"], info["accepted_path"]), like viz/steps/tree.py.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..common import TraceLike, as_trace, drawn, esc, plot_value
from ..palette import ORIGIN_COLORS, method_color


def data(trace: TraceLike) -> dict:
    """Per depth d (Medusa: head d): steps whose tree had a node at depth d under an accepted path of
    length d - 1 ("tried"), and those where depth d was accepted; accepted tokens per decode step."""
    tr = as_trace(trace)
    tried: dict[int, int] = {}
    hit: dict[int, int] = {}
    per_step, steps = [], []
    for s in tr.steps:
        if s.kind != "decode":
            continue
        per_step.append(len(s.accepted))
        steps.append(s.index)
        tree, path = (s.info or {}).get("tree"), (s.info or {}).get("accepted_path")
        if not tree or path is None:
            continue
        depth, parents = tree["depth"], tree["parents"]
        a = len(path) - 1
        for d in range(1, min(max(depth), a + 1) + 1):  # d - 1 <= a below: no loop to a crafted depth
            if d - 1 <= a and any(parents[i] == path[d - 1] for i in range(1, len(parents))):
                tried[d] = tried.get(d, 0) + 1
                hit[d] = hit.get(d, 0) + (d <= a)
    ds = sorted(tried)
    # Medusa's nodes come from heads ("head k" origins, one head per depth); EAGLE's from one draft head
    origins = [((s.info or {}).get("tree") or {}).get("origin") for s in tr.steps]
    per_head = any(isinstance(o, str) and o.startswith("head ")
                   for os in origins if isinstance(os, list) for o in os)
    return {"method": tr.method, "per_head": per_head, "depths": ds, "tried": [tried[d] for d in ds], "accepted": [hit[d] for d in ds],
            "rate": [hit[d] / tried[d] for d in ds], "steps": steps, "accepted_per_step": per_step,
            "mean_accepted": sum(per_step) / len(per_step) if per_step else 0.0}


@drawn
def figure(trace: TraceLike) -> go.Figure:
    """Left: acceptance rate per head (Medusa) / depth (EAGLE), given the path reached it. Right:
    accepted tokens per step over the run with its mean."""
    d = data(trace)
    medusa = d["per_head"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.4, 0.6], horizontal_spacing=0.12,
                        subplot_titles=("right when reached, per " + ("head" if medusa else "depth"),
                                        "accepted tokens per step"))
    names = [f"head {k}" if medusa else f"depth {k}" for k in d["depths"]]
    colors = [ORIGIN_COLORS.get(f"head {k}", ORIGIN_COLORS["eagle draft"]) if medusa else ORIGIN_COLORS["eagle draft"]
              for k in d["depths"]]
    fig.add_trace(go.Bar(x=names, y=d["rate"], marker_color=colors, showlegend=False,
                         text=[f"{a}/{t}" for a, t in zip(d["accepted"], d["tried"])], textposition="outside",
                         hovertemplate="%{x}: %{y:.0%} (%{text} steps)<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[plot_value(i) for i in d["steps"]], y=d["accepted_per_step"], mode="lines+markers",
                             showlegend=False,
                             line=dict(color=method_color(d["method"]), shape="hv"),
                             hovertemplate="step %{x}: %{y} tokens<extra></extra>"), row=1, col=2)
    if d["steps"]:
        fig.add_hline(y=d["mean_accepted"], line=dict(color="#999", dash="dot"), row=1, col=2,
                      annotation_text=f"mean {d['mean_accepted']:.2f}", annotation_position="top left")
    fig.update_yaxes(range=[0, 1.15], tickformat=".0%", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", dtick=1, row=1, col=2)
    fig.update_xaxes(title_text="decode step", row=1, col=2)
    fig.update_layout(height=320, margin=dict(l=50, r=20, t=50, b=50), plot_bgcolor="white",
                      title=dict(text=f"{esc(d['method'])}: acceptance by " + ("head" if medusa else "depth"),
                                 font=dict(size=13)))
    return fig
