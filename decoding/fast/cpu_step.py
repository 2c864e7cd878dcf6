"""The whole decoding step of a Llama-shaped model in one kernel call on CPU (decodescope::llama_step).

Why: with the packed kernel the default model's Linears are ~8.7 ms of a 14 ms one-row step (torch.profiler,
one thread); the rest is ~40 small tensor ops per layer dispatched from Python (norms, rotary, the KV
concatenation, SDPA, residuals), each microseconds of overhead on a 576-wide row. llama.cpp pays none of it.
cpu_step.cpp runs a step's 30 layers in one call: the same packed Linears, the glue as plain loops.

When: a model whose layers are transformers' Llama layers (LlamaForCausalLM, Qwen2ForCausalLM with its q/k/v
biases, MistralForCausalLM: RMSNorm, SiLU gate, rotary from the model's own rotary_emb, every layer full
attention), packed by the packed layout with fused
q/k/v and gate/up (cpu_gemm.fuse_linears), float32 on CPU. Anything else — and DECODESCOPE_CPU_STEP=0 —
keeps transformers' forward (why_not() says why). The engine's Core uses it through CpuKV, a cache of its
own ([layers, 2, kv_heads, capacity, head_dim], grown by doubling), with the same mask and the same commit
(row moves along axis -2) as the other caches.

Values: the Linears are the very kernel calls transformers' forward makes with the packed layout; RMSNorm and
rotary round as transformers' code does; attention and the variance sum in another order than ATen's
kernels (ulp-level differences, like the packed kernel's against MKL). Tokens are checked against HF greedy
for every method (tests/test_cpu_step.py), and hidden states and logits against transformers' forward.
"""
from __future__ import annotations

import os

import torch


ROUND = 256  # capacity granularity of a CpuKV (doubles when a step needs more)
# transformers' classes whose decoder layer is Llama's (RMSNorm, rotary, SiLU gate), by model_type; Qwen2 adds
# biases to q/k/v, Mistral a sliding window (refused where a layer uses it).
ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "mistral"}
NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm")  # all three: w * (x * rsqrt(mean(x^2) + eps))


def switched_off() -> bool:
    """DECODESCOPE_CPU_STEP=0: every model and head keeps transformers' forward."""
    return os.environ.get("DECODESCOPE_CPU_STEP", "1") == "0"


def why_not(model) -> str | None:
    """Why the one-call step cannot run this model, or None."""
    if switched_off():
        return "switched off (DECODESCOPE_CPU_STEP=0)"
    cfg = getattr(model, "config", None)
    if cfg is None or ARCHS.get(type(model).__name__) != getattr(cfg, "model_type", None):
        return f"{type(model).__name__} is not one of {', '.join(ARCHS)}"
    from . import cpu_gemm  # here, not at import: `python -m decoding.fast.cpu_gemm` must not find it imported
    if cpu_gemm.kernel() is None:
        return f"no CPU kernel ({cpu_gemm.why_not()})"
    emb = model.get_input_embeddings().weight
    if emb.device.type != "cpu" or emb.dtype != torch.float32:
        return "float32 on CPU only"
    if getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return "not the plain Llama block (SiLU gate)"
    from ..models import sliding_window
    if sliding_window(cfg):
        return "sliding-window attention"
    if model._forward_hooks or model._forward_pre_hooks:
        return "the model has forward hooks"
    for layer in model.model.layers:
        if why := layer_why_not(layer):
            return why
    return None


def layer_why_not(layer) -> str | None:
    """Why one decoder layer cannot run in the op (also the EAGLE head's own layer), or None."""
    from .cpu_gemm import PackedLinear
    attn, mlp = layer.self_attn, layer.mlp
    mods = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    if not all(isinstance(m, PackedLinear) for m in mods):
        return "its Linears are not packed (layout packed)"
    if any(m.bias is not None for m in mods[3:]) or len({m.bias is None for m in mods[:3]}) != 1:
        return "biases other than on all of q/k/v (Qwen2's)"
    if attn.q_proj._group is None or attn.q_proj._group.members != mods[:3] or \
            mlp.gate_proj._group is None or mlp.gate_proj._group.members != mods[4:6]:
        return "q/k/v or gate/up are not fused"
    if any(m._forward_hooks or m._forward_pre_hooks for m in layer.modules()):
        return "a layer has forward hooks"
    if not all(type(n).__name__ in NORMS for n in (layer.input_layernorm, layer.post_attention_layernorm)):
        return f"its norms are not {' / '.join(NORMS)}"
    if type(getattr(mlp, "act_fn", None)).__name__ not in ("SiLU", "SiLUActivation"):
        return "its MLP's activation is not SiLU"
    return None


def layer_weights(layer) -> list[torch.Tensor]:
    """One layer's six kernel tensors (input norm, q/k/v panels, o panels, post-attention norm, gate/up panels,
    down panels), read each step: a weight updated in place since it was packed is packed again first, as
    PackedLinear's own forward would."""
    a, m = layer.self_attn, layer.mlp
    for mod in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj):
        if mod.weight._version != mod._packed_at:
            mod._group._update() if mod._group is not None else mod._repack()
    if a.q_proj._group is None or m.gate_proj._group is None:
        raise RuntimeError("a weight update split a fused group (its storages differ): "
                           "the one-call CPU step cannot run this model any more")
    return [layer.input_layernorm.weight, a.q_proj._group.panels, a.o_proj.panels,
            layer.post_attention_layernorm.weight, m.gate_proj._group.panels, m.down_proj.panels]


class Weights:
    """The op's weight list for some layers (+ extra tensors after them), built once and built again only when a
    weight was updated in place (its version moved): rebuilding it from the modules each step cost ~1 ms a step
    of nn.Module attribute lookups on the default model's 30 layers."""

    LINEARS = (("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
               ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj"))

    def __init__(self, layers: list, extra: list[torch.Tensor]):
        self.layers, self.extra = layers, extra
        self.params = [getattr(getattr(layer, a), b).weight for layer in layers for a, b in self.LINEARS] + \
            [layer.input_layernorm.weight for layer in layers] + [layer.post_attention_layernorm.weight for layer in layers]
        self.versions: list[int] | None = None
        self.cached: list[torch.Tensor] = []

    def get(self) -> list[torch.Tensor]:
        versions = [p._version for p in self.params]
        if versions != self.versions:
            self.cached = [t for layer in self.layers for t in layer_weights(layer)] + self.extra
            self.versions = [p._version for p in self.params]  # after any re-pack layer_weights made
        return self.cached


class CpuKV:
    """The step's weights and a KV store of its own for one Core. `run` is Core._dynamic's model call."""

    def __init__(self, model):
        self.model = model
        inner = model.model
        cfg = model.config
        self.layers = list(inner.layers)
        a0 = self.layers[0].self_attn
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = a0.head_dim
        self.scale = float(a0.scaling)
        self.eps = float(self.layers[0].input_layernorm.variance_epsilon)
        self.inter = self.layers[0].mlp.gate_proj.out_features
        self.store = torch.zeros(0)
        self.capacity = 0
        self._weights = Weights(self.layers, [self.model.model.norm.weight])
        self._biases: list[torch.Tensor] | None = None

    def weights(self) -> list[torch.Tensor]:
        """The kernel's weight list: every layer's six tensors (layer_weights), then the final norm."""
        return self._weights.get()

    def biases(self) -> list[torch.Tensor]:
        """Every layer's q/k/v biases (Qwen2), or [] where they have none (the Parameters: updates show)."""
        if self._biases is None:
            self._biases = [] if self.layers[0].self_attn.q_proj.bias is None else [
                getattr(layer.self_attn, n).bias for layer in self.layers for n in ("q_proj", "k_proj", "v_proj")]
        return self._biases

    def reserve(self, n: int) -> None:
        if n <= self.capacity:
            return
        cap = max(ROUND, self.capacity)
        while cap < n:
            cap *= 2
        new = torch.zeros((len(self.layers), 2, self.kv_heads, cap, self.head_dim))
        if self.capacity:
            new[..., :self.capacity, :] = self.store
        self.store, self.capacity = new, cap

    def tensors(self) -> list[torch.Tensor]:
        return [self.store] if self.capacity else []

    def run(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, keep, want: list[int]):
        """(logits [rows kept, vocab], [hidden states at `want`]) for ids/pos [1, q] and mask [1, 1, q, kv];
        keep as transformers' logits_to_keep (0 = all rows, k = the last k, a tensor = those rows)."""
        self.reserve(mask.shape[-1])
        x = self.model.model.embed_tokens(ids)
        cos, sin = self.model.model.rotary_emb(x, position_ids=pos)
        n = len(self.layers)
        outs = torch.ops.decodescope.llama_step(
            x[0], cos, sin, self.store, mask.to(torch.float32), self.weights(), self.biases(),
            [self.heads, self.kv_heads, self.head_dim, self.inter], self.eps, self.scale,
            [k % (n + 1) for k in want])
        h = outs[0]
        if torch.is_tensor(keep):
            h = h.index_select(0, keep)
        elif keep:
            h = h[-keep:]
        return self.model.lm_head(h), outs[1:]


def cpu_kv(model) -> CpuKV | None:
    """A CpuKV for this model where the one-call step can run it, else None."""
    return None if why_not(model) else CpuKV(model)
