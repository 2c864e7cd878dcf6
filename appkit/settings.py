"""Every setting a run, race, sweep or profile takes, as ONE dataclass, and their checks.

Why a dataclass: the UI components carry the same names as the fields (appkit/ui.py builds `Page` with
them), so the inputs of an event are `[getattr(page, f) for f in FIELDS]` — the order lives in one place
and a handler reads `s.window`, never the 9th positional argument. The API takes the same order.

Why collect problems instead of clamping: an out-of-range value (max new tokens 0, W=0, N=1, G=-1, a step
of 1,000 query tokens) is told to the user with the field's name and range; nothing is silently changed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from decoding.api import HEADS_METHODS
from decoding.methods.draft_tree import make_shape, speculative_query_tokens
from decoding.methods.reference_text import check_references
from decoding.params import DEFAULT_CONFIDENCE, lookahead_query_tokens

from .limits import MAX_PROMPT_CHARS, TEMPERATURE, Limits

# Most query tokens one step may run: beyond it a CPU step costs many greedy steps (W64 N16 G64 is
# 1,920 tokens a step and took a minute for 64 tokens) and a public GPU slice would be monopolised.
QUERY_BUDGET, PUBLIC_QUERY_BUDGET = 256, 128
LABELS = {"max_new": ("max new tokens", "max_new_tokens"), "window": ("W window", "window"),
          "ngram": ("N n-gram", "ngram"), "guesses": ("G guesses", "guesses"),
          "max_ngram": ("max n-gram to match", "max_ngram"), "num_tokens": ("tokens to copy", "num_tokens"),
          "draft_tokens": ("K draft tokens", "draft_tokens"), "budget": ("tree budget", "tree_budget"),
          "top_k": ("top-k", "top_k"), "block": ("K block", "block"),
          "heads_budget": ("heads tree budget", "tree_budget")}


class InputError(ValueError):
    """One or more settings are wrong; the message lists each one with its field and range."""


@dataclass
class Settings:
    """What the user set. Field names = component names in appkit/ui.py = API parameter names."""
    target: str = ""
    draft: str = ""
    device: str = "auto"
    dtype: str = "auto"
    prompt: str = ""
    method: str = "lookahead"
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
    """s.<name> as a whole number inside its range, else a problem naming the field and the range."""
    label, key = LABELS[name]
    lo, hi = lim.ranges[key]
    value = getattr(s, name)
    f = number(value)
    if f is None:
        problems.append(f"**{label}** must be a whole number in [{lo}, {hi}], got {brief(value)}")
        return None
    if f != int(f) or not lo <= f <= hi:
        shown = int(f) if f == int(f) else f
        extra = " in public mode" if lim.public and key in ("max_new_tokens", "window", "ngram", "guesses") else ""
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
    seed = number(0 if s.seed is None or s.seed == "" else s.seed)
    if seed is not None and seed == int(seed) and 0 <= seed < 2**31:
        out["seed"] = int(seed)
    else:
        problems.append(f"**seed** must be a whole number in [0, {2**31 - 1}], got {brief(s.seed)}")
    return out


def method_params(s: Settings, method: str, lim: Limits, problems: list[str]) -> dict:
    """The drafter parameters of `method` (models not included), checked against the ranges and the
    per-step query-token budget."""
    if method == "greedy":
        return {}
    if method == "lookahead":
        p = {k: whole(s, k, lim, problems) for k in ("window", "ngram", "guesses")}
        if None not in p.values():
            over_budget(lookahead_query_tokens(p["window"], p["ngram"], p["guesses"]), lim, problems,
                        f"W={p['window']}, N={p['ngram']}, G={p['guesses']}")
        return p
    if method == "prompt_lookup":
        return {k: whole(s, k, lim, problems) for k in ("max_ngram", "num_tokens")}
    if method == "jacobi":
        p = {"block": whole(s, "block", lim, problems)}
        if p["block"] is not None:
            over_budget(p["block"] + 1, lim, problems, f"block K={p['block']}")
        return p
    if method == "speculative":
        return speculative_params(s, lim, problems)
    if method in HEADS_METHODS:
        return {"budget": whole(s, "heads_budget", lim, problems)}
    if method in ("retrieval", "self_speculative"):  # their source (datastore, adapter) is read by Prepared.drafter
        return {}
    problems.append(f"**method** {method!r} is unknown; choose greedy, lookahead, prompt_lookup, speculative, "
                    "jacobi, medusa, eagle, self_speculative or retrieval")
    return {}


def speculative_params(s: Settings, lim: Limits, problems: list[str]) -> dict:
    p: dict = {"staged": bool(s.staged)}
    if s.spec_mode == "tree":
        parts = [x for x in str(s.widths or "").replace(" ", "").split(",") if x]
        if not parts or not all(x.isdigit() for x in parts):
            problems.append(f"**tree widths** must be comma-separated whole numbers like 3,2,1, got {s.widths!r}")
            return p
        widths = [int(x) for x in parts]
        lo, hi = lim.ranges["tree_width"]
        if len(widths) > lim.hi("tree_depth") or not all(lo <= w <= hi for w in widths):
            problems.append(f"**tree widths**: at most {lim.hi('tree_depth')} depths, each in [{lo}, {hi}], "
                            f"got {s.widths}")
            return p
        p["tree"] = widths
    elif s.spec_mode == "budget":
        p.update(tree_budget=whole(s, "budget", lim, problems), draft_tokens=whole(s, "draft_tokens", lim, problems))
    else:
        p["draft_tokens"] = whole(s, "draft_tokens", lim, problems)
    if None in p.values():
        return p
    try:
        shape = make_shape(p.get("draft_tokens"), p.get("tree"), p.get("tree_budget"), p["staged"])
    except ValueError as e:
        problems.append(f"**speculative**: {e}")
        return p
    over_budget(speculative_query_tokens(shape), lim, problems, "this draft shape")
    return p


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


def draft_cutoff(s: Settings, problems: list[str]) -> float | None:
    """The speculative draft cutoff: a drafted node below this draft probability is not extended (the
    tree view draws what it pruned). Checked with every preset: it is the user's, not the tuner's."""
    c = number(s.confidence)
    if c is not None and 0 <= c <= 1:
        return c
    problems.append(f"**draft cutoff** must be in [0, 1] (0 = never prune), got {brief(s.confidence)}")
    return None


def query_budget(lim: Limits) -> int:
    return PUBLIC_QUERY_BUDGET if lim.public else QUERY_BUDGET


def over_budget(q: int, lim: Limits, problems: list[str], what: str) -> None:
    if q > query_budget(lim):
        problems.append(f"**{what}** runs up to {q:,} query tokens per step; the budget here is "
                        f"{query_budget(lim)} (each step's cost grows with it): lower W, N or G")


def budget_line(s: Settings, lim: Limits) -> str:
    """The live line under W, N, G (and the speculative shape): query tokens per step vs the budget."""
    problems: list[str] = []
    if s.method not in ("lookahead", "speculative"):
        return ""
    params = method_params(s, s.method, lim, problems)
    if problems:
        return "⚠️ " + " · ".join(problems)
    if s.method == "lookahead":
        q = lookahead_query_tokens(params["window"], params["ngram"], params["guesses"])
    else:
        q = speculative_query_tokens(make_shape(params.get("draft_tokens"), params.get("tree"),
                                                params.get("tree_budget"), params["staged"]))
    return (f"up to **{q}** query tokens per step: the positions one forward pass computes (budget "
            f"{query_budget(lim)}; greedy runs 1, more cost time)")


def raise_if(problems: list[str]) -> None:
    if problems:
        raise InputError("\n".join(f"- {p}" for p in problems) if len(problems) > 1 else problems[0])
