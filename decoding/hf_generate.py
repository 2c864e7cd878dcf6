"""DecodeScope inside Hugging Face's own API: `model.generate(**inputs, custom_generate=decodescope_generate,
method="lookahead", window=5, ...)` runs our engine as the decoding loop (transformers 5.x's hook for
decoding methods), and `custom_generate="path/to/DecodeScope", trust_remote_code=True` does the same
through the repository's custom_generate/generate.py (generate_entry below).

transformers prepares the inputs and the generation config, then calls the callable with input_ids,
logits_processor, stopping_criteria, generation_config and every keyword the callable names that
`_sample` does not (method, window, draft_model, stop_strings, ...: transformers routes them here by
signature). Greedy ids equal plain `generate(do_sample=False)` (the engine's exactness); sampling keeps the
target's distribution and draws from DecodeScope's own generator, seeded by `seed=` when given, else from
torch's global generator, so torch.manual_seed(n) before generate() decides the sample as it does in HF.
The trace comes back as `output.trace` with `return_dict_in_generate=True`, and always as `model.decodescope_trace`.

transformers' own generate arguments, where the method has a meaning for them:
  assistant_model=M        the draft model (method "speculative", the default when it is given); draft_model=
                           also takes a path or hub id, loaded on the target's device and dtype
  streamer=S               S.put(prompt), S.put(tokens) once per step with the tokens it accepted, S.end()
  stop_strings=[...]       with tokenizer=tok: the run ends after the token that completes one (kept in the
                           output, as transformers does)
  prompt_lookup_num_tokens=K, max_matching_ngram_size=N
                           prompt lookup's num_tokens / max_ngram (method "prompt_lookup", the default then)
Anything else that would change the output (repetition penalty, min length, beam search, several return
sequences, a different assistant tokenizer, scores/logits/attentions in the output, custom stopping
criteria) is refused with one ValueError naming it. transformers 5.x hands a custom_generate *callable*
neither `streamer` nor `assistant_model` (it keeps only names `_sample` lacks) and drops `tokenizer`; the
callable reads the first two from generate's own call, and stop_strings there needs decodescope_tokenizer=tok
(the folder form takes tokenizer= as transformers spells it).
Limits: batch size 1, no padding.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .api import build_drafter, check_params
from .cli.habits import decode_until
from .engine.sampling import Sampling
from .methods.registry import SPECS
from .trace import Trace


@dataclass
class DecodeScopeOutput(GenerateDecoderOnlyOutput):
    """HF's decoder-only output plus the run's trace (docs/trace.md)."""
    trace: Trace | None = None


def decodescope_generate(model, input_ids: torch.LongTensor, logits_processor=None, stopping_criteria=None,
                         generation_config=None, synced_gpus: bool = False, streamer=None,
                         method: str | None = None, seed: int | None = None, stop_strings=None,
                         decodescope_tokenizer=None, decodescope_streamer=None, decodescope_assistant=None,
                         **kwargs):
    """The custom_generate callable: one batch row through the engine; returns sequences (prompt + new).
    decodescope_streamer / decodescope_assistant: streamer / assistant_model handed on by generate_entry
    (the folder form); the callable form reads them from generate's call (transformers does not pass them).
    Every method's own parameters (window=, successors=, ...) are keywords too: the signature transformers reads
    lists them from the method specs (METHOD_KEYWORDS below), so a new method's parameters need no edit here."""
    params = {k: kwargs.pop(k) for k in list(kwargs) if k in METHOD_KEYWORDS}
    model_kwargs = kwargs
    cfg = generation_config
    _check_supported(logits_processor, stopping_criteria, cfg)  # first: beams would show as a batch
    if input_ids.shape[0] != 1:
        raise ValueError(f"DecodeScope decodes one sequence at a time; got a batch of {input_ids.shape[0]}")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise ValueError("DecodeScope does not take padded inputs (the attention mask has zeros)")
    fed_prompt = False  # transformers itself put() the prompt into a streamer given to generate
    if decodescope_streamer is None and decodescope_assistant is None:
        call = _generate_call(model)
        streamer = streamer or call.get("streamer")
        fed_prompt = streamer is not None
        decodescope_assistant = call.get("assistant_model")
    streamer = decodescope_streamer or streamer
    lookup = getattr(cfg, "prompt_lookup_num_tokens", None)
    lookup_n = getattr(cfg, "max_matching_ngram_size", None)
    method = method or ("speculative" if draft_model_given(params, decodescope_assistant) else
                        "prompt_lookup" if lookup else "lookahead")
    takes = SPECS[method].param_names() if method in SPECS else ()  # an unknown method is refused by run()
    if decodescope_assistant is not None:
        if params.get("draft_model") is not None:
            raise ValueError("give the draft as assistant_model= or draft_model=, not both")
        if "draft_model" not in takes:
            raise ValueError(f"assistant_model is a draft model: it drives method='speculative', not {method!r} "
                             "(leave method out, or drop assistant_model)")
        params["draft_model"] = decodescope_assistant
    if lookup or lookup_n:
        if "num_tokens" not in takes or "max_ngram" not in takes:
            raise ValueError(f"prompt_lookup_num_tokens / max_matching_ngram_size are prompt lookup's: use "
                             f"method='prompt_lookup' (or leave method out), not {method!r}")
        params.setdefault("num_tokens", lookup)
        params.setdefault("max_ngram", lookup_n)
    prompt = input_ids[0].tolist()
    new = int(cfg.max_length) - len(prompt) if cfg.max_new_tokens is None else int(cfg.max_new_tokens)
    if cfg.do_sample and seed is None:  # as HF sampling: torch's global generator (torch.manual_seed) decides;
        seed = int(torch.randint(0, 2**63 - 1, (1,)).item())  # the seed drawn from it is the trace's
    sampling = Sampling(float(cfg.temperature or 1.0), int(cfg.top_k or 0), float(cfg.top_p or 1.0), seed) \
        if cfg.do_sample else Sampling()
    params = {k: v for k, v in params.items() if v is not None}
    check_params(method, params)  # another method's parameter (window= with speculative) is refused by name
    stops = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings or [])
    tok = decodescope_tokenizer
    if stops and tok is None:
        raise ValueError("stop_strings needs the tokenizer to read the text: transformers does not hand tokenizer= "
                         "on to a custom_generate callable, so pass decodescope_tokenizer=tok (the folder form, "
                         "custom_generate=\"path/to/DecodeScope\", takes tokenizer=tok)")
    drafter = build_drafter(model, tok, method, **params)
    if streamer is not None and not fed_prompt:
        streamer.put(input_ids.cpu())

    def on_tokens(ids, out):
        if streamer is not None:
            streamer.put(torch.tensor(ids, dtype=torch.long))

    saved = model.generation_config.eos_token_id  # run() reads the stop token from the model's config
    model.generation_config.eos_token_id = cfg.eos_token_id
    try:
        tr = decode_until(model, tok, prompt, method, max_new_tokens=new, sampling=sampling, drafter=drafter,
                          stops=stops, on_tokens=on_tokens if streamer is not None else None)
    finally:
        model.generation_config.eos_token_id = saved
        if streamer is not None:
            streamer.end()
    model.decodescope_trace = tr
    sequences = torch.tensor([prompt + tr.output_ids], dtype=input_ids.dtype, device=input_ids.device)
    if cfg.return_dict_in_generate:
        return DecodeScopeOutput(sequences=sequences, trace=tr)
    return sequences


def draft_model_given(params: dict, assistant) -> bool:
    return assistant is not None or params.get("draft_model") is not None


# transformers hands a custom_generate callable the keywords its signature names beyond `_sample`'s: every user
# parameter of every method (from the specs), except the names this callable gives a meaning of its own (seed=
# is the sampling seed here, as in HF).
OWN = ("model", "input_ids", "logits_processor", "stopping_criteria", "generation_config", "synced_gpus",
       "streamer", "method", "seed", "stop_strings", "decodescope_tokenizer", "decodescope_streamer",
       "decodescope_assistant")
METHOD_KEYWORDS = tuple(dict.fromkeys(k.name for spec in SPECS.values() for k in spec.knobs() if k.name not in OWN))


def _signature() -> inspect.Signature:
    sig = inspect.signature(decodescope_generate)
    fixed = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    extra = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None) for k in METHOD_KEYWORDS]
    return sig.replace(parameters=fixed + extra + [sig.parameters["kwargs"]])


decodescope_generate.__signature__ = _signature()


# generate() arguments the folder form hands on under DecodeScope's own names (transformers would drop
# them before the callable sees them), and the ones it refuses because no method here has a use for them.
RENAMED = {"streamer": "decodescope_streamer", "assistant_model": "decodescope_assistant",
           "tokenizer": "decodescope_tokenizer"}
REFUSED = {"assistant_tokenizer": "a different assistant tokenizer (speculative decoding here needs a draft that "
                                  "shares the target's tokenizer)",
           "prefix_allowed_tokens_fn": "constrained decoding", "negative_prompt_ids": "negative prompts",
           "negative_prompt_attention_mask": "negative prompts"}


def generate_entry(model, inputs=None, generation_config=None, custom_generate=None, **kwargs):
    """What custom_generate/generate.py runs for `model.generate(..., custom_generate="path/to/DecodeScope",
    trust_remote_code=True)`: transformers hands it every generate() argument; the ones the callable could not
    receive are passed on under DecodeScope's names, the ones without a meaning here are refused by name."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if kwargs.pop("synced_gpus", False):
        raise ValueError("DecodeScope's custom_generate does not take synced_gpus=True (one process, one GPU)")
    bad = sorted(k for k in REFUSED if k in kwargs)
    if bad:
        raise ValueError(f"DecodeScope's custom_generate does not take {', '.join(bad)} ({REFUSED[bad[0]]})")
    for hf, ours in RENAMED.items():
        if hf in kwargs:
            kwargs[ours] = kwargs.pop(hf)
    return model.generate(inputs, generation_config=generation_config, custom_generate=decodescope_generate, **kwargs)


def _generate_call(model) -> dict:
    """streamer and assistant_model as the caller gave them to model.generate, read from generate's frame:
    transformers 5.x hands a custom_generate callable only the keywords `_sample` lacks (so neither; it
    put()s the prompt into the streamer itself). {} when no such frame is found."""
    f = sys._getframe(1)
    for _ in range(12):
        f = f.f_back
        if f is None:
            break
        loc = f.f_locals
        if f.f_code.co_name == "generate" and loc.get("self") is model and "streamer" in loc \
                and "assistant_model" in loc:
            return {"streamer": loc.get("streamer"), "assistant_model": loc.get("assistant_model")}
    return {}


SUPPORTED = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper",  # Sampling does these itself
             "MaxLengthCriteria", "EosTokenCriteria"}
OUTPUTS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")


def _check_supported(logits_processor, stopping_criteria, cfg=None) -> None:
    """Refuse what the engine would not apply (repetition penalty, min length, beams, ...), by name."""
    names = [type(p).__name__ for p in list(logits_processor or []) + list(stopping_criteria or [])]
    bad = sorted({n for n in names if n not in SUPPORTED})
    if cfg is not None:
        bad += [f"num_beams={cfg.num_beams}"] if (cfg.num_beams or 1) > 1 else []
        bad += [f"num_return_sequences={cfg.num_return_sequences}"] if (cfg.num_return_sequences or 1) > 1 else []
        bad += [k for k in OUTPUTS if getattr(cfg, k, False)]
    if bad:
        raise ValueError(f"DecodeScope's custom_generate does not apply {', '.join(bad)}; drop those generation "
                         "settings (it supports greedy, temperature / top-k / top-p sampling, max length, EOS, "
                         "stop_strings, streamer, assistant_model and prompt_lookup_num_tokens)")
