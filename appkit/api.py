"""The app's scriptable API: named parameters, labelled returns, errors a client sees.

Why: the handlers take the page's values positionally (`*values`, Settings' order), which Gradio would
publish as param_0 … param_22. `named()` gives each handler the signature Gradio reads its API from (the
Settings fields, then the event's extras), so `client.predict(prompt=..., method=..., api_name="/run")`
works; `label_outputs()` names the unlabelled outputs, so returns are not value_55. The preset radio
starts empty in the config (the page sets "auto" on load): an API call that names no preset runs the
W/N/G/K/tree values it sends ("manual"); `preset="auto"` asks for the tuned preset.
"""
from __future__ import annotations

import inspect

import gradio as gr

from .run.settings import FIELDS

P = inspect.Parameter
# Output components without a label of their own: what the API calls them (never shown on the page).
OUTPUT_LABELS = {"msg": "message", "stats": "status", "step_view": "step view (HTML)",
                 "race_md": "status", "race_sbs": "side by side (HTML)", "prof_md": "status", "sw_status": "status", "budget_md": "query budget",
                 "model_info": "loaded models", "rp_msg": "message", "rp_stats": "replay statistics",
                 "rp_view": "replay step view (HTML)"}


def named(fn, extra: tuple[str, ...] = (), request: bool = True):
    """fn(request, *values) (or fn(*values)) with the signature (request, target, draft, …, *extra)."""
    params = [P("request", P.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request)] if request else []
    params += [P(name, P.POSITIONAL_OR_KEYWORD, default=None) for name in (*FIELDS, *extra)]
    if inspect.isgeneratorfunction(fn):
        def call(*a, **k):
            yield from fn(*a, **k)
    else:
        def call(*a, **k):
            return fn(*a, **k)
    call.__signature__ = inspect.Signature(params)
    call.__annotations__ = {"request": gr.Request} if request else {}
    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "handler")
    call.__doc__ = fn.__doc__
    return call


def label_outputs(page) -> None:
    """Name the unlabelled outputs for the API; their label stays hidden on the page."""
    for attr, label in OUTPUT_LABELS.items():
        comp = getattr(page, attr, None)
        if comp is not None and not getattr(comp, "label", None):
            comp.label = label
            comp.show_label = False


def preset_from_page(demo: gr.Blocks, page) -> None:
    """The preset radio has no value in the config (so the API's default is "no preset" = manual); the
    page selects "auto" as it loads, as before."""
    page.preset.value = None
    demo.load(lambda: "auto", None, [page.preset], queue=False, api_visibility="private")
