"""The page's view of the method specs: which methods it lists, which of their parameters are controls, and
the page field each one fills.

Why read from the specs (decoding/methods/registry.py): a method declares its parameters once (a knob's
label, range, default and help, ui=True for a control); the method list, each method's control group, the
checks of the values and the preset values written back into the fields follow from there, so a new method
appears on the page with no edit to the app. Nothing here compares a method's name: what differs between
methods is read from the spec (its knobs, needs, presets).
"""
from __future__ import annotations

from decoding.methods import registry
from decoding.methods.spec import CAPABILITIES, Knob, MethodSpec

# The elem_ids the browser tests and screenshots find the controls by (others: ds-knob-<field>).
ELEM_ID = {"window": "ds-W", "ngram": "ds-N", "guesses": "ds-G", "confidence": "ds-cutoff"}
# A token tree's shape (a knob of kind "widths" beside a chain length and a node budget) is picked with one
# radio, the page's "mode": each mode shows and sends its own knobs.
SHAPE = "spec_mode"
SHAPE_MODES = {"chain": ("draft_tokens",), "tree": ("tree",), "budget": ("tree_budget", "draft_tokens")}
# Knobs whose value is the user's under every preset (the tuner never picks them).
USER_KNOBS = ("confidence",)
# A resource a method needs, as the method list names it.
NEEDS_WORDS = {"draft_model": "draft model", "heads": "heads", "adapter": "adapter"}
DEFAULT_METHOD = "lookahead"  # the method the page opens on (the one it is about); greedy = registry.BASELINE


def specs() -> dict[str, MethodSpec]:
    """The registry's specs, read when asked (a method registered later is listed too)."""
    return registry.SPECS


def spec(method: str) -> MethodSpec | None:
    return registry.SPECS.get(method) if isinstance(method, str) else None


def is_baseline(method: str) -> bool:
    return method == registry.BASELINE


def accelerated() -> list[str]:
    """Every method but the baseline, in registry order (the Race's choices)."""
    return [m for m in registry.SPECS if not is_baseline(m)]


def ui_knobs(s: MethodSpec) -> list[Knob]:
    return [k for k in s.knobs() if k.ui]


def declared(attr: str) -> dict[str, str]:
    """Knob name -> what its knob declares for the page ("page_field": the page field, where one older than
    the specs has another name; "page_range": the app's range key), the first declaring method's, in order."""
    out: dict[str, str] = {}
    for s in registry.SPECS.values():
        for k in s.knobs():
            if getattr(k, attr):
                out.setdefault(k.name, getattr(k, attr))
    return out


def field_of(name: str) -> str:
    """The page field (= Settings field = API parameter name) that holds knob `name`."""
    return declared("page_field").get(name, name)


def range_key(name: str) -> str:
    """The app's range (appkit/public/limits.py, public caps included) of knob `name`."""
    return declared("page_range").get(name, name)


def has_shape(s: MethodSpec) -> bool:
    """Its spec declares the tree-shape radio (chain / tree widths / budget, one radio picks)."""
    return s.can("tree_shape")


def needing(resource: str) -> tuple[str, ...]:
    return tuple(n for n, s in registry.SPECS.items() if resource in s.needs)


def needs(method: str, resource: str) -> bool:
    """The method's spec needs `resource` ("draft_model", "heads", "adapter"); False for an unknown name."""
    s = spec(method)
    return s is not None and resource in s.needs


def can(method: str, capability: str) -> bool:
    """The method's spec declares `capability` (decoding/methods/spec.py CAPABILITIES: reference texts, the
    retrieval source, the session's history, typical acceptance, the tree-shape radio); False for an unknown
    method. Declared, never inferred from a parameter's name: a new method's `datastore` knob is its own."""
    s = spec(method)
    return s is not None and s.can(capability)


def knob_fields() -> dict[str, Knob]:
    """Page field -> the knob it shows (the first method's, where several share a field), in registry order."""
    out: dict[str, Knob] = {}
    for s in registry.SPECS.values():
        for k in ui_knobs(s):
            out.setdefault(field_of(k.name), k)
    return out


def choice_label(s: MethodSpec) -> str:
    """'lookahead (W, N, G)', 'speculative (K, draft model)': the label, its one-letter knobs, what it needs."""
    letters = [k.label.split()[0] for k in ui_knobs(s) if len(k.label.split()[0]) == 1 and k.label[0].isupper()]
    extra = list(dict.fromkeys(letters)) + [NEEDS_WORDS.get(n, n.replace("_", " ")) for n in s.needs]
    return s.label + (f" ({', '.join(extra)})" if extra else "")


def method_choices() -> list[tuple[str, str]]:
    return [(choice_label(s), n) for n, s in registry.SPECS.items()]


def groups() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(page fields, methods showing them): methods with the same controls share one group (medusa, eagle)."""
    out: dict[tuple[str, ...], list[str]] = {}
    for n, s in registry.SPECS.items():
        fields = tuple(field_of(k.name) for k in ui_knobs(s))
        if fields:
            out.setdefault(fields, []).append(n)
    return [(f, tuple(m)) for f, m in out.items()]


def tune_fields() -> list[str]:
    """The page fields the Tune button writes: the controls of the page's first method (W, N, G)."""
    return [field_of(k.name) for k in ui_knobs(registry.SPECS[DEFAULT_METHOD])]


def field_values(method: str, params: dict) -> dict:
    """A method's parameters (a preset) as the page's field values: only its controls' fields; a token tree's
    shape also sets the mode radio and shows widths as text ("3,2,1")."""
    s = spec(method)
    if s is None:
        return {}
    mine = {k.name: k for k in ui_knobs(s)}
    out: dict = {}
    if has_shape(s):
        tree = CAPABILITIES["tree_shape"]
        mode = "tree" if params.get(tree) else "budget" if params.get("tree_budget") else "chain"
        out[SHAPE] = mode
        for name in SHAPE_MODES[mode]:
            if name == tree:
                out[field_of(name)] = ",".join(map(str, params[tree]))
            else:
                out[field_of(name)] = params.get(name, FALLBACK.get(name))
        shape = {n for names in SHAPE_MODES.values() for n in names}
        mine = {n: k for n, k in mine.items() if n not in shape}
    for name, k in mine.items():
        if name in params and name not in USER_KNOBS:
            out[field_of(name)] = bool(params[name]) if isinstance(k.default, bool) else params[name]
        elif isinstance(k.default, bool) and has_shape(s):  # a shape's switches are part of it (staged or not)
            out[field_of(name)] = bool(params.get(name))
    return out


# What a shape field shows when a preset leaves it unset (the drafter's own default chain length).
FALLBACK = {"draft_tokens": 4}
