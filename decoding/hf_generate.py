"""DecodeScope inside Hugging Face's own API: `model.generate(**inputs, custom_generate=decodescope_generate,
method="lookahead", window=5, ...)` runs our engine as the decoding loop (transformers 5.x's hook for
decoding methods), and `custom_generate="path/to/DecodeScope", trust_remote_code=True` does the same
through the repository's custom_generate/generate.py.

transformers prepares the inputs and the generation config, then calls the callable with input_ids,
logits_processor, stopping_criteria, generation_config and every keyword the callable names that
`_sample` does not (method, window, draft_model, ...: transformers routes them here by signature).
Greedy ids equal plain `generate(do_sample=False)` (the engine's exactness); sampling keeps the target's
distribution but draws from DecodeScope's own generator (`seed`). The trace comes back as `output.trace`
with `return_dict_in_generate=True`, and always as `model.decodescope_trace`.
Limits: batch size 1, no padding; logits processors other than temperature / top-k / top-p, and stopping
criteria other than max length and EOS, are refused by name (they would silently change the output).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .api import make_drafter, run
from .engine.sampling import Sampling
from .trace import Trace


@dataclass
class DecodeScopeOutput(GenerateDecoderOnlyOutput):
    """HF's decoder-only output plus the run's trace (docs/trace.md)."""
    trace: Trace | None = None


def decodescope_generate(model, input_ids: torch.LongTensor, logits_processor=None, stopping_criteria=None,
                         generation_config=None, synced_gpus: bool = False, streamer=None,
                         method: str = "lookahead", window: int | None = None, ngram: int | None = None,
                         guesses: int | None = None, text_span: int | None = None, num_tokens: int | None = None,
                         max_ngram: int | None = None, draft_model=None, draft_tokens: int | None = None,
                         tree=None, tree_budget: int | None = None, staged: bool = False, seed: int = 0,
                         block: int | None = None, heads: str | None = None, budget: int | None = None,
                         draft_vocab: int | None = None, confidence: float | None = None,
                         acceptance: str | None = None, decodescope_tokenizer=None, **model_kwargs):
    """The custom_generate callable: one batch row through decoding.run; returns sequences (prompt + new)."""
    if input_ids.shape[0] != 1:
        raise ValueError(f"DecodeScope decodes one sequence at a time; got a batch of {input_ids.shape[0]}")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise ValueError("DecodeScope does not take padded inputs (the attention mask has zeros)")
    _check_supported(logits_processor, stopping_criteria)
    cfg = generation_config
    prompt = input_ids[0].tolist()
    new = int(cfg.max_length) - len(prompt) if cfg.max_new_tokens is None else int(cfg.max_new_tokens)
    sampling = Sampling(float(cfg.temperature or 1.0), int(cfg.top_k or 0), float(cfg.top_p or 1.0), seed) \
        if cfg.do_sample else Sampling()
    params = dict(window=window, ngram=ngram, guesses=guesses, text_span=text_span, num_tokens=num_tokens,
                  max_ngram=max_ngram, block=block, heads=heads, budget=budget, draft_vocab=draft_vocab,
                  confidence=confidence, acceptance=acceptance)
    if method == "speculative":
        params = dict(draft_model=draft_model, draft_tokens=draft_tokens, tree=tree, tree_budget=tree_budget,
                      staged=staged, confidence=confidence)
    drafter = make_drafter(method, **{k: v for k, v in params.items() if v is not None})
    eos = cfg.eos_token_id
    if streamer is not None:
        streamer.put(input_ids.cpu())

    def on_step(step, out):
        if streamer is not None and step.accepted:
            streamer.put(torch.tensor(step.accepted))

    saved = model.generation_config.eos_token_id  # run() reads the stop token from the model's config
    model.generation_config.eos_token_id = eos
    try:
        tr = run(model, decodescope_tokenizer, prompt, method, max_new_tokens=new, sampling=sampling,
                 drafter=drafter, on_step=on_step)
    finally:
        model.generation_config.eos_token_id = saved
    if streamer is not None:
        streamer.end()
    model.decodescope_trace = tr
    sequences = torch.tensor([prompt + tr.output_ids], dtype=input_ids.dtype, device=input_ids.device)
    if cfg.return_dict_in_generate:
        return DecodeScopeOutput(sequences=sequences, trace=tr)
    return sequences


SUPPORTED = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper",  # Sampling does these itself
             "MaxLengthCriteria", "EosTokenCriteria"}


def _check_supported(logits_processor, stopping_criteria) -> None:
    """Refuse what the engine would not apply (repetition penalty, min length, stop strings, ...)."""
    names = [type(p).__name__ for p in list(logits_processor or []) + list(stopping_criteria or [])]
    bad = sorted({n for n in names if n not in SUPPORTED})
    if bad:
        raise ValueError(f"DecodeScope's custom_generate does not apply {', '.join(bad)}; drop those generation "
                         "settings (it supports greedy, temperature / top-k / top-p sampling, max length and EOS)")
