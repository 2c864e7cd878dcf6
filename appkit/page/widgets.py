"""The page's two field types: a text box that takes text only and a number that shows its range, unclamped.

Apart from ui.py so the generated method controls (method_controls.py) use the same fields as the layout.
"""
from __future__ import annotations

import gradio as gr

from ..public.limits import Limits


def Text(value, **kw) -> gr.Textbox:  # noqa: N802
    """A textbox whose API value must be text: Gradio's own preprocess runs str() on anything, so a JSON
    list sent as the prompt ran as "['a', 'b']"; this one refuses anything but a string by its label.
    (Set on the instance: a gr.Textbox subclass makes Gradio write a .pyi file beside this module.)"""
    box = gr.Textbox(value, **kw)

    def preprocess(payload):
        if payload is not None and not isinstance(payload, str):
            raise gr.Error(f"{box.label} must be text, got {type(payload).__name__}")
        return payload

    box.preprocess = preprocess
    return box


def Int(value, label: str, lim: Limits | None = None, key: str = "", info: str = "", **kw):  # noqa: N802
    """A number field showing its range in `info`; no min/max, so nothing is clamped in the browser."""
    if lim is not None and key:
        info = info or lim.info(key)
    return gr.Number(value, label=label, info=info, **kw)
