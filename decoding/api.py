"""One call from text to a finished trace: validate parameters, build the drafter, decode, annotate."""
from __future__ import annotations

import difflib
import json
from pathlib import Path

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
from .methods.retrieval import Retrieval
from .methods.self_speculative import SelfSpeculative
from .methods.speculative import Speculative
from .models import ASSETS, check_window, describe, max_positions
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
    "retrieval": Retrieval,  # REST datastore (datastore=) or SuffixDecoding's suffix cache (default)
    "self_speculative": SelfSpeculative,
}
METHODS = tuple(REGISTRY)
HEADS_METHODS = KINDS  # self-drafting: need heads= (a folder from python -m decoding train-heads)
# The keyword parameters each method takes (run(**params) / make_drafter): anything else is a typo, refused.
PARAMS = {name: cls.PARAMS for name, cls in REGISTRY.items()}
HOOKS = ("step_context", "on_step")


# Names users bring from elsewhere (transformers' generate, our CLI): the parameter they mean.
ALIASES = {"draft": "draft_model", "assistant_model": "draft_model", "assistant": "draft_model",
           "prompt_lookup_num_tokens": "num_tokens", "max_matching_ngram_size": "max_ngram",
           "window_size": "window", "ngram_size": "ngram", "num_guesses": "guesses", "heads_dir": "heads"}
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed", "do_sample")  # Sampling's, not a method's


def check_params(method: str, params: dict) -> None:
    """Refuse a parameter the method does not take (window_size=2 must not be silently ignored); a
    parameter of another method is refused only when it is set (None = not given)."""
    if method not in PARAMS:
        return
    known = {k for names in PARAMS.values() for k in names} | set(HOOKS)
    for k, v in params.items():
        if k in SAMPLING_FIELDS and k not in PARAMS[method]:
            raise ValueError(f"{k} is a sampling setting, not a {method} parameter: pass "
                             f"sampling=Sampling(temperature=..., top_k=..., top_p=..., seed=...) "
                             "(from decoding import Sampling; the default Sampling() is greedy)")
        if k not in known:
            close = [ALIASES[k]] if k in ALIASES else difflib.get_close_matches(k, sorted(known - set(HOOKS)), n=1)
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
    if method in HEADS_METHODS and p.get("heads"):
        p["heads"] = heads_folder(p["heads"], method)
    if method == "speculative" and p.get("draft_model") is None:
        raise ValueError(NO_DRAFT)
    return REGISTRY[method].from_params(**p)


NO_DRAFT = ("speculative decoding needs a draft model, and none ships for this model (drafts ship for the default "
            "SmolLM2-135M-Instruct and the embedded target): pass draft_model= (a model object, or the path or "
            "hub id of a smaller model sharing the target's tokenizer; the CLI's --draft)")
SHIPPED_HEADS = ASSETS / "heads"  # heads.json records the base model each kind was trained for


def heads_folder(path, method: str) -> str:
    """A heads folder for `method`: the folder itself, or its <method>/ subfolder when given the parent
    that holds both kinds (assets/heads -> assets/heads/eagle), as the app and the race accept it."""
    p = Path(path).expanduser()
    if not (p / "heads.json").is_file() and (p / method / "heads.json").is_file():
        return str(p / method)
    return str(path)


def default_heads(model, method: str) -> str:
    """The shipped heads for `model`: assets/heads/<method> (the embedded target) or
    assets/heads/smollm2/<method> (the default model), whichever was trained for it (the base-model
    fingerprint their heads.json records), else a ValueError that says how to get heads."""
    from .methods.heads import base_fingerprints
    fingerprints, bases = base_fingerprints(model), []
    for shipped in (SHIPPED_HEADS / method, SHIPPED_HEADS / "smollm2" / method):
        try:
            cfg = json.loads((shipped / "heads.json").read_text())
        except (OSError, ValueError):
            continue
        if cfg.get("base_fingerprint") and cfg["base_fingerprint"] in fingerprints:
            return str(shipped)
        bases.append(cfg.get("base_model") or "the embedded target")
    shipped = SHIPPED_HEADS / method
    base = " and ".join(bases) or "the embedded target"
    raise ValueError(f"{method} needs heads: the shipped ones ({shipped.relative_to(ASSETS.parent)}) were trained "
                     f"for {base}, not this model; train heads for it with python -m decoding train-heads "
                     f"--model M --kind {method} --data TEXT --out DIR, then pass heads=DIR (--heads DIR)")


AUTO_DRAFT = "auto"  # draft_model="auto" (or None through run/build_drafter): the draft shipped for the target


def default_draft(model):
    """(draft model, None) shipped for `model`: the distilled SmolLM2 draft (assets/drafts/smollm2, sharing the
    target's embedding and LM head) when the base-model fingerprint fits, the embedded draft for the embedded
    target; else a ValueError that says how to get one."""
    from .methods import shipped_draft
    from .models import EMBEDDED_DRAFT, EMBEDDED_TARGET
    if shipped_draft.fits(model):
        return with_layout(shipped_draft.load_draft_folder(model), getattr(model, "weight_layout_", None)), None
    if Path(getattr(model, "name_or_path_", "") or "").expanduser().resolve() == Path(EMBEDDED_TARGET).resolve():
        return load_draft(model, EMBEDDED_DRAFT)
    raise ValueError(NO_DRAFT)


def load_draft(model, draft) -> tuple:
    """(draft model, its tokenizer or None): a model object as is; "auto" the draft shipped for the target
    (default_draft); a draft folder (draft.json: layers only, the target's embedding and head shared) for
    this target; a path or hub id loaded like the target (decoding.load) on the target's device and in its
    dtype."""
    if draft is None or draft == AUTO_DRAFT:
        return default_draft(model)
    if not isinstance(draft, (str, Path)):
        return draft, None
    import torch
    from .methods import shipped_draft
    from .models import load
    layout = getattr(model, "weight_layout_", None)
    if (Path(draft).expanduser() / shipped_draft.CARD).is_file():
        d = shipped_draft.load_draft_folder(model, Path(draft).expanduser())
        return with_layout(d, layout), None
    w = model.get_input_embeddings().weight
    dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(w.dtype)
    return load(str(draft), device=str(w.device), dtype=dtype,
                layout=layout if layout in ("stock", "column", "packed") else "auto")


def with_layout(draft, layout: str | None):
    """A draft that borrows the target's embedding and head gets the target's weight layout for its own
    layers (the shared head is packed already, and packing skips it); a target without one (not loaded by
    decoding.load) keeps transformers' stock layout, and so does its draft."""
    from .fast.layout import apply_layout
    draft.weight_layout_ = apply_layout(draft, layout if layout in ("stock", "column", "packed") else "stock")
    return draft


def make_sampling(temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> Sampling:
    if not 0 <= temperature <= 100:
        raise ValueError(f"temperature must be in [0, 100], got {temperature}")
    check_range("top_k", top_k)
    if not 0 < top_p <= 1:
        raise ValueError(f"top-p must be in (0, 1], got {top_p}")
    return Sampling(temperature, top_k, top_p, seed)


def build_drafter(model, tokenizer, method: str, **params):
    """make_drafter with what only the model can settle: speculative gets the target and both tokenizers
    (compared once) and loads a draft given as a path; medusa / eagle default to the shipped heads when
    the model is the one they were trained for."""
    check_params(method, params)
    if method == "speculative":
        draft, dtok = load_draft(model, params.get("draft_model"))
        params = {"target_model": model, "tokenizer": tokenizer, **params, "draft_model": draft}
        if dtok is not None and params.get("draft_tokenizer") is None:
            params["draft_tokenizer"] = dtok
    if method in HEADS_METHODS and not params.get("heads"):
        params["heads"] = default_heads(model, method)  # the shipped heads, for the model they fit
    if method == "retrieval" and params.get("datastore") is not None:  # a datastore for another tokenizer is refused
        params = {"tokenizer": tokenizer, "model_vocab": model.get_input_embeddings().num_embeddings, **params}
    if method == "self_speculative" and not params.get("adapter"):
        from .methods.self_spec_adapter import default_adapter
        params["adapter"] = default_adapter(model)  # the shipped adapter, for the model it fits
    return make_drafter(method, **params)


def run(model, tokenizer, prompt: str | list[int], method: str = "greedy", *, max_new_tokens: int = 64,
        sampling: Sampling = Sampling(), drafter=None, trace: bool = True, static: bool | None = None,
        lp: bool = False, lp_debug: bool = False, **params) -> Trace:
    """Tokenise exactly as tokenizer(prompt) does, decode, and fill in text, vocab and model info.
    static: the static-shape path (None = the device default, see runner.default_static).
    sampling: Sampling(temperature, top_k, top_p, seed) (default greedy); temperature= and the other
      sampling fields are not keywords of run() (jacobi's seed= is its own): a clear error points here.
    reference (params): a text or list of texts prompt lookup also copies from (reference lookup).
    draft_model (speculative): a model object, or a path / hub id loaded on the target's device and dtype.
    heads (medusa, eagle): a heads folder or its parent (assets/heads); default: the shipped heads when
      the model is the one they were trained for (assets/heads/<method>/heads.json records it).
    lp (lookahead, under torchrun): lookahead parallelism, the window split over the processes; lp_debug
      checks a hash of every rank's cache and pool each step. A model loaded with tp_plan runs sharded."""
    check_range("max_new_tokens", max_new_tokens)
    check_params(method, params)
    ids = list(prompt) if isinstance(prompt, list) else tokenizer(prompt)["input_ids"]
    if isinstance(prompt, str) and not prompt.strip() or not ids:
        raise ValueError("the prompt is empty")
    if params.get("reference") is not None:
        if drafter is not None:
            raise ValueError("give reference= or a drafter built with reference_ids, not both")
        params["reference_ids"] = tokenize_references(tokenizer, params.pop("reference"))
    drafter = drafter or build_drafter(model, tokenizer, method, **{k: v for k, v in params.items() if k not in HOOKS})
    limit = max_positions(model.config)
    if limit is not None and len(ids) + max_new_tokens + drafter.max_depth() > limit:
        raise ValueError(f"prompt ({len(ids)} tokens) + max-new-tokens ({max_new_tokens}) + "
                         f"{drafter.name.replace('_', ' ')} span ({drafter.max_depth()} positions one step looks "
                         f"ahead) exceeds the model's {limit} positions")
    check_window(model.config, len(ids), max_new_tokens, drafter.max_depth(), drafter.name)
    if getattr(drafter, "draft", None) is not None:
        check_window(drafter.draft.config, len(ids), max_new_tokens, drafter.max_depth(), drafter.name)
    eos = eos_of(model, tokenizer)
    if lp or getattr(model, "tp_info_", None) is not None:  # past one process: decoding/parallel/
        from .parallel.launch import generate_distributed
        tr = generate_distributed(model, ids, drafter, lp=lp, debug=lp_debug, max_new_tokens=max_new_tokens,
                                  eos_token_id=eos, sampling=sampling, trace=trace, **_hooks(params))
    else:
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
