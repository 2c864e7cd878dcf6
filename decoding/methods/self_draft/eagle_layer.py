"""The EAGLE layer's drafting forward: the head's own weights, its own KV tensors, no per-call set-up.

Why: EAGLE drafts one tree level per call, so on a CPU the per-call cost of transformers' decoder layer
(DynamicCache concatenation, rotary recomputed from position ids, kwargs plumbing) was most of the drafting
time: 1.4 ms a call for a layer whose weights take ~0.3 ms to stream. Here keys and values live in
preallocated [1, kv_heads, capacity, head_dim] tensors (rows written in place, the tree region dropped by
resetting a counter), cos/sin come from a table built once, and the attention is one SDPA call. Same
weights, same arithmetic as EagleHead.forward (tests/test_heads.py compares them); training keeps using
EagleHead.forward. Where the head is packed for the CPU kernel (beside a packed target), the whole call after
`fc` is one decodescope::llama_step with one layer (decoding/fast/cpu_step.py): the layer, its KV write and the
final norm without ~25 small ops from Python a level.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from decoding.fast import cpu_step
from decoding.methods.self_draft.heads import EagleHead


class EagleLayer:
    """Drafting state of one EagleHead: `used` rows of keys/values (the drafter truncates back to its
    real-feature pairs after each step's tree)."""

    def __init__(self, head: EagleHead, capacity: int = 256):
        self.head, self.layer, self.norm = head, head.body.layers[0], head.body.norm
        c = head.body.config
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        w = head.fc.weight
        # keys and values of the one layer in one store [1, 2, kv_heads, capacity, head_dim] (llama_step's layout)
        self._store(torch.zeros(1, 2, self.nkv, capacity, self.hd, dtype=w.dtype, device=w.device))
        self.used = 0
        self._rope(1024)
        # the one-call path: a head packed for the CPU kernel (beside a packed target), its op available
        self.fast = (w.device.type == "cpu" and w.dtype == torch.float32 and not cpu_step.switched_off()
                     and cpu_step.layer_why_not(self.layer) is None)
        self.weights = cpu_step.Weights([self.layer], [self.norm.weight]) if self.fast else None
        self.eps = float(self.layer.input_layernorm.variance_epsilon)
        self.inter = self.layer.mlp.gate_proj.out_features

    def _store(self, store: torch.Tensor) -> None:
        self.store, self.k, self.v = store, store[:, 0], store[:, 1]

    def _rope(self, n: int) -> None:
        """cos/sin of positions 0..n-1 (the table doubles as longer texts come: a 128K-position model
        would otherwise hold 100+ MB of it)."""
        rot, w = self.head.body.rotary_emb, self.head.fc.weight
        pos = torch.arange(n, device=w.device, dtype=torch.float32)
        freqs = pos[:, None] * rot.inv_freq.float().to(w.device)[None]
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos = (emb.cos() * rot.attention_scaling).to(w.dtype)
        self.sin = (emb.sin() * rot.attention_scaling).to(w.dtype)

    def reset(self) -> None:
        self.used = 0

    def truncate(self, n: int) -> None:
        """Keep the first n rows (drop the tree region above the real-feature pairs)."""
        self.used = n

    def _ensure(self, need: int) -> None:
        cap = self.k.shape[2]
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        store = self.store.new_zeros(1, 2, self.nkv, cap, self.hd)
        store[..., :self.used, :] = self.store[..., :self.used, :]
        self._store(store)

    @torch.inference_mode()
    def __call__(self, emb: torch.Tensor, feat: torch.Tensor, pos: list[int] | torch.Tensor,
                 mask: torch.Tensor | None, top: int | None = None) -> torch.Tensor:
        """emb, feat [T, h]; pos: the T rows' positions (a list, or a long tensor on the device with `top`,
        their maximum, so that no value has to come back to the host); mask [T, used + T] additive
        (None: all visible).
        Appends the T rows' keys/values after the `used` ones; returns the predicted features [T, h]."""
        T, s = emb.shape[0], self.used
        top = max(pos) if top is None else top
        if top >= self.cos.shape[0]:
            self._rope(max(top + 1, 2 * self.cos.shape[0]))
        at = pos if torch.is_tensor(pos) else torch.tensor(pos, dtype=torch.long, device=self.cos.device)
        self._ensure(s + T)
        L, a = self.layer, self.layer.self_attn
        if self.fast:
            x = self.head.fc(torch.cat([emb, feat], dim=-1))
            mask = torch.zeros(T, s + T, dtype=x.dtype) if mask is None else mask
            out = torch.ops.decodescope.llama_step(
                x, self.cos[at], self.sin[at], self.store, mask, self.weights.get(), [],
                [self.nh, self.nkv, self.hd, self.inter], self.eps, float(a.scaling), [])[0]
            self.used = s + T
            return out
        x = self.head.fc(torch.cat([emb, feat], dim=-1))[None]
        h = L.input_layernorm(x)
        q = a.q_proj(h).view(1, T, self.nh, self.hd).transpose(1, 2)
        k = a.k_proj(h).view(1, T, self.nkv, self.hd).transpose(1, 2)
        v = a.v_proj(h).view(1, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, self.cos[at][None], self.sin[at][None])
        self.k[:, :, s:s + T], self.v[:, :, s:s + T] = k, v
        self.used = s + T
        o = F.scaled_dot_product_attention(q, self.k[:, :, :s + T], self.v[:, :, :s + T],
                                           attn_mask=None if mask is None else mask[None, None],
                                           enable_gqa=self.nkv != self.nh)
        x = x + a.o_proj(o.transpose(1, 2).reshape(1, T, self.nh * self.hd))
        x = x + L.mlp(L.post_attention_layernorm(x))
        return self.norm(x)[0]
