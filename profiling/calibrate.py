"""Peaks of the machine at hand: a short matmul (FLOP/s) and copy (bytes/s) benchmark, cached.

Why measure: a roofline against datasheet numbers is wrong on a CPU, a laptop GPU or a ZeroGPU slice of an
H200; a ~1 s microbenchmark in the model's own dtype gives the ceiling this run can actually reach. The
result is cached in-process (and optionally in a JSON file) so repeated profiles do not pay it again.
Datasheet peaks of common GPUs are kept beside it for comparison.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable

import torch

# Dense bf16/fp16 tensor-core peak FLOP/s and HBM/GDDR bandwidth in bytes/s, from NVIDIA's datasheets
# (docs/engineering-notes.md, "Datasheet peaks").
DATASHEET: dict[str, dict[str, float]] = {
    "A100": {"flops": 312e12, "bandwidth": 2.04e12},
    "H100": {"flops": 989e12, "bandwidth": 3.35e12},
    "H200": {"flops": 989e12, "bandwidth": 4.8e12},
    "L4": {"flops": 121e12, "bandwidth": 0.3e12},
    "A10G": {"flops": 125e12, "bandwidth": 0.6e12},
    "T4": {"flops": 65e12, "bandwidth": 0.32e12},
}

# Dense peak FLOP/s by dtype (no sparsity), from each GPU's NVIDIA datasheet: "fp32" is the non-tensor-core
# FP32 rate (what an fp32 matmul gets with TF32 off, PyTorch's default), "tf32" the TF32 tensor-core rate,
# "bf16"/"fp16" the tensor-core rate (DATASHEET's "flops").
#   A100: NVIDIA A100 Tensor Core GPU datasheet (SXM): FP32 19.5, TF32 156, BF16/FP16 312 TFLOP/s.
#   H100: NVIDIA H100 Tensor Core GPU datasheet (SXM): FP32 67, TF32 494.5, BF16/FP16 989.5 TFLOP/s.
#   H200: NVIDIA H200 Tensor Core GPU datasheet (SXM): FP32 67, TF32 494.5, BF16/FP16 989.5 TFLOP/s.
#   L4: NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, TF32 60, BF16/FP16 121 TFLOP/s (half the sparse figures).
#   A10G: NVIDIA A10 Tensor Core GPU datasheet (A10G is its AWS variant): FP32 31.2, TF32 62.5, BF16 125 TFLOP/s.
#   T4: NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1, FP16 65 TFLOP/s; Turing has no TF32 or bf16 tensor cores,
#       so tf32 is the FP32 rate and bf16 the FP16 one (an upper bound: bf16 falls back to slower kernels there).
DTYPE_PEAKS: dict[str, dict[str, float]] = {
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    "H100": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989e12, "fp16": 989e12},
    "H200": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989e12, "fp16": 989e12},
    "L4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12},
    "A10G": {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12},
    "T4": {"fp32": 8.1e12, "tf32": 8.1e12, "bf16": 65e12, "fp16": 65e12},
}
PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16")
_DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "fp32": "fp32", "tf32": "tf32", "bfloat16": "bf16",
                  "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16"}


def peak_dtype(dtype: Any) -> str:
    """'fp32' | 'tf32' | 'bf16' | 'fp16' for a torch dtype or its name ('torch.bfloat16', 'float32', 'bf16')."""
    name = str(dtype).replace("torch.", "").lower()
    if name not in _DTYPE_ALIASES:
        raise ValueError(f"no datasheet peak for dtype {dtype!r}; choose one of {', '.join(PEAK_DTYPES)}")
    return _DTYPE_ALIASES[name]


def datasheet_peak(device: str, dtype: Any = "bf16") -> dict:
    """{name, dtype, flops, bandwidth}: the datasheet peak of `device` for the dtype the matmuls run in."""
    if device not in DATASHEET:
        raise ValueError(f"unknown device {device}; datasheets known: {', '.join(DATASHEET)}")
    kind = peak_dtype(dtype)
    return {"name": device, "dtype": kind, "flops": DTYPE_PEAKS[device][kind],
            "bandwidth": DATASHEET[device]["bandwidth"]}


_CACHE: dict[str, dict] = {}
MEASURE_COUNT = 0  # how many times measure() really ran; lets tests see the cache work


def device_name(device: str | torch.device) -> str:
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"cpu:{platform.processor() or platform.machine()}"


def datasheet_for(name: str) -> dict | None:
    """Datasheet entry whose key appears in a device name ('NVIDIA H200' -> H200), else None."""
    upper = name.upper()
    for key in sorted(DATASHEET, key=len, reverse=True):  # 'A100' before 'A10', etc.
        if key in upper:
            return {"name": key, **DATASHEET[key]}
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_seconds(fn: Callable[[], Any], device: torch.device, reps: int, budget_s: float) -> float:
    """Fastest of up to `reps` timed calls (after one warm-up), stopping early once over budget."""
    fn()
    _sync(device)
    best, start = float("inf"), time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best


def measure(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
            matmul_n: int | None = None, copy_mb: int | None = None, budget_s: float = 1.0) -> dict:
    """Measure matmul FLOP/s and copy bandwidth now (no cache)."""
    global MEASURE_COUNT
    MEASURE_COUNT += 1
    dev = torch.device(device)
    gpu = dev.type == "cuda"
    n = matmul_n or (8192 if gpu else 512)
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    t_mm = _best_seconds(lambda: torch.mm(a, b, out=c), dev, 10, budget_s / 2)
    elems = (copy_mb or (1024 if gpu else 64)) * 2**20 // dtype.itemsize
    src = torch.ones(elems, device=dev, dtype=dtype)
    dst = torch.empty_like(src)
    t_cp = _best_seconds(lambda: dst.copy_(src), dev, 10, budget_s / 2)
    name = device_name(dev)
    return {"device": name, "device_type": dev.type, "dtype": str(dtype).replace("torch.", ""),
            "threads": torch.get_num_threads(), "flops": 2 * n**3 / t_mm,
            "bandwidth": 2 * elems * dtype.itemsize / t_cp,  # a copy reads and writes every byte
            "matmul_n": n, "copy_bytes": elems * dtype.itemsize, "measured_at": time.time(),
            "datasheet": datasheet_for(name)}


def _key(device: torch.device, dtype: torch.dtype) -> str:
    return f"{device_name(device)}|{device}|{dtype}|threads={torch.get_num_threads()}|torch={torch.__version__}"


def peaks(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          cache_file: str | Path | None = None, refresh: bool = False, **measure_kw: Any) -> dict:
    """Measured peaks for (device, dtype, thread count), measured once per session.

    cache_file (or $DECODESCOPE_PEAKS) keeps them across sessions; refresh=True measures again."""
    dev = torch.device(device)
    key = _key(dev, dtype)
    if key in _CACHE and not refresh:
        return {**_CACHE[key], "cached": True}
    src = cache_file or os.environ.get("DECODESCOPE_PEAKS")
    path = Path(src) if src else None
    stored = _read(path) if path else {}
    if key in stored and not refresh:
        _CACHE[key] = stored[key]
        return {**stored[key], "cached": True}
    result = measure(dev, dtype, **measure_kw)
    _CACHE[key] = result
    if path:
        stored[key] = result
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stored, indent=1))
    return {**result, "cached": False}


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def clear_cache() -> None:
    _CACHE.clear()
