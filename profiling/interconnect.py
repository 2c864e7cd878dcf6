"""GPUs x interconnect: what a recorded run would cost sharded over P GPUs (tensor parallelism) or with the
lookahead window split over P GPUs (lookahead parallelism), from datasheet peaks and link bandwidths.

A PROJECTION, like profiling/project.py: each GPU's part of a step on its roofline (profiling/flops.py),
collectives on the link's datasheet bandwidth, no kernel or collective launch overhead unless
`latency_us` is given (datasheets publish no collective latency; 0 = the bandwidth term only).

Link bandwidths are the datasheets' per-GPU totals for both directions; a collective's bytes flow both
ways at once, so one direction gets half:
  - NVIDIA H100 Tensor Core GPU datasheet (2023): H100 SXM NVLink 900 GB/s, PCIe Gen5 128 GB/s.
  - NVIDIA H200 Tensor Core GPU datasheet (2024): NVLink 900 GB/s, PCIe Gen5 128 GB/s.
  - NVIDIA A100 Tensor Core GPU datasheet (2021): NVLink 600 GB/s (SXM), PCIe Gen4 64 GB/s.
Tensor parallelism (transformers' plan, Megatron-style): per layer two all-reduces of the step's
activations (q x hidden), plus the LM head's all-gather of the logits; a ring all-reduce moves
2(P-1)/P of the buffer through each GPU's link. Lookahead parallelism (Fu et al. 2024, arXiv 2402.02057):
each GPU runs x0, row 0 up to its columns, its columns and its share of the candidates; the exchange is
an all-gather of a few ids per rank and a broadcast of the accepted path's K/V rows
(decoding/parallel/lookahead_parallel.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .calibrate import DATASHEET, datasheet_peak
from .flops import Arch, dtype_bytes, recorded_arch, step_cost

LINKS: dict[str, dict[str, dict[str, float]]] = {  # GPU -> link -> both-direction bytes/s per GPU
    "H100": {"nvlink": 900e9, "pcie": 128e9},
    "H200": {"nvlink": 900e9, "pcie": 128e9},
    "A100": {"nvlink": 600e9, "pcie": 64e9},
}
SOURCES = {"H100": "NVIDIA H100 Tensor Core GPU datasheet", "H200": "NVIDIA H200 Tensor Core GPU datasheet",
           "A100": "NVIDIA A100 Tensor Core GPU datasheet"}
LABEL = ("projection from datasheet peaks and link bandwidths (roofline per GPU, collectives on the link's one-"
         "direction bandwidth) — not a measurement")
# The lookahead paper's models are LLaMA-2 / CodeLlama 7B-70B; 7B's shape (its config.json) for what-ifs.
LLAMA_7B = Arch(model_type="llama", layers=32, hidden=4096, heads=32, kv_heads=32, head_dim=128, intermediate=11008,
                vocab=32000, gated_mlp=True, tied=False)


NO_SHAPE = ("this trace records no usable model config (hidden size, layers, heads, vocab): the projection needs "
            "the model's shape; pass arch= (e.g. LLAMA_7B)")


def link_bandwidth(device: str, link: str) -> float:
    """One direction's bytes/s of `link` on `device` (half the datasheet's both-direction figure)."""
    if device not in LINKS:
        raise ValueError(f"no interconnect datasheet for {device}; known: {', '.join(LINKS)}")
    if link not in LINKS[device]:
        raise ValueError(f"unknown link {link!r} for {device}; choose {', '.join(LINKS[device])}")
    return LINKS[device][link] / 2


def parse_gpus_link(text: str) -> tuple[int, str]:
    """'8xnvlink' -> (8, 'nvlink'): the one input the projection CLI takes for this."""
    n, sep, link = str(text).lower().partition("x")
    if not sep or not n.strip().isdigit() or not 1 <= int(n) <= 1024 or link.strip() not in ("nvlink", "pcie"):
        raise ValueError(f"GPUs x interconnect must look like 8xnvlink or 2xpcie (1..1024 GPUs), got {text!r}")
    return int(n), link.strip()


def _ring_allreduce_s(nbytes: float, gpus: int, bw: float, latency_s: float) -> float:
    return 0.0 if gpus == 1 else 2 * (gpus - 1) / gpus * nbytes / bw + 2 * (gpus - 1) * latency_s


def _allgather_s(nbytes: float, gpus: int, bw: float, latency_s: float) -> float:
    return 0.0 if gpus == 1 else (gpus - 1) / gpus * nbytes / bw + (gpus - 1) * latency_s


def tp_step(a: Arch, q: int, kv_len: int, nb: int, gpus: int, peak: dict, bw: float, latency_s: float) -> dict:
    """One tensor-parallel forward: each GPU's 1/P of FLOPs and bytes on its roofline, plus collectives."""
    c = step_cost(a, q, kv_len, nb)
    compute = max(c["flops"] / gpus / peak["flops"], c["bytes"] / gpus / peak["bandwidth"])
    act = q * a.hidden * nb
    comm = a.layers * 2 * _ring_allreduce_s(act, gpus, bw, latency_s) + _allgather_s(q * a.vocab * nb, gpus, bw,
                                                                                      latency_s)
    return {"compute_s": compute, "comm_s": comm}


def tp_project(trace: Any, device: str = "H100", gpus: int = 8, link: str = "nvlink", dtype: str = "bf16",
               latency_us: float = 0.0, arch: Arch | None = None) -> dict:
    """The trace's steps (query sizes, cache lengths) on `gpus` x `device` joined by `link`, against the
    same run on one GPU. Inputs named in the result."""
    from decoding.trace import Trace

    tr = trace if isinstance(trace, Trace) else Trace.from_dict(trace)
    a = arch or recorded_arch(tr.model, NO_SHAPE)
    nb = dtype_bytes({"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype))
    peak, bw = datasheet_peak(device, dtype), link_bandwidth(device, link)
    steps = [tp_step(a, s.n_query, s.kv_len, nb, gpus, peak, bw, latency_us * 1e-6) for s in tr.steps]
    one = [tp_step(a, s.n_query, s.kv_len, nb, 1, peak, bw, 0.0) for s in tr.steps]
    compute, comm = sum(x["compute_s"] for x in steps), sum(x["comm_s"] for x in steps)
    single = sum(x["compute_s"] for x in one)
    return {"label": LABEL, "inputs": {"device": device, "gpus": gpus, "link": link, "dtype": dtype,
                                       "link_GBps_one_direction": bw / 1e9, "latency_us": latency_us,
                                       "source": SOURCES.get(device, "")},
            "compute_ms": compute * 1e3, "comm_ms": comm * 1e3, "ms": (compute + comm) * 1e3,
            "one_gpu_ms": single * 1e3, "speedup_vs_one_gpu": single / (compute + comm) if compute + comm else 0.0,
            "comm_share": comm / (compute + comm) if compute + comm else 0.0}


def lp_query_sizes(window: int, levels: int, candidate_tokens: int, gpus: int) -> list[int]:
    """Query tokens per GPU in one lookahead-parallel step (the split of lookahead_parallel.py)."""
    from decoding.parallel.lookahead_parallel import split_columns
    out = []
    for r, cols in enumerate(split_columns(window, gpus)):
        row0 = (max(cols) + 1) if cols else 1
        share = candidate_tokens // gpus + (1 if r < candidate_tokens % gpus else 0)
        out.append(row0 + (levels - 1) * len(cols) + share)
    return out


def lp_project(trace: Any, device: str = "A100", gpus: int = 8, link: str = "nvlink", dtype: str = "fp16",
               latency_us: float = 0.0, arch: Arch | None = None) -> dict:
    """A lookahead trace's steps (window W, levels, candidate tokens, accepted tokens) with the window split
    over `gpus`: each step costs its slowest GPU's roofline plus the K/V broadcast of the accepted path.
    Against the same steps on one GPU and against greedy (one token per forward). arch: the model's shape
    (default the trace's; LLAMA_7B for the paper's 7B setting). Every input is named in the result."""
    from decoding.methods.windows.lookahead import SPEC as LOOKAHEAD  # the method whose window is split
    from decoding.trace import Trace

    tr = trace if isinstance(trace, Trace) else Trace.from_dict(trace)
    if tr.method != LOOKAHEAD.name:
        raise ValueError(f"lookahead parallelism splits a lookahead window; this is a {tr.method} trace")
    a = arch or recorded_arch(tr.model, NO_SHAPE)
    nb = dtype_bytes({"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype))
    peak, bw, lat = datasheet_peak(device, dtype), link_bandwidth(device, link), latency_us * 1e-6
    kv_row = a.layers * 2 * a.kv_heads * a.head_dim * nb
    W = int(tr.config.get("window", 5))
    lp = one = 0.0
    for s in tr.steps:
        if s.kind != "decode":
            c = step_cost(a, s.n_query, s.kv_len, nb)
            t = max(c["flops"] / peak["flops"], c["bytes"] / peak["bandwidth"])
            lp, one = lp + t, one + t
            continue
        levels = max(len(s.info.get("window") or [[]]), 1)
        window_tokens = W + (levels - 1) * W
        cand = max(s.n_query - window_tokens, 0)
        qs = lp_query_sizes(W, levels, cand, gpus)
        per = [step_cost(a, q, s.kv_len, nb) for q in qs]
        slowest = max(max(c["flops"] / peak["flops"], c["bytes"] / peak["bandwidth"]) for c in per)
        bcast = 0.0 if gpus == 1 else len(s.accepted) * kv_row / bw + lat * (gpus - 1)
        gather = _allgather_s(gpus * (1 + W + cand) * 8, gpus, bw, lat)  # each rank's predictions at the read rows
        c1 = step_cost(a, s.n_query, s.kv_len, nb)
        lp += slowest + bcast + gather
        one += max(c1["flops"] / peak["flops"], c1["bytes"] / peak["bandwidth"])
    n, p = len(tr.output_ids), len(tr.prompt_ids)
    greedy = 0.0
    for i in range(n):
        c = step_cost(a, p if i == 0 else 1, 0 if i == 0 else p + i - 1, nb)
        greedy += max(c["flops"] / peak["flops"], c["bytes"] / peak["bandwidth"])
    arch_name = "the trace's model" if arch is None else ("LLaMA-2-7B shape" if arch == LLAMA_7B else "given")
    return {"label": LABEL, "inputs": {"device": device, "gpus": gpus, "link": link, "dtype": dtype,
                                       "link_GBps_one_direction": bw / 1e9, "latency_us": latency_us,
                                       "arch": arch_name, **dataclasses.asdict(a), "window": W,
                                       "ngram": tr.config.get("ngram"), "guesses": tr.config.get("guesses"),
                                       "tokens": n, "steps": len(tr.steps), "source": SOURCES.get(device, "")},
            "lp_ms": lp * 1e3, "one_gpu_ms": one * 1e3, "greedy_ms": greedy * 1e3,
            "speedup_vs_one_gpu_lookahead": one / lp if lp else 0.0, "speedup_vs_greedy": greedy / lp if lp else 0.0}


def format_tp(pr: dict) -> str:
    i = pr["inputs"]
    return (f"{i['gpus']} x {i['device']} over {i['link']} ({i['link_GBps_one_direction']:.0f} GB/s one direction, "
            f"{i['source']}), {i['dtype']}: {pr['ms']:.4g} ms ({pr['compute_ms']:.4g} compute + {pr['comm_ms']:.4g} "
            f"collectives, {100 * pr['comm_share']:.0f}% communication); one GPU {pr['one_gpu_ms']:.4g} ms; "
            f"speed-up {pr['speedup_vs_one_gpu']:.2f}x — {pr['label']}")


__all__ = ["DATASHEET", "LINKS", "LLAMA_7B", "lp_project", "tp_project", "parse_gpus_link", "format_tp"]
