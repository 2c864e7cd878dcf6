"""The one builder: a method's spec + parameter values (+ the model) -> its drafter.

The API (decoding.run), the CLI, the app, the benches, profiling and the tuner all build drafters here, so
a parameter is checked once, with one sentence, whoever passes it. Model-free calls (the CLI validating its
flags before a model loads) check and construct without the spec's prepare step.
"""
from __future__ import annotations

import difflib

from .methods.registry import SPECS, MethodSpec, spec_of

# Keywords run() takes besides the method's parameters (per-step callbacks), never a method's.
HOOKS = ("step_context", "on_step")
# Names users bring from elsewhere (transformers' generate, our CLI): the parameter they mean.
ALIASES = {"draft": "draft_model", "assistant_model": "draft_model", "assistant": "draft_model",
           "prompt_lookup_num_tokens": "num_tokens", "max_matching_ngram_size": "max_ngram",
           "window_size": "window", "ngram_size": "ngram", "num_guesses": "guesses", "heads_dir": "heads"}
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed", "do_sample")  # Sampling's, not a method's


def params_of() -> dict[str, tuple[str, ...]]:
    """method -> the keyword parameters its drafter is built from (user and internal)."""
    return {name: s.param_names() for name, s in SPECS.items()}


def check_params(method: "str | MethodSpec", params: dict) -> None:
    """Refuse a parameter the method does not take (window_size=2 must not be silently ignored); a
    parameter of another method is refused only when it is set (None = not given)."""
    if isinstance(method, str) and method not in SPECS:
        return
    spec = spec_of(method)
    everyone = params_of()
    mine = spec.param_names()
    known = {k for names in everyone.values() for k in names} | set(mine) | set(HOOKS)
    for k, v in params.items():
        if k in SAMPLING_FIELDS and k not in mine:
            raise ValueError(f"{k} is a sampling setting, not a {spec.name} parameter: pass "
                             f"sampling=Sampling(temperature=..., top_k=..., top_p=..., seed=...) "
                             "(from decoding import Sampling; the default Sampling() is greedy)")
        if k not in known:
            close = [ALIASES[k]] if k in ALIASES else difflib.get_close_matches(k, sorted(known - set(HOOKS)), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            takes = ", ".join(mine) or "no parameters"
            raise ValueError(f"unknown parameter {k!r}{hint} ({spec.name} takes {takes})")
        if v is not None and k not in mine and k not in HOOKS:
            owners = ", ".join(m for m, names in everyone.items() if k in names)
            raise ValueError(f"{k} is not a {spec.name} parameter ({spec.name} takes {', '.join(mine) or 'none'}; "
                             f"{k} belongs to {owners})")


def checked(method: "str | MethodSpec", params: dict) -> tuple[MethodSpec, dict]:
    """(spec, the given values without None) after the name checks and the spec's own range, choice and
    combination checks (MethodSpec.check_values): every caller reaches a drafter through here."""
    check_params(method, params)
    p = {k: v for k, v in params.items() if v is not None and k not in HOOKS}
    spec = spec_of(method)
    if p.get("reference_ids") is not None and "reference_ids" not in spec.param_names():
        raise ValueError("reference texts are searched by --method prompt_lookup only (reference lookup)")
    spec.check_values(p)
    return spec, p


def build(method: "str | MethodSpec", params: dict | None = None, model=None, tokenizer=None):
    """The drafter for `method` with `params` (None = the method's default). With the model, the spec's
    prepare step settles what only the model can (a draft to load, the shipped heads or adapter that fit it,
    a datastore checked against the tokenizer) before the drafter is made."""
    spec, p = checked(method, dict(params or {}))
    if model is not None and spec.prepare is not None:
        p = spec.prepare(p, model, tokenizer)
    return spec.drafter.from_params(**p)
