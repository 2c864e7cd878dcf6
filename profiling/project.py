"""What if this run were on an H100, A100 or H200? A projection of a recorded trace from datasheet peaks.

    python -m profiling.project TRACE.json [--dtype bf16] [--devices A100,H100,H200]

Why: a trace recorded on a laptop CPU says how many steps and query tokens a method used; the time a GPU
would need for each step is bounded below by its roofline, max(FLOPs / peak FLOP/s, bytes / bandwidth),
with the step's analytic FLOPs and bytes (profiling/flops.py). Summing over the run gives a projected
tokens/s and a projected speed-up against greedy decoding of the same tokens (one query token per step).
It is labelled a PROJECTION everywhere: no kernel launch overhead, no kernel efficiency below peak, weights
in `dtype` (bf16 by default, the dtype these GPUs run a 7B model in; fp32 uses the FP32 rate, not the tensor
cores') on both sides of the ratio: the run's steps and greedy's are costed with the bytes the projected GPU
would read, never with the CPU block kernel's (a GPU has no such kernel), so greedy against greedy is 1.00x. Drafting is counted too, each draft forward on its own roofline before the target's: a speculative
draft model's forwards (the step's draft_forwards / draft_nodes_run, the draft's shape from config["draft"],
or 2 x its parameter count per token where only that is recorded), EAGLE's layer forwards (one target-shaped
decoder layer + its fc and LM head per forward), Medusa's heads (n_heads residual blocks + the LM head). The
draft model's prefill is not counted. Real GPU steps of a small model are launch-bound and slower.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import dataclasses

from .calibrate import DATASHEET, datasheet_peak
from .flops import Arch, arch_of, draft_cost, dtype_bytes, recorded_arch, step_cost
from .trace_cli import run_on_trace, trace_parser

LABEL = ("projection from datasheet peaks (roofline lower bound per step: no launch overhead, kernels at "
         "peak, target and draft forwards) — not a measurement")
DEVICES = ("A100", "H100", "H200")


def model_arch(tr) -> Arch:
    """The recorded model's shape (trace.model["config"], flops.recorded_arch), which every roofline number
    needs; a trace without a usable one (hand-made, or a model config without sizes) is one line."""
    return recorded_arch(tr.model, f"this {tr.method} trace records no usable model config (hidden size, layers, "
                         "heads, vocab in model.config): the roofline needs the model's shape; traces written by "
                         "`python -m decoding generate --json` carry it")


def step_seconds(flops: float, nbytes: float, peak: dict) -> float:
    return max(flops / peak["flops"], nbytes / peak["bandwidth"])


def _shape(cfg: Any) -> Arch | None:
    try:
        a = arch_of(cfg)
        return a if min(a.layers, a.hidden, a.heads, a.vocab) > 0 else None
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return None


def _int(x: Any, default: int = 0) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else default


def _feature_head_cost(a: Arch, vocab: int, nodes: int, fw: int, depth: list, cfg: dict, kv_len: int,
                       nbytes: int) -> tuple[int, dict]:
    """EAGLE's drafting: one target-shaped decoder layer, fc(2h -> h) and the LM head, per forward."""
    if not fw:
        return fw, {"draft_flops": 0, "draft_bytes": 0}
    layer = dataclasses.replace(a, layers=1, vocab=vocab)
    c = draft_cost(layer, nodes, fw, kv_len, nbytes)
    return fw, {"draft_flops": c["draft_flops"] + 2 * nodes * 2 * a.hidden * a.hidden,
                "draft_bytes": c["draft_bytes"] + fw * 2 * a.hidden * a.hidden * nbytes}


def _token_heads_cost(a: Arch, vocab: int, nodes: int, fw: int, depth: list, cfg: dict, kv_len: int,
                      nbytes: int) -> tuple[int, dict]:
    """Medusa's drafting: one forward of every head on the last row, Linear(h, h) + the shared LM head."""
    k = _int(cfg.get("n_heads")) or max(depth, default=0)
    return (1 if k else 0), {"draft_flops": k * (2 * a.hidden * a.hidden + 2 * a.hidden * vocab),
                             "draft_bytes": (k * (a.hidden * a.hidden + 2 * a.hidden + vocab) + vocab * a.hidden)
                             * nbytes if k else 0}


# The drafting cost of a step by its recorded drafting mode (info["mode"], as the heads drafters write it).
HEAD_COSTS = {"eagle": _feature_head_cost, "medusa": _token_heads_cost}


def draft_costs(tr, a: Arch, nbytes: int) -> list[dict]:
    """Per step: {"flops", "bytes", "forwards"} of its drafting (zeros where nothing was drafted)."""
    cfg = tr.config if isinstance(tr.config, dict) else {}
    spec = cfg.get("draft") if isinstance(cfg.get("draft"), dict) else None
    dshape = (_shape(spec.get("config") if isinstance(spec.get("config"), dict) else spec) if spec else None)
    vocab = _int(cfg.get("draft_vocab")) or a.vocab
    out = []
    for s in tr.steps:
        info = s.info if isinstance(s.info, dict) else {}
        tree = info.get("tree") if isinstance(info.get("tree"), dict) else {}
        depth = [d for d in (tree.get("depth") or []) if isinstance(d, int)]
        nodes, fw, c = max(len(depth) - 1, 0), _int(info.get("draft_forwards")), {"draft_flops": 0, "draft_bytes": 0}
        mode = info.get("mode") if info.get("drafted") else None
        if spec is not None and fw:  # a speculative draft model
            run = _int(info.get("draft_nodes_run"), nodes)
            if dshape is not None:
                c = draft_cost(dshape, run, fw, s.kv_len, nbytes)
            else:  # only the parameter count: 2 FLOPs per parameter per token, the weights read per forward
                n = _int(spec.get("n_params"))
                c = {"draft_flops": 2 * n * run, "draft_bytes": n * nbytes * fw}
        elif mode in HEAD_COSTS:  # heads that draft from the target's own features
            fw, c = HEAD_COSTS[mode](a, vocab, nodes, fw, depth, cfg, s.kv_len, nbytes)
        out.append({"flops": c["draft_flops"], "bytes": c["draft_bytes"], "forwards": fw})
    return out


def project(trace: Any, devices=DEVICES, dtype: str = "bf16") -> dict:
    """{"label", "dtype", "tokens", "steps", "devices": {name: {ms, tokens_per_s, greedy_ms, greedy_tokens_per_s,
    speedup_vs_greedy, bound_steps: {memory, compute}, peak_flops, bandwidth}}} for a Trace or its dict."""
    from decoding.trace import Trace  # a dict or a file-loaded trace
    tr = trace if isinstance(trace, Trace) else Trace.from_dict(trace)
    d = tr.to_dict()
    unknown = [x for x in devices if x not in DATASHEET]
    if unknown:
        raise ValueError(f"unknown device {', '.join(unknown)}; datasheets known: {', '.join(DATASHEET)}")
    a = model_arch(tr)
    nb = dtype_bytes({"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}.get(dtype, dtype))
    # both sides at the bytes the projected device reads: every weight in `dtype`. A CPU block-kernel run's
    # recorded block bytes (model["linear_weight_bytes"]) are what the laptop streamed, not what a GPU would:
    # costing the run's steps with them and greedy's without invented a speed-up (4.9x greedy over greedy)
    costs = [step_cost(a, s.n_query, s.kv_len, nb) for s in tr.steps]
    drafts = draft_costs(tr, a, nb)
    n, p = len(tr.output_ids), len(tr.prompt_ids)
    greedy = [step_cost(a, p, 0, nb)] + [step_cost(a, 1, p + i, nb) for i in range(max(n - 1, 0))]
    out = {"label": LABEL, "dtype": dtype, "tokens": n, "steps": len(costs), "greedy_steps": len(greedy),
           "draft_forwards": sum(x["forwards"] for x in drafts), "devices": {}}
    for name in devices:
        peak = datasheet_peak(name, dtype)
        secs = [step_seconds(c["flops"], c["bytes"], peak) for c in costs]
        dsecs = [step_seconds(x["flops"], x["bytes"], peak) if x["forwards"] else 0.0 for x in drafts]
        g = sum(step_seconds(c["flops"], c["bytes"], peak) for c in greedy)
        t = sum(secs) + sum(dsecs)
        ridge = peak["flops"] / peak["bandwidth"]
        out["devices"][name] = {
            "ms": t * 1e3, "target_ms": sum(secs) * 1e3, "draft_ms": sum(dsecs) * 1e3, "tokens_per_s": n / t if t else 0.0, "greedy_ms": g * 1e3,
            "greedy_tokens_per_s": n / g if g else 0.0, "speedup_vs_greedy": g / t if t else 0.0,
            "bound_steps": {"memory": sum(c["intensity"] < ridge for c in costs),
                            "compute": sum(c["intensity"] >= ridge for c in costs)},
            "peak_flops": peak["flops"], "bandwidth": peak["bandwidth"]}
    return out


def format_projection(pr: dict, method: str = "") -> str:
    rows = [f"{method + ': ' if method else ''}{pr['tokens']} tokens in {pr['steps']} steps (greedy: "
            f"{pr['greedy_steps']}), weights in {pr['dtype']} — {pr['label']}",
            f"{'device':<6} {'ms':>9} {'draft ms':>9} {'tokens/s':>10} {'greedy tok/s':>13} {'speed-up':>9} {'memory-bound':>13}"]
    for name, r in pr["devices"].items():
        rows.append(f"{name:<6} {r['ms']:>9.3f} {r['draft_ms']:>9.3f} {r['tokens_per_s']:>10.0f} {r['greedy_tokens_per_s']:>13.0f} "
                    f"{r['speedup_vs_greedy']:>8.2f}x {r['bound_steps']['memory']:>6}/{pr['steps']:<6}")
    return "\n".join(rows)


def device_list(text: str) -> list[str]:
    """argparse type for --devices: comma-separated datasheet names, at least one."""
    names = [x.strip() for x in str(text).split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"must name at least one of {', '.join(DATASHEET)} (comma-separated)")
    return names


device_list.checked, device_list.kind = True, "str"


def build_parser() -> argparse.ArgumentParser:
    from decoding.cli.habits import nonempty
    ap = trace_parser("python -m profiling.project", __doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32", "tf32"),
                    help="weights' dtype and whose datasheet peak (fp32: the FP32 rate; tf32: fp32 with TF32 on)")
    ap.add_argument("--devices", default=list(DEVICES), type=device_list,
                    help=f"comma-separated, from {', '.join(DATASHEET)}")
    ap.add_argument("--gpus-link", default=None, type=nonempty, metavar="PxLINK",
                    help="also project tensor parallelism over P GPUs joined by nvlink or pcie, e.g. 8xnvlink "
                         "(datasheet link bandwidths: profiling/interconnect.py)")
    return ap


def projection_table(args: argparse.Namespace, tr) -> str:
    """The projection of a loaded trace on --devices, and with --gpus-link its tensor-parallel split."""
    table = format_projection(project(tr, args.devices, args.dtype), tr.method)
    if args.gpus_link:  # GPUs x interconnect (profiling/interconnect.py), on every datasheet that has a link
        from .interconnect import LINKS, format_tp, parse_gpus_link, tp_project
        gpus, link = parse_gpus_link(args.gpus_link)
        table += "".join("\n" + format_tp(tp_project(tr, d, gpus, link, args.dtype)) for d in args.devices
                         if d in LINKS)
    return table


def main(argv: list[str] | None = None) -> int:
    """Bad input (a missing or malformed trace, an unknown device) is one line on stderr, exit status 2."""
    return run_on_trace(build_parser(), argv, projection_table)


if __name__ == "__main__":
    sys.exit(main())
