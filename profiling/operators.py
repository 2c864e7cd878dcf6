"""One step broken down by operator, each on the roofline (analytic, like LLM-Viewer, from the same
formulas as profiling/flops.py): where a step's time goes and which operators a wider step pushes from
memory-bound towards compute-bound.

    python -m profiling.operators TRACE.json [--step K] [--device H100] [--dtype fp32|tf32|bf16|fp16]

Per layer (every layer of these decoder-only models has the same operators): the q/k/v and output
projections, attention (QK^T and AV over the cached keys, reading the KV cache), the MLP matrices; then
the LM head once. bytes = the operator's weights + its activations in and out (+ the KV read for
attention), in the trace's dtype (or --dtype). time bound = max(FLOPs / peak FLOP/s, bytes / bandwidth) — a
roofline lower bound, labelled as such. The peak is the datasheet's for that dtype: an fp32 trace is divided
by the FP32 rate (67 TFLOP/s on an H100), not the bf16 tensor-core one (989); tf32 is fp32 with TF32 on.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .calibrate import DATASHEET, PEAK_DTYPES, datasheet_peak, peak_dtype
from .flops import Arch, arch_of, dtype_bytes, recorded_bytes_by_op, recorded_linear_bytes
from .trace_cli import run_on_trace, trace_parser

MAX_STEP = 1_000_000  # --step: far above any trace (max-new-tokens <= 4096 steps)


def matrix_bytes(a: Arch, mats: dict[str, int], nbytes: int, linear_bytes: int | None,
                 by_op: dict[str, int] | None) -> dict[str, float]:
    """Each matrix operator's weight bytes for the whole step (all layers): elements x nbytes; or the
    recorded block bytes, per operator where the run recorded them (the LM head's Q8_0 blocks are not the
    layers' Q4_1), what no operator claimed ("other", or a total alone) shared by element counts."""
    elems = {k: v * (1 if k == "lm_head" else a.layers) for k, v in mats.items()}
    if linear_bytes is None:
        return {k: e * nbytes for k, e in elems.items()}
    own = by_op or {"other": linear_bytes}
    rest = own.get("other", 0) / sum(elems.values())
    return {k: own.get(k, 0) + e * rest for k, e in elems.items()}


def operators(a: Arch, q: int, kv_len: int, nbytes: int, linear_bytes: int | None = None,
              by_op: dict[str, int] | None = None) -> list[dict]:
    """[{name, per_layer, flops, bytes, intensity}] for one forward of q tokens on kv_len cached ones;
    per_layer rows count once per layer (multiply by a.layers for the step), the embedding rows and
    norms (no FLOPs) and lm_head once. The rows' bytes add up to flops.step_cost's for the same step (one accounting:
    weights, activations written and read as activation_bytes counts them, the KV cache read and written).
    linear_bytes: what the matrices and the LM head really read (flops.weight_bytes); by_op: the same bytes
    per operator (matrix_bytes)."""
    h, hd = a.hidden, a.head_dim
    qkv_out = (a.heads + 2 * a.kv_heads) * hd
    m = 2 if a.gated_mlp else 1
    mats = {"qkv_proj": h * qkv_out, "o_proj": a.heads * hd * h, "mlp_up": m * h * a.intermediate,
            "mlp_down": a.intermediate * h, "lm_head": a.vocab * h}  # weight elements
    wb = matrix_bytes(a, mats, nbytes, linear_bytes, by_op)
    row_w = {k: v / (1 if k == "lm_head" else a.layers) for k, v in wb.items()}  # a row's bytes (once per layer)
    rows = [("embed+norms", False, 0, 0, q * h + a.layers * 2 * h),  # the step's embedding rows, norm weights
            ("qkv_proj", True, 2 * q * h * qkv_out, row_w["qkv_proj"], q * (h + qkv_out)),
            ("attention", True, 2 * 2 * q * a.heads * hd * (kv_len + q), 0,
             2 * (kv_len + q) * a.kv_heads * hd + q * a.heads * hd),
            ("o_proj", True, 2 * q * a.heads * hd * h, row_w["o_proj"], q * (a.heads * hd + h))]
    rows.append(("mlp_up" + ("+gate" if a.gated_mlp else ""), True, m * 2 * q * h * a.intermediate,
                 row_w["mlp_up"], q * (h + m * a.intermediate)))
    rows.append(("mlp_down", True, 2 * q * a.intermediate * h, row_w["mlp_down"], q * (a.intermediate + h)))
    rows.append(("lm_head", False, 2 * q * h * a.vocab, row_w["lm_head"], q * a.vocab))
    out = []
    for n, per, f, w, act in rows:
        b = w + act * nbytes
        out.append({"name": n, "per_layer": per, "flops": f, "bytes": b, "intensity": f / b if b else 0.0})
    return out


def on_roofline(ops: list[dict], layers: int, peak: dict) -> list[dict]:
    """Each operator with its step total (x layers), roofline time bound and bound kind; shares of the step."""
    ridge = peak["flops"] / peak["bandwidth"]
    out = []
    for o in ops:
        k = layers if o["per_layer"] else 1
        t = max(o["flops"] / peak["flops"], o["bytes"] / peak["bandwidth"]) * k
        out.append({**o, "step_flops": o["flops"] * k, "step_bytes": o["bytes"] * k, "time_s": t,
                    "bound": "memory" if o["intensity"] < ridge else "compute"})
    total = sum(o["time_s"] for o in out) or 1.0
    for o in out:
        o["share"] = o["time_s"] / total
    return out


STORAGE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def step_breakdown(trace: Any, step: int | None = None, peak: dict | None = None, device: str = "H100",
                   dtype: str | None = None) -> dict:
    """The breakdown of one step of a trace (default: the step with the most query tokens), in `dtype`
    (default: the trace's model dtype), against `device`'s datasheet peak for that dtype (or `peak`)."""
    from decoding.trace import Trace
    tr = trace if isinstance(trace, Trace) else Trace.from_dict(trace)
    if not tr.steps:
        raise ValueError("the trace has no steps")
    i = max(range(len(tr.steps)), key=lambda j: (tr.steps[j].kind == "decode", tr.steps[j].n_query)) \
        if step is None else step
    if not 0 <= i < len(tr.steps):
        raise ValueError(f"step {i} is not in the trace (0..{len(tr.steps) - 1})")
    recorded = str(tr.model.get("dtype", "float32") if isinstance(tr.model, dict) else "float32")
    kind = peak_dtype(dtype if dtype is not None else recorded)
    if peak is None:
        peak = datasheet_peak(device, kind)
    s = tr.steps[i]
    from .project import model_arch
    a = model_arch(tr)
    model = tr.model if isinstance(tr.model, dict) else {}
    what_if = None if dtype is None else STORAGE[kind]
    lb, by_op = recorded_linear_bytes(model, what_if), recorded_bytes_by_op(model, what_if)
    ops = on_roofline(operators(a, s.n_query, s.kv_len, dtype_bytes(STORAGE[kind]), lb, by_op), a.layers, peak)
    return {"step": i, "n_query": s.n_query, "kv_len": s.kv_len, "layers": a.layers, "peak": peak,
            "dtype": kind, "recorded_dtype": recorded, "dtype_source": "as recorded" if dtype is None else "--dtype",
            "label": "analytic roofline lower bound per operator (not measured)", "operators": ops,
            "step_bytes": sum(o["step_bytes"] for o in ops),
            "weights": ("as the run read them (block kernel, per operator)" if by_op else
                        "as the run read them (block kernel)") if lb is not None else "weights at the dtype's size"}


def format_breakdown(b: dict) -> str:
    p = b["peak"]
    rows = [f"step {b['step']}: {b['n_query']} query tokens on {b['kv_len']} cached, {b['layers']} layers, on "
            f"{p.get('name', 'the given peaks')} ({p['flops'] / 1e12:.0f} TFLOP/s, {p['bandwidth'] / 1e9:.0f} GB/s), "
            f"{b['dtype']} peak and bytes ({b.get('dtype_source', 'as recorded')}) — "
            f"{b['label']}",
            f"{'operator':<14} {'xL':>3} {'MFLOP':>10} {'MB':>9} {'FLOP/B':>7} {'bound':>8} {'us':>9} {'share':>6}"]
    for o in b["operators"]:
        rows.append(f"{o['name']:<14} {b['layers'] if o['per_layer'] else 1:>3} {o['step_flops'] / 1e6:>10.3f} "
                    f"{o['step_bytes'] / 1e6:>9.3f} {o['intensity']:>7.2f} {o['bound']:>8} {o['time_s'] * 1e6:>9.3f} "
                    f"{100 * o['share']:>5.1f}%")
    if "step_bytes" in b:  # the step's total: the same bytes `profile` costs the step with
        rows.append(f"step total: {b['step_bytes'] / 1e6:.1f} MB ({b['weights']})")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    from decoding.cli.habits import int_in, nonempty
    ap = trace_parser("python -m profiling.operators", __doc__.splitlines()[0])
    ap.add_argument("--step", type=int_in(0, MAX_STEP), default=None,
                    help="step index (default: the widest decode step)")
    ap.add_argument("--device", default="H100", type=nonempty, help=f"datasheet peaks: {', '.join(DATASHEET)}")
    ap.add_argument("--dtype", default=None, choices=PEAK_DTYPES,
                    help="the dtype whose peak and bytes to use (default: the trace's model dtype)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Bad input (a missing or malformed trace, a step not in it, an unknown device) is one line, exit 2."""
    return run_on_trace(build_parser(), argv, lambda args, tr: format_breakdown(
        step_breakdown(tr, args.step, device=args.device, dtype=args.dtype)))


if __name__ == "__main__":
    sys.exit(main())
