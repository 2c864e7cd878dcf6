"""Grouped-query attention for CPU verify steps without copying the KV cache per query head.

Why: transformers' SDPA path gives a step of q > 1 tokens with a mask (every tree or chain step of the engine)
to `repeat_kv`, which copies each layer's whole cache from the key/value heads to every query head (3x for
SmolLM2-135M) before attention: at kv length 200 and 8 rows that copy was ~10% of the packed layout's step
(torch.profiler, aten::copy_ under aten::reshape). torch's CPU attention kernel reads the shared heads itself
when asked (`enable_gqa=True`), and on CPU it then computes bitwise the same output as on the repeated cache
(tests/test_cpu_attention.py, over row counts, cache lengths and head groupings), so the engine's tokens and
logits are unchanged. Every other case (one query row, no mask, CUDA, dropout, position bias) is
transformers' own sdpa_attention_forward, untouched.

Plugged in through transformers' public AttentionInterface / AttentionMaskInterface registries under its own
name: nothing of transformers is patched.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "decodescope_cpu_sdpa"


def gqa_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """sdpa_attention_forward, except that a masked CPU step of several rows reads the key/value heads in place
    (enable_gqa) instead of repeating them: the same bits, no cache copy."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (query.device.type != "cpu" or groups <= 1 or attention_mask is None or query.shape[2] <= 1 or dropout
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
            or kwargs.get("output_attentions", False) or key.shape[-1] != value.shape[-1]):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                         enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_gqa_attention(model: torch.nn.Module) -> bool:
    """Switch a model that runs transformers' "sdpa" attention to gqa_sdpa_forward (registered once under NAME,
    with sdpa's mask builder); returns whether it was switched. Other implementations (eager, flash) stay."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, gqa_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME
