"""Shared helpers for the pictures: accept a trace in any form, token text, the origin palette.

Every view reads the Trace (or its JSON dict / file) and nothing else; decoding is never re-run here.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Union

from decoding.trace import Trace

from .palette import ORIGIN_COLORS, ORIGIN_LABELS, PLOTLY_CONFIG, ROLE_COLORS  # noqa: F401  (one palette)

TraceLike = Union[Trace, dict, str, Path]


def as_trace(trace: TraceLike) -> Trace:
    """Trace objects pass through; dicts and JSON paths are loaded with the schema check."""
    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, dict):
        return Trace.from_dict(trace)
    return Trace.load(trace)


def text_of(trace: Trace, tok: int) -> str:
    """Token text for display; tokenizer-less traces fall back to <id>. Whitespace made visible."""
    t = trace.token_text(int(tok))
    return t.replace("\n", "\u21b5").replace(" ", "\u2423") if t.strip() == "" else t


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def safe_json(obj: object) -> str:
    """JSON that is safe inside <script> and inside Gradio's `${value}` template (no </, $, backtick)."""
    s = json.dumps(obj, separators=(",", ":"))
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
        .replace("$", "\\u0024").replace("`", "\\u0060").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def step_at(trace: Trace, step_index: int):
    """The step with that index (steps are stored in order; negative indexes count from the end)."""
    return trace.steps[step_index]


def box(x: float, y: float, pos: int | None, half: float = .5) -> list:
    """A selectable box [x0, x1, y0, y1, position] in a figure's layout.meta["cells"]: the step script
    outlines every box whose absolute position is the selected token's (linked views)."""
    return [x - half, x + half, y - half, y + half, pos]


def rel_label(role: str, slot: list, rel_pos: int) -> str:
    """Short row/column label: role + position relative to x0 (the paper's mask labels)."""
    if role == "window":
        name = f"L{slot[0]}" if slot and not (slot[0] == 0 and slot[1] == 0) else "x0"
    elif role == "candidate":
        name = f"c{slot[0]}" if slot else "c"
    elif role == "draft":
        name = "d"
    elif role == "stage2":
        name = "s2"
    elif role == "prompt":
        name = "p"
    else:
        name = role
    return f"{name}·{rel_pos}"
