"""One call from text to a finished trace: validate parameters, build the drafter, decode, annotate."""
from __future__ import annotations

from .build import ALIASES, HOOKS, SAMPLING_FIELDS, build, check_params, params_of
from .engine.runner import generate
from .engine.sampling import Sampling
from .methods.registry import METHODS, SPECS, needing
from .methods.resources import AUTO_DRAFT, NO_DRAFT, default_draft, default_heads, heads_folder, load_draft, with_layout
from .models import check_window, describe, max_positions
from .params import check_range
from .trace import Trace

HEADS_METHODS = needing("heads")  # self-drafting: need heads= (a folder from python -m decoding train-heads)
# The keyword parameters each method takes (run(**params) / build): anything else is a typo, refused.
PARAMS = params_of()
__all__ = ["ALIASES", "AUTO_DRAFT", "HEADS_METHODS", "METHODS", "NO_DRAFT", "PARAMS", "SAMPLING_FIELDS", "SPECS",
           "build", "build_drafter", "check_params", "default_draft", "default_heads", "eos_of", "heads_folder",
           "load_draft", "make_drafter", "make_sampling", "run", "vocab_for", "with_layout"]


def make_drafter(method: str, **p):
    """The drafter for a method name, without a model (nothing the model settles: see build_drafter)."""
    return build(method, p)


def build_drafter(model, tokenizer, method: str, **params):
    """The drafter for a method name, built for this model (decoding.build.build with the model)."""
    return build(method, params, model, tokenizer)


def make_sampling(temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> Sampling:
    if not 0 <= temperature <= 100:
        raise ValueError(f"temperature must be in [0, 100], got {temperature}")
    check_range("top_k", top_k)
    if not 0 < top_p <= 1:
        raise ValueError(f"top-p must be in (0, 1], got {top_p}")
    return Sampling(temperature, top_k, top_p, seed)


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
    if params.get("reference") is not None and drafter is not None:  # the spec's prepare step tokenises it
        raise ValueError("give reference= or a drafter built with reference_ids, not both")
    drafter = drafter or build_drafter(model, tokenizer, method, **{k: v for k, v in params.items() if k not in HOOKS})
    limit = max_positions(model.config)
    if limit is not None and len(ids) + max_new_tokens + drafter.max_depth() > limit:
        raise ValueError(f"prompt ({len(ids)} tokens) + max-new-tokens ({max_new_tokens}) + "
                         f"{drafter.name.replace('_', ' ')} span ({drafter.max_depth()} positions one step looks "
                         f"ahead) exceeds the model's {limit} positions")
    check_window(model.config, len(ids), max_new_tokens, drafter.max_depth(), drafter.name)
    spec = SPECS.get(drafter.name)
    if spec is not None and spec.check_run is not None:  # what the drafter brings must fit too (a draft's window)
        spec.check_run(drafter, len(ids), max_new_tokens)
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
