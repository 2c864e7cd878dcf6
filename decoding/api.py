"""One call from text to a finished trace: validate parameters, build the drafter, decode, annotate."""
from __future__ import annotations

import difflib

from .engine.drafter import Greedy
from .engine.runner import generate
from .engine.sampling import Sampling
from .methods.eagle import Eagle
from .methods.jacobi import Jacobi
from .methods.lookahead import Lookahead
from .methods.heads import KINDS
from .methods.medusa import Medusa
from .methods.prompt_lookup import PromptLookup
from .methods.reference_text import tokenize_references
from .methods.speculative import Speculative
from .models import check_window, describe, max_positions
from .params import LIMITS, check_range
from .trace import Trace

# The method registry: name -> drafter class (one file in methods/ each). A class says what it takes
# (PARAMS), how it is built (from_params) and what it can do (abilities). A new method is one file in
# methods/ plus one line here.
REGISTRY: dict[str, type] = {
    "greedy": Greedy,
    "lookahead": Lookahead,
    "prompt_lookup": PromptLookup,
    "speculative": Speculative,
    "jacobi": Jacobi,
    "medusa": Medusa,
    "eagle": Eagle,
}
METHODS = tuple(REGISTRY)
HEADS_METHODS = KINDS  # self-drafting: need heads= (a folder from python -m decoding train-heads)
# The keyword parameters each method takes (run(**params) / make_drafter): anything else is a typo, refused.
PARAMS = {name: cls.PARAMS for name, cls in REGISTRY.items()}
HOOKS = ("step_context", "on_step")


def check_params(method: str, params: dict) -> None:
    """Refuse a parameter the method does not take (window_size=2 must not be silently ignored); a
    parameter of another method is refused only when it is set (None = not given)."""
    if method not in PARAMS:
        return
    known = {k for names in PARAMS.values() for k in names} | set(HOOKS)
    for k, v in params.items():
        if k not in known:
            close = difflib.get_close_matches(k, sorted(known - set(HOOKS)), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            takes = ", ".join(PARAMS[method]) or "no parameters"
            raise ValueError(f"unknown parameter {k!r}{hint} ({method} takes {takes})")
        if v is not None and k not in PARAMS[method] and k not in HOOKS:
            owners = ", ".join(m for m, names in PARAMS.items() if k in names)
            raise ValueError(f"{k} is not a {method} parameter ({method} takes {', '.join(PARAMS[method]) or 'none'}; "
                             f"{k} belongs to {owners})")


def make_drafter(method: str, **p):
    """The drafter for a method name; p holds that method's parameters (None = default)."""
    check_params(method, p)
    p = {k: v for k, v in p.items() if v is not None}
    for k, v in p.items():
        if k in LIMITS:
            check_range(k, v)
    if p.get("reference_ids") is not None and method != "prompt_lookup":
        raise ValueError("reference texts are searched by --method prompt_lookup only (reference lookup)")
    if method not in REGISTRY:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return REGISTRY[method].from_params(**p)


def make_sampling(temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> Sampling:
    if not 0 <= temperature <= 100:
        raise ValueError(f"temperature must be in [0, 100], got {temperature}")
    check_range("top_k", top_k)
    if not 0 < top_p <= 1:
        raise ValueError(f"top-p must be in (0, 1], got {top_p}")
    return Sampling(temperature, top_k, top_p, seed)


def run(model, tokenizer, prompt: str | list[int], method: str = "greedy", *, max_new_tokens: int = 64,
        sampling: Sampling = Sampling(), drafter=None, trace: bool = True, static: bool | None = None,
        **params) -> Trace:
    """Tokenise exactly as tokenizer(prompt) does, decode, and fill in text, vocab and model info.
    static: the static-shape path (None = the device default, see runner.default_static).
    reference (params): a text or list of texts prompt lookup also copies from (reference lookup)."""
    check_range("max_new_tokens", max_new_tokens)
    check_params(method, params)
    ids = list(prompt) if isinstance(prompt, list) else tokenizer(prompt)["input_ids"]
    if isinstance(prompt, str) and not prompt.strip() or not ids:
        raise ValueError("the prompt is empty")
    if params.get("reference") is not None:
        if drafter is not None:
            raise ValueError("give reference= or a drafter built with reference_ids, not both")
        params["reference_ids"] = tokenize_references(tokenizer, params.pop("reference"))
    if drafter is None and method == "speculative":  # let make_drafter compare the tokenizers
        params = {"target_model": model, "tokenizer": tokenizer, **params}
    drafter = drafter or make_drafter(method, **{k: v for k, v in params.items() if k not in HOOKS})
    limit = max_positions(model.config)
    if limit is not None and len(ids) + max_new_tokens + drafter.max_depth() > limit:
        raise ValueError(f"prompt ({len(ids)} tokens) + max-new-tokens ({max_new_tokens}) + "
                         f"{drafter.name.replace('_', ' ')} span ({drafter.max_depth()} positions one step looks "
                         f"ahead) exceeds the model's {limit} positions")
    check_window(model.config, len(ids), max_new_tokens, drafter.max_depth())
    if getattr(drafter, "draft", None) is not None:
        check_window(drafter.draft.config, len(ids), max_new_tokens, drafter.max_depth())
    eos = eos_of(model, tokenizer)
    tr = generate(model, ids, drafter, max_new_tokens=max_new_tokens, eos_token_id=eos,
                  sampling=sampling, trace=trace, static=static, **_hooks(params))
    tr.model = describe(model)
    if tokenizer is not None:
        tr.text = tokenizer.decode(tr.output_ids)
        tr.vocab = vocab_for(tr, tokenizer)
    return tr


def eos_of(model, tokenizer=None):
    """The stop token(s) `run` uses: the model's generation config, else the tokenizer's."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    return eos




def _hooks(params: dict) -> dict:
    return {k: params[k] for k in HOOKS if params.get(k) is not None}


def vocab_for(tr: Trace, tokenizer) -> dict[str, str]:
    """Text of every token id the trace mentions, so pictures can be drawn without the tokenizer."""
    ids = set(tr.prompt_ids) | set(tr.output_ids)
    for s in tr.steps:
        ids.update(s.tokens)
        ids.update(s.accepted)
        for key in ("window", "window_next", "candidates", "harvested"):
            for row in s.info.get(key, []) or []:
                ids.update(row)
    return {str(i): tokenizer.decode([i]) for i in sorted(ids)}
