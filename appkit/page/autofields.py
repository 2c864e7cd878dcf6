"""What the controls show is what runs: the "auto" preset written back into the fields it chose.

Why: with preset "auto" the run used the autotuner's choice (e.g. speculative "staged tree 2,1,1,1,1")
while the fields still showed the page's defaults ("chain, K=4, not staged"), so switching to manual
silently ran something else. After every model event (and when the user picks "auto" again) the fields
of every method whose preset is known for the loaded (model, device) are set to that preset (controls that
methods share show the selected method's, and follow the method list); "auto chose:" names every method's
preset, per-step sizing and cut included, and "manual" says which of them no field carries. Only typing into
a field switches to manual (programmatic updates do not fire .input).
"""
from __future__ import annotations

import gradio as gr

from ..run import presets
from .lesson import TEACH, TEACHING
from ..run.method_fields import SHAPE, field_values, groups, has_shape, specs, ui_knobs  # noqa: F401 - field_values: tests
from ..run.settings import Settings

# The methods whose preset fills their controls: those with controls of their own; where methods share their
# controls (medusa, eagle: one heads tree budget), the selected method's preset fills them.
METHODS = tuple(methods[0] for fields, methods in groups() if len(methods) == 1)
SHARED = tuple((fields, methods) for fields, methods in groups() if len(methods) > 1)
SHARED_METHODS = tuple(m for _, methods in SHARED for m in methods)
# The components this writes, in order (names = Settings fields = Page attributes), then the note: those
# methods' controls (and a token tree's mode radio), then the shared groups' controls.
FIELDS = tuple(dict.fromkeys([f for fields, methods in groups() if len(methods) == 1
                              for f in ((SHAPE,) if has_shape(specs()[methods[0]]) else ()) + fields]
                             + [f for fields, _ in SHARED for f in fields]))


# What a preset may set beside the controls that changes what a step drafts, in words.
PRESET_WORDS = {"confidence": lambda v: f"cut {v:g}", "adaptive": lambda v: "per-step sizing",
                "draft_vocab": lambda v: f"draft vocabulary of {v:,} tokens"}


def not_fields(method: str, params: dict) -> list[str]:
    """What a preset sets that no control of the method shows (a cut, per-step sizing), in words: manual runs
    without them."""
    shown_here = {k.name for k in ui_knobs(specs()[method])}
    return [say(params[name]) for name, say in PRESET_WORDS.items() if params.get(name) and name not in shown_here]


def known(h, s: Settings) -> dict:
    """{method: preset params} for the loaded target and this device; {} while the model is not loaded
    (nothing is loaded or tuned here: this runs after model events and on a preset change)."""
    try:
        target = h.model_name(s.target, "target")
        device = h.lim.device(s.device)
    except ValueError:
        return {}
    if not h.cache.cached(target, device, s.dtype, s.kernel):
        return {}
    model = h.cache.get(target, device, s.dtype, s.kernel)[0]
    out = {}
    for m in METHODS + tuple(m for _, methods in SHARED for m in methods):
        pr = presets.cached(target, model, m)
        if pr is not None:
            out[m] = pr["params"]
    return out


def first(target: str, device: str = "auto") -> dict:
    """{method: params} the first auto run on `target` will use, before it is loaded (presets.before_load: the
    run's own lookup, on a CPU); {} on a GPU or where the first run tunes."""
    return {} if str(device).startswith("cuda") else presets.before_load(target, METHODS + SHARED_METHODS)


def field_map(chosen: dict, method: str) -> dict:
    """{field: value} of the presets `chosen` ({method: params}): each METHODS preset in its own fields; a shared
    group's fields take the selected method's preset, else the group's first known one."""
    vals: dict = {}
    for m, params in chosen.items():
        if m in METHODS:
            vals.update(field_values(m, params))
    for _, methods in SHARED:
        m = method if method in methods and method in chosen else next((x for x in methods if x in chosen), None)
        if m is not None:
            vals.update(field_values(m, chosen[m]))
    return vals


def first_note(found: dict) -> str:
    """The note under the preset before a model event: what the fields show."""
    if found:
        return "auto: the fields show what the first run will use; after each run, what auto chose"
    return "auto: tuned for this model and device on the first run (the fields then show its choice)"


def shown(h, *values) -> list:
    """gr.update per FIELDS component, then the note under the preset: the auto values, or skips."""
    s = Settings.from_values(values)
    if s.preset == TEACH:  # the lesson's values go into the fields, so the run and the stats line agree
        vals = {}
        for m, params in TEACHING.items():
            vals.update(field_values(m, params))
        note = "teaching preset: the lesson's values, chosen to show the picture, not for speed"
        return [gr.update(value=vals[f]) if f in vals else gr.skip() for f in FIELDS] + [note]
    if s.preset != "auto":
        note = "manual: the values below run as shown"
        pr = known(h, s).get(s.method)
        extra = not_fields(s.method, pr) if pr and s.method in specs() else []
        if extra:
            note += f" ({s.method.replace('_', ' ')}: auto's {', '.join(extra)} are not fields here, so manual runs without them)"
        return [gr.skip()] * len(FIELDS) + [note]
    chosen = known(h, s)
    before = not chosen  # nothing loaded yet: what the first run will find, by the run's own lookup
    if before:
        try:
            chosen = first(h.model_name(s.target, "target"), h.lim.device(s.device))
        except ValueError:
            chosen = {}
    vals = field_map(chosen, s.method)
    if before:
        return [gr.update(value=vals[f]) if f in vals else gr.skip() for f in FIELDS] + [first_note(chosen)]
    note = ("auto chose: " + " · ".join(f"{m.replace('_', ' ')} **{presets.describe(m, p)}**" for m, p in chosen.items())
            if chosen else first_note({}))
    return [gr.update(value=vals[f]) if f in vals else gr.skip() for f in FIELDS] + [note]
