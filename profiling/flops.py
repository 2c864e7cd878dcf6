"""Analytic FLOPs and bytes of one decoding step, from the model config alone.

Why analytic: the profiler cannot count attention FLOPs on CPU (FlopCounterMode reports 0 for SDPA and
ignores masks) and no longer exposes DRAM byte counters, so each step's cost is computed from the
architecture and the step's actual shape: n_query new tokens attending to kv_len cached tokens plus the
step's own tokens. A matmul [m, k] x [k, n] costs 2*m*k*n FLOPs (multiply + add), as FlopCounterMode counts.
The attention term counts the full [q, kv_len + q] score block, as dense SDPA/eager kernels compute it
(the tree mask hides entries but does not skip their FLOPs).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# Families whose MLP is two matrices (up, down) with GELU; everything else is treated as gated SiLU
# (gate, up, down) like llama, qwen2, mistral, gemma.
TWO_MATRIX_MLP = {"gpt2", "gpt_bigcode", "gpt_neox", "gptj", "gpt_neo", "opt", "phi", "falcon", "bloom",
                  "starcoder2", "codegen"}
DTYPE_BYTES = {"float32": 4, "float": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
               "half": 2, "float64": 8, "int8": 1, "float8_e4m3fn": 1}


@dataclass(frozen=True)
class Arch:
    """The shape numbers that decide a step's cost."""
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated_mlp: bool
    tied: bool

    def to_dict(self) -> dict:
        return asdict(self)


def _get(cfg: dict, *names: str, default: Any = None) -> Any:
    for n in names:
        v = cfg.get(n)
        if v is not None:
            return v
    return default


def arch_of(config: Any) -> Arch:
    """Arch from a transformers config, its to_dict(), or a trace's model["config"] (scalars only)."""
    cfg = config if isinstance(config, dict) else config.to_dict()
    cfg = {**cfg, **(cfg.get("text_config") or {})} if isinstance(cfg.get("text_config"), dict) else cfg
    model_type = str(_get(cfg, "model_type", default="?"))
    hidden = int(_get(cfg, "hidden_size", "n_embd", "d_model"))
    heads = int(_get(cfg, "num_attention_heads", "n_head"))
    kv_heads = int(_get(cfg, "num_key_value_heads", "n_head_kv", default=heads))
    head_dim = int(_get(cfg, "head_dim", default=hidden // heads))
    gated = model_type not in TWO_MATRIX_MLP
    inter = _get(cfg, "intermediate_size", "n_inner", "ffn_dim")
    return Arch(model_type=model_type, layers=int(_get(cfg, "num_hidden_layers", "n_layer")), hidden=hidden,
                heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                intermediate=int(inter) if inter else 4 * hidden, vocab=int(_get(cfg, "vocab_size")),
                gated_mlp=gated, tied=bool(_get(cfg, "tie_word_embeddings", default=True)))


def recorded_arch(model: Any, refusal: str) -> Arch:
    """The shape a trace recorded (its model["config"]) with every size above zero, which every roofline
    number needs; else ValueError(refusal), the caller's one line (a hand-made trace, a config without sizes)."""
    cfg = model.get("config") if isinstance(model, dict) else None
    try:
        a = arch_of(cfg if isinstance(cfg, dict) else {})
        ok = min(a.layers, a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate, a.vocab) > 0
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        ok = False
    if not ok:
        raise ValueError(refusal)
    return a


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element for a torch dtype or its name ('bfloat16', 'torch.float16', 'fp32')."""
    name = str(dtype).replace("torch.", "")
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}")
    return DTYPE_BYTES[name]


def linear_flops(a: Arch, q: int) -> dict[str, int]:
    """FLOPs of the weight matmuls for q query tokens: per-layer projections and MLP, and the LM head.

    These are exactly the aten.mm/addmm FLOPs FlopCounterMode sees (biases and norms excluded)."""
    h, hd = a.hidden, a.head_dim
    qkv = 2 * q * h * (a.heads + 2 * a.kv_heads) * hd
    out = 2 * q * a.heads * hd * h
    mlp = (3 if a.gated_mlp else 2) * 2 * q * h * a.intermediate
    return {"attn_proj": a.layers * (qkv + out), "mlp": a.layers * mlp, "lm_head": 2 * q * h * a.vocab}


def attention_flops(a: Arch, q: int, kv_len: int) -> int:
    """QK^T and AV over keys = kv_len + q for every head (GQA shares K/V, not the FLOPs)."""
    keys = kv_len + q
    return a.layers * 2 * (2 * q * a.heads * a.head_dim * keys)


def weight_bytes(a: Arch, q: int, nbytes: int, linear_bytes: int | None = None) -> int:
    """Weights read once per forward: every layer's matrices, the LM head, and q embedding rows.
    linear_bytes: what the matrices and the LM head really take when not nbytes a weight (the CPU kernel's
    exact Q4_1 / Q8_0 blocks, recorded by the trace as model["linear_weight_bytes"]); the norms and the
    embedding rows stay at nbytes."""
    h, hd = a.hidden, a.head_dim
    layer = h * (a.heads + 2 * a.kv_heads) * hd + a.heads * hd * h + (3 if a.gated_mlp else 2) * h * a.intermediate
    embed_rows = q * h  # the embedding lookup reads only the rows of the step's tokens
    if linear_bytes is not None:
        return linear_bytes + nbytes * (a.layers * 2 * h + embed_rows)
    return nbytes * (a.layers * (layer + 2 * h) + a.vocab * h + embed_rows)


def activation_bytes(a: Arch, q: int) -> int:
    """Elements each matmul reads and writes per token (inputs, outputs), plus the logits.

    Flash/SDPA kernels do not materialise the score block, so it is left out."""
    h, hd = a.hidden, a.head_dim
    m = 2 if a.gated_mlp else 1
    per_layer = (h + (a.heads + 2 * a.kv_heads) * hd  # qkv in/out
                 + 2 * a.heads * hd                      # attention out, o_proj in
                 + 2 * h                                 # o_proj out, mlp in
                 + m * a.intermediate + a.intermediate   # up(/gate) out, down in
                 + h)                                    # down out
    return q * (a.layers * per_layer + a.vocab)


def step_cost(a: Arch, n_query: int, kv_len: int, nbytes: int = 4, linear_bytes: int | None = None) -> dict:
    """FLOPs and bytes of one forward of n_query tokens against kv_len cached tokens (linear_bytes: see
    weight_bytes)."""
    lin = linear_flops(a, n_query)
    attn = attention_flops(a, n_query, kv_len)
    kv_row = a.layers * 2 * a.kv_heads * a.head_dim * nbytes  # K and V of one token, all layers
    w = weight_bytes(a, n_query, nbytes, linear_bytes)
    kv_read, kv_write = kv_len * kv_row, n_query * kv_row
    act = activation_bytes(a, n_query) * nbytes
    linear = sum(lin.values())
    flops = linear + attn
    total_bytes = w + kv_read + kv_write + act
    return {"flops": flops, "linear_flops": linear, "attn_flops": attn, **{f"{k}_flops": v for k, v in lin.items()},
            "bytes": total_bytes, "weight_bytes": w, "kv_read_bytes": kv_read, "kv_write_bytes": kv_write,
            "act_bytes": act, "intensity": flops / total_bytes}


def trace_costs(trace: Any, config: Any = None, dtype: Any = None) -> list[dict]:
    """step_cost for every step of a Trace (or its dict); config/dtype default to what the trace recorded.
    A run whose Linears read exact blocks (model["linear_weight_bytes"]) is costed with those bytes, unless
    another dtype is asked for (a what-if)."""
    d = trace if isinstance(trace, dict) else trace.to_dict()
    model = d.get("model") or {}
    a = arch_of(config if config is not None else model.get("config", {}))
    nb = dtype_bytes(dtype if dtype is not None else model.get("dtype", "float32"))
    lb = recorded_linear_bytes(model, dtype)
    return [{"index": s["index"], "kind": s["kind"], "n_query": s["n_query"], "kv_len": s["kv_len"],
             **step_cost(a, s["n_query"], s["kv_len"], nb, lb)} for s in d["steps"]]


MAX_RECORDED_BYTES = 10 ** 13  # a recorded weight size above 10 TB is not a real model: ignored


def recorded_linear_bytes(model: dict, dtype: Any = None) -> int | None:
    """The bytes a run's Linears really read per forward (model["linear_weight_bytes"], the CPU block
    kernel's), or None: none recorded, a crafted value, or a what-if in another dtype than the run's. The
    one rule trace_costs (profile) and profiling.operators both use, so they cost a step alike."""
    lb = model.get("linear_weight_bytes") if isinstance(model, dict) else None
    same_dtype = dtype is None or dtype_bytes(dtype) == dtype_bytes(model.get("dtype", "float32"))
    return lb if same_dtype and type(lb) is int and 0 < lb <= MAX_RECORDED_BYTES else None  # untrusted


def bytes_counted(model: dict) -> str:
    """What a step's bytes count, in words for every label that shows them: the quantised blocks the CPU
    kernel streams when the trace recorded them (model["linear_weight_bytes"]), else weights in the run's
    dtype. A label that said float32 over block bytes would be off by 4-6x."""
    lb = recorded_linear_bytes(model)
    if lb is None:
        return f"weights in {str(model.get('dtype') or 'float32') if isinstance(model, dict) else 'float32'}"
    kernel = model.get("cpu_kernel") if isinstance(model.get("cpu_kernel"), dict) else {}
    name = str(kernel.get("kernel") or "block")
    return f"weights as the quantised blocks the CPU {name} kernel streams ({lb / 1e6:.1f} MB a forward)"


OPERATOR_KEYS = ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "lm_head", "other")


def recorded_bytes_by_op(model: dict, dtype: Any = None) -> dict[str, int] | None:
    """The recorded block bytes per operator (model["linear_weight_bytes_by_op"], decoding/fast/
    operator_bytes.py), or None: none recorded, or not a split of the accepted linear_weight_bytes
    (untrusted: known keys, non-negative ints adding up to exactly that total)."""
    total = recorded_linear_bytes(model, dtype)
    by_op = model.get("linear_weight_bytes_by_op") if isinstance(model, dict) else None
    if total is None or not isinstance(by_op, dict) or not set(by_op) <= set(OPERATOR_KEYS):
        return None
    if not all(type(v) is int and v >= 0 for v in by_op.values()) or sum(by_op.values()) != total:
        return None
    return by_op


def draft_cost(a: Arch, nodes: int, forwards: int, kv_len: int, nbytes: int = 4) -> dict:
    """A draft model's work inside one speculative step, from the counts the step records.

    Linear FLOPs are exact for `nodes` tokens in total; attention assumes every node sees kv_len + nodes
    keys (an upper bound), and weights and the KV cache are read once per draft forward."""
    if nodes <= 0 or forwards <= 0:
        return {"draft_flops": 0, "draft_bytes": 0}
    c = step_cost(a, nodes, kv_len, nbytes)
    kv_row = a.layers * 2 * a.kv_heads * a.head_dim * nbytes
    extra = (forwards - 1) * (weight_bytes(a, 0, nbytes) + kv_len * kv_row)
    return {"draft_flops": c["flops"], "draft_bytes": c["bytes"] + extra}
