"""Compute against communication per step, for runs past one process.

Tensor parallelism: rank 0's collective time per step (torch.profiler's all-reduce / all-gather events,
step.info["comm_ms"]) stacked on the rest of the step (compute_ms). Lookahead parallelism: one pair of
bars per rank (step.info["lp"]["compute_ms"] / ["comm_ms"], list index = rank), so an idle or slow rank
shows. One-process traces have neither: the figure says so.

    python -m viz comm-steps TRACE.json [--out comm_steps.html]
"""
from __future__ import annotations


import plotly.graph_objects as go

from ..common import TraceLike, as_trace, drawn

COMPUTE, COMM = "#4c78a8", "#e45756"


def data(trace: TraceLike) -> dict | None:
    """{"mode", "steps", "series": [{"name", "compute", "comm"}]} or None for a one-process trace."""
    tr = as_trace(trace)
    dist = tr.config.get("distributed") if isinstance(tr.config, dict) else None
    if not isinstance(dist, dict):
        return None
    steps = [s for s in tr.steps if s.kind == "decode"]
    if dist.get("mode") == "lookahead_parallel":
        world = int(dist.get("world_size", 1))
        series = [{"name": f"rank {r}",
                   "compute": [float((s.info.get("lp") or {}).get("compute_ms", [0] * world)[r]) for s in steps],
                   "comm": [float((s.info.get("lp") or {}).get("comm_ms", [0] * world)[r]) for s in steps]}
                  for r in range(min(world, 64))]
    else:
        series = [{"name": "rank 0", "compute": [float(s.info.get("compute_ms", 0)) for s in steps],
                   "comm": [float(s.info.get("comm_ms", 0)) for s in steps]}]
    return {"mode": dist.get("mode"), "world": dist.get("world_size"), "backend": dist.get("backend"),
            "steps": [s.index for s in steps], "series": series}


def totals(d: dict) -> list[dict]:
    """Per series: total compute and communication ms and the communication share."""
    out = []
    for s in d["series"]:
        c, m = sum(s["compute"]), sum(s["comm"])
        out.append({"name": s["name"], "compute_ms": c, "comm_ms": m, "comm_share": m / (c + m) if c + m else 0.0})
    return out


@drawn
def figure(trace: TraceLike) -> go.Figure:
    d = data(trace)
    fig = go.Figure()
    if d is None:
        fig.update_layout(title="one-process trace: no communication to show (run under torchrun with --tp-plan or --lp)")
        return fig
    for i, s in enumerate(d["series"]):
        group = s["name"]
        fig.add_trace(go.Bar(x=d["steps"], y=s["compute"], name=f"{group} compute", marker_color=COMPUTE,
                             offsetgroup=i, legendgroup=group, opacity=1 - 0.15 * (i % 4)))
        fig.add_trace(go.Bar(x=d["steps"], y=s["comm"], name=f"{group} communication", marker_color=COMM,
                             offsetgroup=i, base=s["compute"], legendgroup=group, opacity=1 - 0.15 * (i % 4)))
    what = "tensor parallelism" if d["mode"] == "tensor" else "lookahead parallelism"
    fig.update_layout(title=f"{what}, {d['world']} processes ({d['backend']}): compute vs communication per step",
                      xaxis_title="step", yaxis_title="ms", barmode="group", plot_bgcolor="white")
    return fig
