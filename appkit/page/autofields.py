"""What the controls show is what runs: the "auto" preset written back into the fields it chose.

Why: with preset "auto" the run used the autotuner's choice (e.g. speculative "staged tree 2,1,1,1,1")
while the fields still showed the page's defaults ("chain, K=4, not staged"), so switching to manual
silently ran something else. After every model event (and when the user picks "auto" again) the fields
of every method whose preset is known for the loaded (model, device) are set to that preset; only
typing into a field switches to manual (programmatic updates do not fire .input).
"""
from __future__ import annotations

import gradio as gr

from ..run import presets
from .lesson import TEACH, TEACHING
from ..run.method_fields import SHAPE, field_values, groups, has_shape, specs  # noqa: F401 - field_values: tests
from ..run.settings import Settings

# The methods whose preset fills their controls: those with controls of their own (medusa and eagle share
# theirs, so neither preset is written into the other's field).
METHODS = tuple(methods[0] for fields, methods in groups() if len(methods) == 1)
# The components this writes, in order (names = Settings fields = Page attributes), then the note: those
# methods' controls (and a token tree's mode radio).
FIELDS = tuple(dict.fromkeys(f for fields, methods in groups() if len(methods) == 1
                             for f in ((SHAPE,) if has_shape(specs()[methods[0]]) else ()) + fields))


def known(h, s: Settings) -> dict:
    """{method: preset params} for the loaded target and this device; {} while the model is not loaded
    (nothing is loaded or tuned here: this runs after model events and on a preset change)."""
    try:
        target = h.model_name(s.target, "target")
        device = h.lim.device(s.device)
    except ValueError:
        return {}
    if not h.cache.cached(target, device, s.dtype):
        return {}
    model = h.cache.get(target, device, s.dtype)[0]
    out = {}
    for m in METHODS:
        pr = presets.cached(target, model, m)
        if pr is not None:
            out[m] = pr["params"]
    return out


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
        return [gr.skip()] * len(FIELDS) + ["manual: the values below run as shown"]
    chosen = known(h, s)
    vals: dict = {}
    for m, params in chosen.items():
        vals.update(field_values(m, params))
    note = ("auto chose: " + " · ".join(f"{m.replace('_', ' ')} **{presets.describe(m, p)}**" for m, p in chosen.items())
            if chosen else "auto: tuned for this model and device on the first run (the fields then show its choice)")
    return [gr.update(value=vals[f]) if f in vals else gr.skip() for f in FIELDS] + [note]
