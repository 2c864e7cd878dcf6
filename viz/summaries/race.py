"""The race: cumulative new tokens against engine time, one line per method (who finishes first).

Moved here from appkit/profile.py so every run chart takes its method colours from viz/palette.py: the
race, the latency chart, the FLOPs chart and the sweep colour "lookahead" the same way.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..common import TraceLike, as_trace, drawn, esc
from ..palette import method_color


def race_data(runs: dict) -> list[dict]:
    """Per method: cumulative seconds (engine step time) and cumulative new tokens, prefill included."""
    out = []
    for name, tr in runs.items():
        tr = as_trace(tr)
        t, n, xs, ys = 0.0, 0, [0.0], [0]
        for s in tr.steps:
            t += s.wall_ms / 1e3
            n += len(s.accepted)
            xs.append(t)
            ys.append(n)
        out.append({"name": name, "seconds": xs, "tokens": ys, "color": method_color(name)})
    return out


@drawn
def race_figure(runs: dict[str, TraceLike]) -> go.Figure:
    """Cumulative new tokens against wall time, one step line per method in the method's colour."""
    fig = go.Figure()
    for d in race_data(runs):
        fig.add_trace(go.Scatter(x=d["seconds"], y=d["tokens"], mode="lines", name=esc(d["name"]),
                                 line=dict(shape="hv", color=d["color"], width=2.5)))
    fig.update_layout(title="Race: tokens produced over time", xaxis_title="seconds (engine step time)",
                      yaxis_title="new tokens", height=360, margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(orientation="h", y=-0.25), plot_bgcolor="white")
    return fig
