"""CPU weight layout: keep every Linear weight column-major, so that W.T (what F.linear multiplies by) is
contiguous.

Why: a decoding step multiplies only 1..32 query rows by each weight, and on CPU fp32 MKL's GEMM for so few
rows is markedly faster when its right operand W.T is contiguous than when it is the transposed view of a
row-major W (HF's stock layout). Measured on the 2-core AMD EPYC dev box, one thread, the embedded 10M
Llama, kv length 200, interleaved (`python bench/bench_layout.py`): a 1-token step 6.42 -> 5.48 ms
(1.17x), a 16-token step 13.05 -> 11.68 ms (1.12x). Values are unchanged (only strides), so it is the
same model; outputs still matched HF greedy on stock weights token for token on every bench prompt
(bench.py checks this on each run; tests/test_layout.py on tiny models).
On GPUs cuBLAS is indifferent to the transposition, so the stock layout is kept there.
"""
from __future__ import annotations

import torch

LAYOUTS = ("auto", "stock", "column")


def is_column_major(w: torch.Tensor) -> bool:
    return w.dim() == 2 and w.t().is_contiguous()


@torch.no_grad()
def column_major_linears(model: torch.nn.Module) -> int:
    """Re-store each nn.Linear weight column-major in place (tied weights once); returns how many moved."""
    moved, seen = 0, set()
    for mod in model.modules():
        w = getattr(mod, "weight", None)
        if (not isinstance(mod, torch.nn.Linear) or w is None or id(w) in seen or is_column_major(w)
                or type(w) is not torch.nn.Parameter or not w.dtype.is_floating_point):
            continue  # plain float weights only: quantized or wrapped parameters keep their own storage
        seen.add(id(w))
        w.data = w.data.t().contiguous().t()
        moved += 1
    return moved


def apply_layout(model: torch.nn.Module, layout: str = "auto") -> str:
    """auto: column-major on CPU float32 (where it was measured faster), stock elsewhere. Returns the layout used."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    p = next(model.parameters())
    if layout == "auto":
        layout = "column" if p.device.type == "cpu" and p.dtype == torch.float32 else "stock"
    if layout == "column":
        column_major_linears(model)
    return layout
