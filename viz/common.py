"""Shared helpers for the pictures: accept a trace in any form, token text, the origin palette.

Every view reads the Trace (or its JSON dict / file) and nothing else; decoding is never re-run here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

from decoding.trace import Trace

from .escape import colour, drawn, esc, number, plot_value, safe_json  # noqa: F401  (the one escaper)
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
    """Token text for display; tokenizer-less traces fall back to <id>. Whitespace made visible. A token
    that is not an id (a crafted trace) is shown as <its text>; escaping is the writer's job."""
    try:
        tok = int(tok)
    except (TypeError, ValueError, OverflowError):
        return f"<{tok}>"
    t = str(trace.vocab.get(str(tok), f"<{tok}>")) if isinstance(trace.vocab, dict) else f"<{tok}>"
    return t.replace("\n", "\u21b5").replace(" ", "\u2423") if t.strip() == "" else t


def step_at(trace: Trace, step_index: int):
    """The step with that index (steps are stored in order; negative indexes count from the end)."""
    return trace.steps[step_index]


def box(x: float, y: float, pos: int | None, half: float = .5) -> list:
    """A selectable box [x0, x1, y0, y1, position] in a figure's layout.meta["cells"]: the step script
    outlines every box whose absolute position is the selected token's (linked views)."""
    return [x - half, x + half, y - half, y + half, pos]


def is_parent(p: object, i: int) -> bool:
    """A parent is a smaller query index (decoding/engine/masks.py's rule): a cycle, a self-loop or a parent
    past the query (a crafted trace) is not followed, so no walk up a step's tree can loop or index out."""
    return isinstance(p, int) and not isinstance(p, bool) and 0 <= p < i


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
