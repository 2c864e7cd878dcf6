"""What each operator's weights take in a block-packed model, for the per-operator roofline.

Why: a CPU run that streams some weights as ggml blocks records the bytes its Linears read per forward
(model["linear_weight_bytes"]); spreading that total evenly per parameter gives the LM head (often Q8_0,
8.5 bits a weight) the layers' Q4_1 rate (5 bits). Each Linear is named to the operator it serves by its
module name (llama-style, GPT-NeoX, Falcon, Phi, MPT names); what no name rule covers is "other", which the
roofline spreads over the operators by their weight counts, as before.
"""
from __future__ import annotations

import torch

OPERATORS = ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "lm_head")
QKV = {"q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn", "query_key_value", "Wqkv", "qkv", "query", "key",
       "value", "q", "k", "v"}
OUT = {"o_proj", "out_proj", "o"}
UP = {"gate_proj", "up_proj", "gate_up_proj", "c_fc", "fc1", "fc_in", "dense_h_to_4h", "w1", "w3", "wi", "up"}
DOWN = {"down_proj", "fc2", "fc_out", "dense_4h_to_h", "w2", "wo", "down"}
AMBIGUOUS = {"c_proj", "dense"}  # the attention's output under an attention module, else the MLP's down


def operator_of(name: str) -> str:
    """The operator a Linear named `name` (its path in the model) belongs to, or "other"."""
    parts = name.split(".")
    last, path = parts[-1], ".".join(parts[:-1]).lower()
    if last in QKV:
        return "qkv_proj"
    if last in OUT:
        return "o_proj"
    if last in UP:
        return "mlp_up"
    if last in DOWN:
        return "mlp_down"
    if last in AMBIGUOUS:
        return "o_proj" if "attn" in path or "attention" in path else "mlp_down"
    return "other"


def bytes_by_operator(model: torch.nn.Module) -> dict[str, int] | None:
    """{operator: bytes its Linears read per forward (each weight once; block-packed ones as their blocks)}
    where some weight is block-packed; None otherwise. The values add up to cpu_gemm.block_linear_bytes."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    seen: dict[int, tuple[str, torch.nn.Module]] = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and id(m.weight) not in seen:
            seen[id(m.weight)] = ("lm_head" if m is head else operator_of(name), m)
    if not any(getattr(m, "storage", "fp32") != "fp32" for _, m in seen.values()):
        return None
    out: dict[str, int] = {}
    for op, m in seen.values():
        packed = getattr(m, "storage", "fp32") != "fp32"
        t = m.panels if packed else m.weight
        out[op] = out.get(op, 0) + t.numel() * t.element_size()
    return out
