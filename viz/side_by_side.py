"""Side by side: two or more runs of one prompt as token strips aligned by output position.

Why: "lookahead accepted these 4 tokens at step 9, greedy took 4 steps" should be one picture. Each row is
a run; each cell is one step of that run spanning the output positions it produced (colspan), so a wide
cell is a multi-token step and the columns line up position by position across runs.
"""
from __future__ import annotations

from .common import TraceLike, as_trace, esc, text_of
from .palette import STEP_COLORS, method_color

MAX_TOKENS = 96


def data(runs: dict[str, TraceLike], max_tokens: int = MAX_TOKENS) -> list[dict]:
    """Per run: [(step index, first output position, tokens)] for the first max_tokens output positions."""
    out = []
    for name, tr in runs.items():
        tr = as_trace(tr)
        cells, pos = [], 0
        for s in tr.steps:
            if pos >= max_tokens:
                break
            toks = list(s.accepted)[: max_tokens - pos]
            if toks:
                cells.append({"step": s.index, "start": pos, "tokens": toks})
                pos += len(toks)
        out.append({"name": name, "method": tr.method, "cells": cells, "steps": len(cells), "tokens": pos,
                    "trace": tr})
    return out


def html(runs: dict[str, TraceLike], max_tokens: int = MAX_TOKENS) -> str:
    """A self-contained HTML table (inline styles only): one row per run, one cell per step."""
    rows = data(runs, max_tokens)
    if not rows:
        return ""
    n = max(r["tokens"] for r in rows)
    head = "".join(f"<th style='font-weight:normal;color:#777;font-size:10px'>{i}</th>" for i in range(n))
    body = []
    for r in rows:
        cells = []
        for k, c in enumerate(r["cells"]):
            text = "".join(esc(text_of(r["trace"], t)) for t in c["tokens"])
            wide = len(c["tokens"]) > 1
            cells.append(f"<td colspan='{len(c['tokens'])}' title='step {c['step']}: {len(c['tokens'])} token(s)' "
                         f"style='background:{STEP_COLORS[k % len(STEP_COLORS)]};border:{2 if wide else 1}px solid "
                         f"{'#222' if wide else '#bbb'};padding:2px 4px;white-space:pre;font-family:monospace;"
                         f"font-size:12px;text-align:left'>{text}<br><small style='color:#555'>step {c['step']}"
                         f"</small></td>")
        label = (f"<th style='text-align:right;white-space:nowrap;padding-right:6px;color:{method_color(r['method'])}'>"
                 f"{esc(r['name'])}<br><small style='color:#555'>{r['tokens']} tokens · {r['steps']} steps</small></th>")
        body.append(f"<tr data-run='{esc(r['name'])}'>{label}{''.join(cells)}</tr>")
    return (f"<div class='ds-sbs'><div style='font-size:13px;margin:4px 0'><b>Side by side</b>, aligned by output "
            f"position (first {n} tokens): one cell per step; a wide, dark-edged cell is a step that produced "
            f"several tokens at once. <span style='color:#a50f15'>scroll →</span></div>"
            f"<div style='overflow-x:auto;max-width:100%'><table style='border-collapse:separate;border-spacing:2px'>"
            f"<tr><th></th>{head}</tr>{''.join(body)}</table></div></div>")
