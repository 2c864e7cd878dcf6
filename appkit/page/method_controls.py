"""The Run tab's method list and each method's controls, generated from the method specs (no method is named).

Why generated: a method's knobs (decoding/methods/spec.py) carry its label, range, default and help; ui=True
makes one a control here. Methods with the same controls share a group (medusa, eagle); a group is shown with
its methods only. A token tree's shape (chain K / tree widths / node budget) is one radio over its knobs. The
resources a method names beside its controls (a heads or adapter folder, a retrieval source) are shown by
what its spec needs or takes. Each method's colour marks its entry in the method list.
"""
from __future__ import annotations

from dataclasses import fields

import gradio as gr

from . import autofields
from .explain import explain

from ..run.method_fields import (DEFAULT_METHOD, ELEM_ID, SHAPE, SHAPE_MODES, can, field_of, field_values, groups,
                            has_shape, method_choices, range_key, specs, ui_knobs)
from .widgets import Int, Text

SPEC_MODES = [("chain (K tokens)", "chain"), ("tree (widths per depth)", "tree"), ("dynamic tree (budget)", "budget")]
DATASTORES = [("suffix cache: the prompt, the output so far, earlier runs (SuffixDecoding)", ""),
              ("shipped datastore for SmolLM2-135M-Instruct: its own chat answers + the stdlib up to dbm/ (REST)",
               "shipped")]


def initial(settings_cls, target: str | None = None) -> dict:
    """The fields' first values: the settings' defaults, then the auto preset of every method whose preset fills
    its fields, as the first run on `target` will find it (appkit/run/presets.py before_load: the run's own
    lookup, so the default model shows its own CPU preset, not the embedded model's; without a target, the
    embedded model's)."""
    from decoding.models import EMBEDDED_TARGET
    out = {f.name: f.default for f in fields(settings_cls)}
    return {**out, **autofields.field_map(autofields.first(target or EMBEDDED_TARGET), DEFAULT_METHOD)}


def fractional(k) -> bool:
    """A number knob whose range is not whole numbers (a probability cutoff)."""
    return k.lo is not None and k.hi is not None and not (isinstance(k.lo, int) and isinstance(k.hi, int))


def elem_id(field: str) -> str:
    return ELEM_ID.get(field, "ds-knob-" + field.replace("_", "-"))


def control(k, value, lim):
    """One knob as a page control: a switch, a number showing its range (never clamped in the browser: the
    handlers say what is wrong), or text (tree widths "3,2,1")."""
    name = field_of(k.name)
    if isinstance(k.default, bool):
        return gr.Checkbox(bool(value), label=k.label, info=k.help, elem_id=elem_id(name))
    if k.kind == "widths":
        return Text(value, label=k.label, elem_id=elem_id(name),
                    info=f"{k.help}; each {lim.info('tree_width')}, ≤ {lim.hi('tree_depth')} depths")
    if k.lo is not None and k.hi is not None:
        key = range_key(k.name)
        span = lim.info(key) if key in lim.ranges else f"{k.lo:g}–{k.hi:g}"
        return Int(value, k.label, info=f"{span}: {k.help}", elem_id=elem_id(name), min_width=80,
                   **({"step": k.step} if k.step else {}))
    return Text("" if value is None else str(value), label=k.label, info=k.help, elem_id=elem_id(name))


def method_controls(p, lim, shown: dict) -> None:
    """Inside the open settings column: one group per set of controls (p.method_groups: (group, methods)),
    each control kept on the page under its Settings field's name; then the resources' groups."""
    p.method_groups = []
    for _, methods in groups():
        sp = specs()[methods[0]]
        knobs = ui_knobs(sp)
        mode = shown.get(SHAPE, "chain")
        shaped = {n for names in SHAPE_MODES.values() for n in names} if has_shape(sp) else set()
        with gr.Group(visible=DEFAULT_METHOD in methods) as group:
            if shaped:
                setattr(p, SHAPE, gr.Radio(SPEC_MODES, value=mode, label=f"{sp.label} mode"))
            numbers = [k for k in knobs if not isinstance(k.default, bool) and not fractional(k)]
            for row in (numbers, [k for k in knobs if k not in numbers]):  # numbers and text, then switches
                if row:
                    with gr.Row():
                        for k in row:
                            made = control(k, shown.get(field_of(k.name)), lim)
                            made.visible = k.name not in shaped or k.name in SHAPE_MODES[mode]
                            setattr(p, field_of(k.name), made)
            if DEFAULT_METHOD in methods:
                p.tune_btn = gr.Button("Tune the auto preset for this model and device now", size="sm")
        p.method_groups.append((group, methods))
    with gr.Group(visible=False) as p.hd_group:
        with gr.Row():
            p.heads = Text("", label="heads folder (self-speculative: adapter folder)",
                           placeholder="empty = the ones shipped for the model (assets/heads)",
                           info="made by python -m decoding train-heads for THIS target model")
            p.typical = gr.Checkbox(False, label="typical acceptance (NOT exact)",
                                    info="sampling only (temperature > 0): Medusa's rule accepts any "
                                         "plausible drafted token; longer steps, but the text no longer "
                                         "follows the target's distribution")
    with gr.Group(visible=False) as p.rt_group:
        p.datastore = gr.Dropdown(DATASTORES, value="", label="retrieval source",
                                  info="the shipped datastore fits SmolLM2-135M-Instruct's tokenizer only")
    p.resource_groups = [(p.hd_group, tuple(m for m, s in specs().items() if {"heads", "adapter"} & set(s.needs))),
                         (p.rt_group, tuple(m for m in specs() if can(m, "datastore")))]


def control_fields() -> list[str]:
    """Every method control's page field, in page order (the mode radio first where there is one)."""
    out = []
    for names, methods in groups():
        if has_shape(specs()[methods[0]]):
            out.append(SHAPE)
        out += [f for f in names if f not in out]
    return out


def on_method(p):
    """The handler of a method pick: its groups shown, every other group hidden, its explanation."""
    shown = p.method_groups + p.resource_groups

    def pick(method: str):
        return [gr.update(visible=method in methods) for _, methods in shown] + [explain(method)]
    return pick, [g for g, _ in shown] + [p.explain_md]


def on_shape(mode: str) -> list:
    """The mode radio shows its knobs' controls (the draft_tokens / widths / budget fields)."""
    names = [n for n in dict.fromkeys(n for ns in SHAPE_MODES.values() for n in ns)]
    return [gr.update(visible=n in SHAPE_MODES.get(mode, ())) for n in names]


def shape_fields() -> list[str]:
    return [field_of(n) for n in dict.fromkeys(n for ns in SHAPE_MODES.values() for n in ns)]


def method_css() -> str:
    """Each method's colour beside its name in the method list (Gradio marks a choice by its label)."""
    rules = []
    for label, name in method_choices():
        sel = label.replace("\\", "\\\\").replace('"', '\\"')
        rules.append(f'#ds-method label[data-testid="{sel}-radio-label"]'
                     f'{{border-left:4px solid {specs()[name].colour}}}')
    return "\n".join(rules) + "\n"
