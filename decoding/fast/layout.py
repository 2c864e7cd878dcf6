"""CPU weight layout: keep every Linear weight column-major, so that W.T (what F.linear multiplies by) is
contiguous.

Why: a decoding step multiplies only 1..32 query rows by each weight, and on CPU fp32 MKL's GEMM for so few
rows is markedly faster when its right operand W.T is contiguous than when it is the transposed view of a
row-major W (HF's stock layout). Measured on the 2-core AMD EPYC dev box, one thread, the embedded 10M
Llama, kv length 200, interleaved (`python bench/kernels/bench_layout.py`): a 1-token step 6.42 -> 5.48 ms
(1.17x), a 16-token step 13.05 -> 11.68 ms (1.12x). Values are unchanged (only strides), so it is the
same model; outputs still matched HF greedy on stock weights token for token on every bench prompt
(bench.py checks this on each run; tests/test_layout.py on tiny models).
On GPUs cuBLAS is indifferent to the transposition, so the stock layout is kept there.

"packed" goes further where decoding/fast/cpu_gemm.py's kernel builds: the weights keep their stock storage and
each nn.Linear also holds its weight as 16-column panels for a kernel whose cost hardly grows from 1 to 8
rows (MKL's nearly triples). auto picks it on CPU float32 when the kernel is available and the panels fit
in memory, else "column". A weight that is exactly de-quantised ggml blocks (a model converted from a GGUF
file: Q4_1, Q8_0 / Q4_0 / Q5_0, K-quants / Q5_1) is packed as those blocks instead (blocks.py), bitwise the same
values at 5 / 8.5 / 12 bits a weight; `model.weight_storage_` then says how many of each and what each kernel
streams, e.g. "q4_1 210, q8_0 1, k8 0, fp32 0; fp32 kernel 211 as blocks 96.1 MB, 0 as float32 0.0 MB".
Both CPU layouts also switch transformers' sdpa attention to cpu_attention's (no KV copy per query head in a
verify step; bitwise the same; DECODESCOPE_CPU_GQA=0 keeps transformers' own).
"""
from __future__ import annotations

import os

import torch

from . import cpu_attention

LAYOUTS = ("auto", "stock", "column", "packed")


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


def apply_layout(model: torch.nn.Module, layout: str = "auto", kernel: str | None = None) -> str:
    """auto: packed (else column-major) on CPU float32, where they were measured faster; stock elsewhere.
    Returns the layout used. "packed" asked for where the kernel cannot run raises ValueError (why).
    kernel: what the packed block weights run, "fp32" or "int8" (None: DECODESCOPE_CPU_KERNEL, default fp32;
    cpu_gemm.KERNEL_EXACT says what exact means in each)."""
    from . import cpu_gemm
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    p = next(model.parameters())
    cpu_fp32 = p.device.type == "cpu" and p.dtype == torch.float32
    if layout == "auto":
        layout = "stock" if not cpu_fp32 else "packed" if (
            cpu_gemm.fits_in_memory(model) and cpu_gemm.kernel()) else "column"
    if kernel == "int8" and layout != "packed":
        raise ValueError("the int8 CPU kernel runs on the packed layout only (float32 on CPU, a built kernel)")
    if layout == "packed":
        if not cpu_fp32:
            raise ValueError("the packed layout is for float32 models on CPU")
        if cpu_gemm.kernel() is None:
            raise ValueError(f"the packed layout's CPU kernel cannot run here: {cpu_gemm.why_not()}")
        cpu_gemm.pack_linears(model, kernel_name=kernel)
        model.weight_storage_ = cpu_gemm.storage_report(model)  # "q4_1 210, q8_0 1, k8 0, fp32 0; ..."
    if layout == "column":
        column_major_linears(model)
    if layout in ("packed", "column") and os.environ.get("DECODESCOPE_CPU_GQA", "1") != "0":
        cpu_attention.use_gqa_attention(model)  # a masked multi-row step reads the KV heads in place: same bits
    return layout
