"""The reference every greedy method is judged against: transformers' own greedy `generate`.

Why measured and not only promised: in fp32 every method returns HF greedy's tokens (the engine's
forward is the same arithmetic, tests/test_exactness.py); in bf16/fp16 on a GPU the 4D tree mask selects
other attention kernels than HF's causal path, so near-tied logits can flip and outputs can diverge
(measured on an H100: docs in REFERENCE "GPU facts"). So reduced-precision runs report what happened.
"""
from __future__ import annotations

from typing import Iterable

import torch



def hf_greedy(model, prompt_ids: list[int], max_new_tokens: int,
              eos_token_id: int | Iterable[int] | None = None) -> list[int]:
    """New token ids of `model.generate(do_sample=False)`, stopping where the engine stops (EOS or limit)."""
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    kw = dict(do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0)
    if eos_token_id is None:  # the engine never stops early: neither may HF (no generation-config EOS)
        kw.update(eos_token_id=None, min_new_tokens=max_new_tokens)
    else:
        kw["eos_token_id"] = eos_token_id if isinstance(eos_token_id, int) else list(eos_token_id)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    return out[0, ids.shape[1]:].tolist()


def measure(model, prompt_ids: list[int], output_ids: list[int], max_new_tokens: int,
            eos_token_id: int | Iterable[int] | None = None, cut=None) -> dict:
    """Trace-ready agreement of an output with HF greedy on the same model:
    {"reference": "hf_greedy", "identical", "first_divergence", "compared", "dtype", "device", "text"}.
    cut(ids) -> ids: the rule that ended the output early (stop strings), applied to the reference too, so
    an output stopped at a stop string is compared with HF greedy stopped there."""
    ref = hf_greedy(model, prompt_ids, max_new_tokens, eos_token_id)
    if cut is not None:
        ref = cut(ref)
    w = model.get_input_embeddings().weight
    a = agreement(list(output_ids), ref)
    return {"reference": "hf_greedy", **a, "dtype": str(w.dtype).replace("torch.", ""), "device": str(w.device),
            "text": describe_agreement(a)}


def agreement(ids: list[int], reference: list[int]) -> dict:
    """Compare an output with a reference (HF greedy): exactness as measured, not as promised.

    Returns {"identical": bool, "first_divergence": k or None, "compared": n}; k indexes new tokens."""
    n = min(len(ids), len(reference))
    k = next((i for i in range(n) if ids[i] != reference[i]), None)
    if k is None and len(ids) != len(reference):
        k = n
    return {"identical": k is None, "first_divergence": k, "compared": n}


def describe_agreement(a: dict) -> str:
    """'identical' or 'first divergence at token k' (the words the CLI, race and trace use)."""
    return "identical" if a["identical"] else f"first divergence at token {a['first_divergence']}"
