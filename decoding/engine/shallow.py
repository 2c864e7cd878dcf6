"""A partial forward of a decoder-only model: its first k layers (plus an extra layer) on a cache of their own.

Why: self-speculative decoding (Kangaroo, Liu et al. 2024, arXiv 2404.18911) drafts with the target's own
shallow layers. The pieces are the HF model's own modules (model.model.embed_tokens, .layers[i],
.rotary_emb, .norm and the LM head), called in the order the model's forward calls them; nothing is
patched. Works for the usual `model.model.layers` layout (Llama, Qwen2, Mistral, Phi-3, Gemma); any other
model gets one clear ShallowError.

The cache is a transformers DynamicCache indexed by the layers' own layer_idx (0..k-1), so an extra layer
built with layer_idx = k (the adapter) lives in the same cache. Rows above `length` form a region of tree
nodes, as in engine/core.py; keep_rows() moves the accepted ones down and drops the rest.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache

from ..models import cache_kwarg

NEEDS = ("embed_tokens", "layers", "norm", "rotary_emb")


class ShallowError(ValueError):
    """The model does not have the decoder layout a partial forward needs; the message is for the user."""


def decoder_parts(model) -> nn.Module:
    """model.model (the decoder stack), checked: embed_tokens, layers, norm and rotary_emb must exist,
    the layers must have input_layernorm and self_attn (what attention_only() calls)."""
    inner = getattr(model, "model", None)
    missing = [n for n in NEEDS if inner is None or not hasattr(inner, n)]
    if missing or not len(inner.layers) or model.get_output_embeddings() is None:
        raise ShallowError(f"{type(model).__name__} does not have the decoder layout self-speculative decoding "
                           f"needs (model.model.embed_tokens / layers / norm / rotary_emb and an LM head; "
                           f"missing: {', '.join(missing) or 'LM head'})")
    layer = inner.layers[0]
    if not (hasattr(layer, "input_layernorm") and hasattr(layer, "self_attn")):
        raise ShallowError(f"{type(layer).__name__} has no input_layernorm / self_attn: its layers do not fit "
                           "the partial forward")
    return inner


def check_exit(model, k: int) -> int:
    """k as a valid exit layer: 1 <= k < the model's layers (k = all layers would be the target itself)."""
    n = len(decoder_parts(model).layers)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k < n:
        raise ShallowError(f"exit layer must be in [1, {n - 1}] for this {n}-layer model, got {k}")
    return k


def run_layers(inner: nn.Module, layers: list[nn.Module], x: torch.Tensor, position_ids: torch.Tensor,
               mask: torch.Tensor | None, cache: DynamicCache | None) -> torch.Tensor:
    """x [1, q, h] through `layers` in order (the model's own call, as its forward makes it);
    mask: additive float [1, 1, q, past + q] or None (causal, training); cache: appended to when given."""
    pe = inner.rotary_emb(x, position_ids=position_ids)
    kw = {cache_kwarg(layers[0]): cache} if cache is not None else {}
    for layer in layers:
        x = layer(x, attention_mask=mask, position_ids=position_ids, position_embeddings=pe,
                  use_cache=cache is not None, **kw)
    return x


def attention_only(inner: nn.Module, layer: nn.Module, h_in: torch.Tensor, position_ids: torch.Tensor,
                   mask: torch.Tensor | None, cache: DynamicCache) -> None:
    """Fill `cache` with layer's keys and values for rows whose INPUT h_in the target already computed
    (its hidden_states): the attention block only, the MLP (two thirds of a layer) is skipped, and the
    layer's own input norm and projections make the same keys and values a full layer call would."""
    pe = inner.rotary_emb(h_in, position_ids=position_ids)
    layer.self_attn(hidden_states=layer.input_layernorm(h_in), position_embeddings=pe, attention_mask=mask,
                    **{cache_kwarg(layer.self_attn): cache})


def keep_rows(cache: DynamicCache, past: int, keep: list[int]) -> None:
    """Keep region rows `keep` (ascending, indices above `past`) as rows past.., drop the rest of the region:
    the same compaction engine/core.py's commit does for the target's cache."""
    idx = None if keep == list(range(len(keep))) else torch.tensor(keep, dtype=torch.long) + past
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", True):
            continue
        for name in ("keys", "values"):
            t = getattr(layer, name)
            if idx is not None and idx.device != t.device:  # once, pinned and queued: a blocking copy would
                idx = idx.pin_memory().to(t.device, non_blocking=True) if t.is_cuda else idx.to(t.device)  # drain
            if idx is not None:
                t[..., past:past + len(keep), :] = t.index_select(-2, idx)
            setattr(layer, name, t[..., :past + len(keep), :])
