"""Every setting a run, race, sweep or profile takes, as ONE dataclass, and their checks.

Why a dataclass: the UI components carry the same names as the fields (appkit/page/ui.py builds `Page` with
them), so the inputs of an event are `[getattr(page, f) for f in FIELDS]` — the order lives in one place
and a handler reads `s.window`, never the 9th positional argument. The API takes the same order.

Why collect problems instead of clamping: an out-of-range value (max new tokens 0, W=0, N=1, G=-1, a step
of 1,000 query tokens) is told to the user with the field's name and range; nothing is silently changed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, make_dataclass

from decoding.build import checked
from decoding.fast.cpu_gemm import KERNELS, kernel_wanted
from decoding.methods.resources import check_references
from decoding.methods.spec import CAPABILITIES, Knob, MethodSpec
from decoding.params import DEFAULT_CONFIDENCE

from ..public.limits import MAX_PROMPT_CHARS, PUBLIC_CAPS, TEMPERATURE, Limits
from .method_fields import (DEFAULT_METHOD, SHAPE_MODES, USER_KNOBS, field_of, has_shape, knob_fields, range_key,
                            spec, specs, ui_knobs)

# Most query tokens one step may run: beyond it a CPU step costs many greedy steps (W64 N16 G64 is
# 1,920 tokens a step and took a minute for 64 tokens) and a public GPU slice would be monopolised.
QUERY_BUDGET, PUBLIC_QUERY_BUDGET = 256, 128
# The fields every method shares (a method's own fields are labelled by its knobs, method_fields.py).
LABELS = {"max_new": ("max new tokens", "max_new_tokens"), "top_k": ("top-k", "top_k")}


class InputError(ValueError):
    """One or more settings are wrong; the message lists each one with its field and range."""


@dataclass
class _Settings:
    """What the user set. Field names = component names in appkit/page/ui.py = API parameter names. The method
    fields below predate the specs (the API keeps their order); a knob shown as a control that none of them
    holds gets a field of its own, added after these (Settings)."""
    target: str = ""
    draft: str = ""
    device: str = "auto"
    dtype: str = "auto"
    prompt: str = ""
    method: str = DEFAULT_METHOD
    preset: str = "auto"
    max_new: float = 64
    window: float = 5
    ngram: float = 4
    guesses: float = 5
    max_ngram: float = 3
    num_tokens: float = 10
    spec_mode: str = "chain"
    draft_tokens: float = 4
    widths: str = "3,2,1"
    budget: float = 16
    staged: bool = False
    confidence: float = DEFAULT_CONFIDENCE
    temperature: float = 0.0
    top_k: float = 0
    top_p: float = 1.0
    seed: float = 0
    block: float = 8            # jacobi: guesses refined per step
    reference: str = ""         # prompt lookup: a reference text it also copies from ("" = none)
    heads: str = ""               # medusa / eagle heads folder, or a self_speculative adapter; "" = the shipped ones
    heads_budget: float = 16      # medusa / eagle: tree nodes verified per step
    typical: bool = False         # medusa / eagle: Medusa's typical acceptance (sampling only; not exact)
    datastore: str = ""           # retrieval: "" = the suffix cache (SuffixDecoding), "shipped" = assets/datastore/smollm2

    @classmethod
    def from_values(cls, values) -> "Settings":
        """From the event's input values, in FIELDS order."""
        return cls(**dict(zip(FIELDS, values)))


def _knob_field(k: Knob) -> tuple:
    typ = bool if isinstance(k.default, bool) else str if k.kind or isinstance(k.default, str) else float
    return (field_of(k.name), typ, field(default=k.default))


_declared = {f.name for f in fields(_Settings)}
# Every method's controls have a field: the declared ones, then one per knob a newer method shows.
# Then the CPU block kernel (decoding/fast/cpu_gemm.py KERNELS): last, so the API's earlier positions stay.
Settings = make_dataclass("Settings", [_knob_field(k) for f, k in knob_fields().items() if f not in _declared]
                          + [("kernel", str, field(default=kernel_wanted()))], bases=(_Settings,))
Settings.__doc__, Settings.__module__ = _Settings.__doc__, __name__  # a plain module-level class (pickles)
FIELDS = tuple(f.name for f in fields(Settings))


def number(value) -> float | None:
    """A finite number from a UI or API value, else None: JSON true/false, lists, NaN, Infinity and 1e309
    are not numbers here (float(True) is 1 and int(float("nan")) raises: neither may reach a check)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        f = float(value)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def brief(value) -> str:
    """A refused value for a message: short ones as given, long ones by type and size only."""
    r = repr(value)
    return r if len(r) <= 24 else f"a {type(value).__name__} of {len(r)} characters"


def check_types(s: Settings, problems: list[str]) -> None:
    """Text fields must be text and switches true/false: an API call's list prompt must not run as its str()."""
    for f in fields(Settings):
        v = getattr(s, f.name)
        if isinstance(f.default, str) and v is not None and not isinstance(v, str):
            problems.append(f"**{f.name}** must be text, got {type(v).__name__}")
        elif isinstance(f.default, bool) and v is not None and not isinstance(v, bool):
            problems.append(f"**{f.name}** must be true or false, got {brief(v)}")


def whole(s: Settings, name: str, lim: Limits, problems: list[str]) -> int | None:
    """s.<name> (max new tokens, top-k) as a whole number inside its range, else a problem naming the field."""
    label, key = LABELS[name]
    return integer(getattr(s, name), label, key, lim, problems)


def integer(value, label: str, key: str, lim: Limits, problems: list[str],
            bounds: tuple | None = None) -> int | None:
    """A whole number inside the app's range of `key` (public caps included; else `bounds`), else a problem
    naming the field and the range."""
    lo, hi = lim.ranges.get(key, bounds)
    f = number(value)
    if f is None:
        problems.append(f"**{label}** must be a whole number in [{lo}, {hi}], got {brief(value)}")
        return None
    if f != int(f) or not lo <= f <= hi:
        shown = int(f) if f == int(f) else f
        extra = " in public mode" if lim.public and key in PUBLIC_CAPS else ""
        problems.append(f"**{label}** must be a whole number in [{lo}, {hi}]{extra}, got {shown}")
        return None
    return int(f)


def check_common(s: Settings, lim: Limits, problems: list[str]) -> dict:
    """Prompt, max new tokens, sampling: what every method shares."""
    check_types(s, problems)
    text = s.prompt if isinstance(s.prompt, str) else ""
    if not text.strip() and (s.prompt is None or isinstance(s.prompt, str)):
        problems.append("**prompt** is empty: type some text or pick an example")
    elif len(text) > MAX_PROMPT_CHARS:
        problems.append(f"**prompt** is too long ({len(text):,} characters; at most {MAX_PROMPT_CHARS:,})")
    out = {"prompt": text, "max_new": whole(s, "max_new", lim, problems), "top_k": whole(s, "top_k", lim, problems)}
    t = number(s.temperature)
    if t is not None and TEMPERATURE[0] <= t <= TEMPERATURE[1]:
        out["temperature"] = t
    else:
        problems.append(f"**temperature** must be in [{TEMPERATURE[0]}, {TEMPERATURE[1]}], got {brief(s.temperature)}")
    p = number(s.top_p)
    if p is not None and 0 < p <= 1:
        out["top_p"] = p
    else:
        problems.append(f"**top-p** must be in (0, 1], got {brief(s.top_p)}")
    if s.kernel not in KERNELS:
        problems.append(f"**CPU kernel** is one of {', '.join(KERNELS)}, got {brief(s.kernel)}")
    seed = number(0 if s.seed is None or s.seed == "" else s.seed)
    if seed is not None and seed == int(seed) and 0 <= seed < 2**31:
        out["seed"] = int(seed)
    else:
        problems.append(f"**seed** must be a whole number in [0, {2**31 - 1}], got {brief(s.seed)}")
    return out


def method_params(s: Settings, method: str, lim: Limits, problems: list[str], only: tuple | None = None) -> dict:
    """The drafter parameters `method`'s controls set (models and resources not included), each read from its
    page field and range-checked with its label, then checked by the builder (decoding.build.checked: the
    combinations, one sentence) and against the per-step query-token budget. only: these knobs alone."""
    sp = spec(method)
    if sp is None:
        problems.append(f"**method** {method!r} is unknown; choose {', '.join(specs())}")
        return {}
    knobs = [k for k in ui_knobs(sp) if only is None or k.name in only]
    shape = {n for names in SHAPE_MODES.values() for n in names} if has_shape(sp) and only is None else set()
    p = shape_params(s, sp, lim, problems) if shape else {}
    for k in knobs:
        if k.name not in shape:
            p[k.name] = knob_value(s, k, lim, problems)
    if None in p.values() or only is not None:
        return {k: v for k, v in p.items() if v is not None}
    try:
        checked(sp, p)
    except ValueError as e:
        problems.append(f"**{sp.label}**: {e}")
        return p
    q = query_tokens(sp, p)
    if q is not None:
        what = ", ".join(f"{k.label.split()[0]}={p[k.name]}" for k in knobs if len(k.label.split()[0]) == 1
                         and k.name in p and not isinstance(p[k.name], bool)) or "this draft shape"
        over_budget(q, lim, problems, what)
    return p


def user_params(s: Settings, method: str, lim: Limits, problems: list[str]) -> dict:
    """The controls that stay the user's under every preset (the draft cutoff): checked, never tuned."""
    sp = spec(method)
    mine = tuple(k.name for k in ui_knobs(sp) if k.name in USER_KNOBS) if sp is not None else ()
    return method_params(s, method, lim, problems, only=mine) if mine else {}


def knob_value(s: Settings, k: Knob, lim: Limits, problems: list[str]):
    """One control's value as its knob takes it: a switch, a whole number or a number in range, or text."""
    value = getattr(s, field_of(k.name))
    if isinstance(k.default, bool):
        return bool(value)
    if k.lo is not None and k.hi is not None:
        if isinstance(k.lo, int) and isinstance(k.hi, int):
            return integer(value, k.label, range_key(k.name), lim, problems, (k.lo, k.hi))
        f = number(value)
        if f is not None and k.lo <= f <= k.hi:
            return f
        problems.append(f"**{k.label}** must be a number in [{k.lo:g}, {k.hi:g}], got {brief(value)}")
        return None
    return value


def shape_params(s: Settings, sp: MethodSpec, lim: Limits, problems: list[str]) -> dict:
    """A token tree's shape from the mode radio: a chain of K, tree widths per depth, or a node budget."""
    knobs = {k.name: k for k in ui_knobs(sp)}
    tree = knobs[CAPABILITIES["tree_shape"]]
    p: dict = {}
    if s.spec_mode == "tree":
        text = getattr(s, field_of(tree.name))
        parts = [x for x in str(text or "").replace(" ", "").split(",") if x]
        if not parts or not all(x.isdigit() for x in parts):
            problems.append(f"**{tree.label}** must be comma-separated whole numbers like 3,2,1, got {text!r}")
            return {tree.name: None}
        widths = [int(x) for x in parts]
        lo, hi = lim.ranges["tree_width"]
        if len(widths) > lim.hi("tree_depth") or not all(lo <= w <= hi for w in widths):
            problems.append(f"**{tree.label}**: at most {lim.hi('tree_depth')} depths, each in [{lo}, {hi}], "
                            f"got {text}")
            return {tree.name: None}
        p[tree.name] = widths
    else:
        for name in SHAPE_MODES.get(s.spec_mode, SHAPE_MODES["chain"]):
            p[name] = knob_value(s, knobs[name], lim, problems)
    return p


def has_query(sp: MethodSpec) -> bool:
    """Its spec says how many query tokens a step runs (MethodSpec.query_tokens)."""
    return sp.query_tokens is not None


def query_tokens(sp: MethodSpec, p: dict) -> int | None:
    """Most query tokens one step of these parameters runs, by the spec's own count (None: it declares none)."""
    return sp.query_tokens({**sp.defaults(), **p}) if sp.query_tokens is not None else None


def reference_texts(s: Settings, problems: list[str]) -> list[str]:
    """The reference box as a list of texts for reference lookup ([] when the box is empty)."""
    text = s.reference if isinstance(s.reference, str) else ""
    if not text.strip():
        return []
    try:
        return check_references(text)
    except ValueError as e:
        problems.append(f"**reference text**: {e}")
        return []


def query_budget(lim: Limits) -> int:
    return PUBLIC_QUERY_BUDGET if lim.public else QUERY_BUDGET


def over_budget(q: int, lim: Limits, problems: list[str], what: str) -> None:
    if q > query_budget(lim):
        problems.append(f"**{what}** runs up to {q:,} query tokens per step; the budget here is "
                        f"{query_budget(lim)} (each step's cost grows with it): lower W, N or G")


def budget_line(s: Settings, lim: Limits) -> str:
    """The live line under the method's controls, checked as the user types: every out-of-range value of the
    shared fields and the method's controls (before Run, not after it), else query tokens per step vs the budget
    ("" where the method has no formula for it, greedy)."""
    problems: list[str] = []
    sp = spec(s.method)
    common: list[str] = []
    check_common(s, lim, common)
    shared = [p for p in common if not p.startswith("**prompt**")]  # the prompt: said when Run is pressed
    params = method_params(s, s.method, lim, problems) if sp is not None else {}
    problems = shared + problems
    if problems:
        return "⚠️ " + " · ".join(problems)
    if sp is None or not has_query(sp):
        return ""
    return (f"up to **{query_tokens(sp, params)}** query tokens per step: the positions one forward pass computes "
            f"(budget {query_budget(lim)}; greedy runs 1, more cost time)")


def raise_if(problems: list[str]) -> None:
    if problems:
        raise InputError("\n".join(f"- {p}" for p in problems) if len(problems) > 1 else problems[0])
