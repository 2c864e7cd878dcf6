"""Side by side: two or more runs of one prompt as token strips aligned by output position, and two of
them as linked step views.

Why: "lookahead accepted these 4 tokens at step 9, greedy took 4 steps" should be one picture. Each row is
a run; each cell is one step of that run spanning the output positions it produced (colspan), so a wide
cell is a multi-token step and the columns line up position by position across runs. linked_html() adds
two full step views (any two runs, picked in the page) that follow one output position: click a cell, or
step either view, and the other shows the step that produced the same position (side_by_side.js).
"""
from __future__ import annotations

import uuid

from decoding.methods.registry import BASELINE

from ..common import TraceLike, as_trace, drawn, esc, text_of
from ..palette import CURRENT_COLOR, STEP_COLORS, method_color

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


@drawn
def html(runs: dict[str, TraceLike], max_tokens: int = MAX_TOKENS) -> str:
    """A self-contained HTML table (inline styles only): one row per run, one cell per step."""
    return _strips(data(runs, max_tokens))


def _strips(rows: list[dict]) -> str:
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
            step, k_tok = esc(c["step"]), len(c["tokens"])
            cells.append(f"<td class='ds-sbs-cell' data-step='{step}' data-start='{esc(c['start'])}' "
                         f"data-len='{k_tok}' colspan='{k_tok}' title='step {step}: {k_tok} token(s)' "
                         f"style='background:{STEP_COLORS[k % len(STEP_COLORS)]};border:{2 if wide else 1}px solid "
                         f"{'#222' if wide else '#bbb'};cursor:pointer;padding:2px 4px;white-space:pre;font-family:monospace;"
                         f"font-size:12px;text-align:left'>{text}<br><small style='color:#555'>step {step}"
                         f"</small></td>")
        label = (f"<th style='text-align:right;white-space:nowrap;padding-right:6px;position:sticky;left:0;z-index:1;"
                 f"background:#fff;color:{esc(method_color(r['method']))}'>"
                 f"{esc(r['name'])}<br><small style='color:#555'>{esc(r['tokens'])} tokens · {esc(r['steps'])} steps</small></th>")
        body.append(f"<tr class='ds-sbs-row' data-run='{esc(r['name'])}'>{label}{''.join(cells)}</tr>")
    return (f"<div class='ds-sbs'><div style='font-size:13px;margin:4px 0'><b>Side by side</b>, aligned by output "
            f"position (first {n} tokens): one cell per step; a wide, dark-edged cell is a step that produced "
            f"several tokens at once; click one to show that position's step. <span style='color:#a50f15'>scroll →</span></div>"
            f"<div style='overflow-x:auto;max-width:100%'><table style='border-collapse:separate;border-spacing:2px'>"
            f"<tr><th></th>{head}</tr>{''.join(body)}</table></div></div>")


def default_pair(names: list[str], best: str | None = None) -> tuple[str, str]:
    """Greedy (the baseline every step is measured against) beside `best`, else the first other run."""
    left = BASELINE if BASELINE in names else names[0]
    others = [n for n in names if n != left] or [left]
    return left, best if best in others else others[0]


@drawn
def linked_html(runs: dict[str, TraceLike], best: str | None = None, max_tokens: int = MAX_TOKENS,
                max_steps: int = 400) -> str:
    """Strips of every run, then two step views side by side that follow one output position.

    Every run's step view travels as a <template> (drawn only when picked), so switching the pair is
    instant and a race of five methods costs one compact payload per run. Needs SCRIPT on the page."""
    from ..steps.stepper import step_view_html
    rows = data(runs, max_tokens)
    if not rows:
        return ""
    names = [r["name"] for r in rows]
    left, right = default_pair(names, best)
    tpl = "".join(f"<template class='ds-sbs-t' data-run='{esc(r['name'])}'>"
                  f"{step_view_html(r['trace'], max_steps=max_steps)}</template>" for r in rows)

    def pick(side: str, chosen: str) -> str:
        opts = "".join(f"<option value='{esc(n)}'{' selected' if n == chosen else ''}>{esc(n)}</option>" for n in names)
        return f"<label>{side} <select class='ds-sbs-pick' data-side='{side}'>{opts}</select></label>"

    return (f"<div class='ds-sbs ds-sbs-linked' id='ds-sbs-{uuid.uuid4().hex[:8]}' data-current='{CURRENT_COLOR}'>"
            f"{_strips(rows)}"
            f"<div class='ds-sbs-bar' style='font-size:13px;margin:6px 0;display:flex;flex-wrap:wrap;gap:10px;"
            f"align-items:center'><b>Step views, linked by output position</b>{pick('left', left)}"
            f"{pick('right', right)}<label><input type='checkbox' class='ds-sbs-follow' checked> follow</label>"
            f"<span class='ds-sbs-say' aria-live='polite'></span></div>"
            f"<div class='ds-sbs-cols' style='display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,460px),1fr));"
            f"gap:10px'><div class='ds-sbs-col' data-side='left'></div><div class='ds-sbs-col' data-side='right'></div>"
            f"</div>{tpl}</div>")
