"""Attention of one engine step as two passes merged by log-sum-exp, so that a mask-free kernel does the
big part.

Why: every query of an engine step sees the whole KV cache (the accepted prefix) and, inside the step, only
its tree ancestors (masks.py). Flash-attention kernels take no arbitrary mask, so with a tree mask
transformers runs SDPA with a [q, cache + q] float mask. Split instead:
  1. the q queries against the cache, no mask: flash-attn's `flash_attn_func` on CUDA when the optional
     package is installed (it returns the log-sum-exp), a torch computation otherwise;
  2. the q queries against the step's own q keys with the q x q tree block of the mask (small: plain torch);
  3. out = (e^lse1 out1 + e^lse2 out2) / (e^lse1 + e^lse2), computed stably.
Same result up to float rounding (tests/test_split_attention.py compares it with SDPA on CPU; the
flash-attn kernel itself runs only where a GPU and the package exist). It plugs in through transformers'
public AttentionInterface: `load(..., attn="decodescope_split")`. The engine's masks always let every query
see the whole cache; other callers (e.g. HF generate with padding) must not use this implementation.
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface

from .masks import chain_parents, step_mask

NAME = "decodescope_split"


def _flash_cache_pass(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """flash-attn over the cache: inputs [B, H, S, D]; returns (out [B, H, q, D] fp32, lse [B, H, q]) or None."""
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
        return None
    try:
        from flash_attn import flash_attn_func  # optional, GPU only
    except ImportError:
        return None
    out, lse, _ = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale,
                                  causal=False, return_attn_probs=True)
    return out.transpose(1, 2).float(), lse.float()


def _torch_pass(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None = None):
    """Reference pass in fp32: (out [B, H, q, D], lse [B, H, q]); a fully masked row gives lse = -inf, out = 0."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is not None:
        s = s + mask.float()
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.clamp_min(torch.finfo(torch.float32).min).unsqueeze(-1))
    return torch.matmul(p, v.float()), lse


def merge(out1: torch.Tensor, lse1: torch.Tensor, out2: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """Softmax over the union of two key sets from each part's normalised output and log-sum-exp."""
    lse = torch.logaddexp(lse1, lse2)
    w1 = torch.exp(lse1 - lse).nan_to_num(0.0).unsqueeze(-1)  # -inf - -inf (both empty) -> weight 0
    w2 = torch.exp(lse2 - lse).nan_to_num(0.0).unsqueeze(-1)
    return out1 * w1 + out2 * w2


def split_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None,
                            dropout: float = 0.0, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers attention function: query [B, H, q, D], key/value [B, Hkv, cache + q, D], mask
    [B, 1, q, cache + q] additive float (or None = causal chain); returns ([B, q, H, D], None)."""
    n_rep = query.shape[1] // key.shape[1]
    if n_rep > 1:  # grouped-query attention: each key head serves n_rep query heads
        key, value = key.repeat_interleave(n_rep, dim=1), value.repeat_interleave(n_rep, dim=1)
    q_len, total = query.shape[2], key.shape[2]
    cache = total - q_len
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if attention_mask is None:  # a plain causal chain of the step's tokens
        attention_mask = step_mask(chain_parents(q_len), cache, torch.float32, query.device)
    out, lse = _torch_pass(query, key[:, :, cache:], value[:, :, cache:], scale, attention_mask[..., cache:total])
    if cache:
        part = _flash_cache_pass(query, key[:, :, :cache], value[:, :, :cache], scale)
        if part is None:
            part = _torch_pass(query, key[:, :, :cache], value[:, :, :cache], scale)
        out = merge(part[0], part[1], out, lse)
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, split_attention_forward)
