"""The method registry: one line per method, naming the module that declares its SPEC.

Everything that lists methods (the builder, the CLI's choices and flags, the app's method list and controls,
the palette, the presets, the README's methods table) reads SPECS. Adding a method is one file declaring
`SPEC = MethodSpec(...)` next to its drafter, plus one line in MODULES.
"""
from __future__ import annotations

import colorsys
import re
from importlib import import_module

from .spec import BASELINE, CAPABILITIES, MethodSpec  # noqa: F401 (BASELINE re-exported: the registry names the baseline)

MODULES = (
    "decoding.methods.greedy",
    "decoding.methods.windows.lookahead",
    "decoding.methods.lookup.prompt_lookup",
    "decoding.methods.draft_model.speculative",
    "decoding.methods.windows.jacobi",
    "decoding.methods.self_draft.medusa",
    "decoding.methods.self_draft.eagle",
    "decoding.methods.retrieve.retrieval",  # REST datastore (datastore=) or SuffixDecoding's suffix cache (default)
    "decoding.methods.self_draft.self_speculative",
    "decoding.methods.lookup.token_recycling",  # Token Recycling: each token's successors from earlier logits
)


def load_specs(modules: tuple[str, ...] = MODULES) -> dict[str, MethodSpec]:
    """name -> spec, in registry order; a module without a SPEC, two specs with one name, or a parameter name
    two methods use without both declaring it shared, is a bug."""
    out: dict[str, MethodSpec] = {}
    for name in modules:
        spec = getattr(import_module(name), "SPEC", None)
        if not isinstance(spec, MethodSpec):
            raise TypeError(f"{name} declares no SPEC = MethodSpec(...)")
        if spec.name in out:
            raise ValueError(f"two methods are called {spec.name!r}")
        check_capabilities(spec)
        out[spec.name] = spec
    check_shared(out)
    check_colours(out)
    return out


HEX = re.compile(r"#[0-9a-fA-F]{6}")
# Orange is a draft model's (viz/palette.py: a draft-model token and a draft node are orange in every view;
# tests/test_viz.py holds the palette's rules): only a method that drafts with a draft model may use it.
ORANGE_HUE = (15.0, 40.0)  # degrees; saturated (s > 0.5) and bright (v > 0.6): darker shades read as brown


def is_orange(colour: str) -> bool:
    """A "#rrggbb" colour that reads as orange: a saturated, bright hue between red and yellow."""
    h, s, v = colorsys.rgb_to_hsv(*(int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)))
    return ORANGE_HUE[0] <= h * 360 <= ORANGE_HUE[1] and s > 0.5 and v > 0.6


def check_colours(specs: dict[str, MethodSpec]) -> None:
    """Every method's colour (and each origin colour it declares) is a CSS "#rrggbb" the charts can draw, no
    two methods share a colour (a run chart tells them apart by it), and orange is left to draft models."""
    seen: dict[str, str] = {}
    for spec in specs.values():
        declared = [("colour", spec.colour)] + [(f"origin {o!r} colour", c) for o, (c, _) in spec.origins.items()]
        for what, c in declared:
            if not isinstance(c, str) or not HEX.fullmatch(c):
                raise ValueError(f"{spec.name}'s {what} {c!r} is not a CSS colour \"#rrggbb\" (the charts and the "
                                 "report draw with it)")
            if is_orange(c) and "draft_model" not in spec.needs:
                raise ValueError(f"{spec.name}'s {what} {c} is orange, which means a draft model's tokens in every "
                                 "picture: pick another hue (tests/test_viz.py holds the palette's rules)")
        other = seen.get(spec.colour.lower())
        if other is not None:
            raise ValueError(f"{spec.name}'s colour {spec.colour} is {other}'s too: every method needs its own "
                             "(run charts tell methods apart by colour)")
        seen[spec.colour.lower()] = spec.name


def check_capabilities(spec: MethodSpec) -> None:
    """A declared capability is a known one, and the method takes the parameter that receives it."""
    for c in spec.capabilities:
        if c not in CAPABILITIES:
            raise ValueError(f"{spec.name} declares an unknown capability {c!r} (known: {', '.join(CAPABILITIES)})")
        if CAPABILITIES[c] not in spec.param_names():
            raise ValueError(f"{spec.name} declares {c!r} but takes no {CAPABILITIES[c]!r} parameter to receive it")


def check_shared(specs: dict[str, MethodSpec]) -> None:
    """Each method's parameters are its own: the CLI's flags, the app's controls and the builder's checks are
    found by name, so a name two methods use means one thing in both, and both must say so (knob(shared=True)).
    A shared name is read the same way by every owner (the same kind of text, the same choices)."""
    owners: dict[str, list] = {}
    for spec in specs.values():
        for k in spec.knobs(user=False):
            owners.setdefault(k.name, []).append((spec.name, k))
    for pname, held in owners.items():
        if len(held) < 2:
            continue
        private = [m for m, k in held if not k.shared]
        if private:
            raise ValueError(f"parameter {pname!r} is used by {', '.join(m for m, _ in held)} but not declared "
                             f"shared by {', '.join(private)}: rename it, or declare it knob(shared=True) in each")
        kinds = {(k.kind, k.choices, type(k.default).__name__ if k.default is not None else None) for _, k in held}
        if len({(kind, ch) for kind, ch, _ in kinds}) > 1:
            raise ValueError(f"shared parameter {pname!r} is read differently by {', '.join(m for m, _ in held)} "
                             "(its kind or choices differ)")


SPECS = load_specs()
METHODS = tuple(SPECS)


def spec_of(method: "str | MethodSpec") -> MethodSpec:
    """The spec for a method name (a spec passes through), else a ValueError listing the methods."""
    if isinstance(method, MethodSpec):
        return method
    if method not in SPECS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return SPECS[method]


def needing(resource: str) -> tuple[str, ...]:
    """The methods whose spec needs `resource` ("heads", "draft_model", "adapter", "datastore")."""
    return tuple(n for n, s in SPECS.items() if resource in s.needs)
