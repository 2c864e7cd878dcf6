"""What one captured one-token decode step of a 7B-shaped bf16 Llama spends its time on: a torch.profiler
kernel table (top kernels by total time, calls per step, launches per layer, the bytes each reads), and the
step's time against the measured copy-bandwidth floor (the step's bytes / device-to-device copy bandwidth
measured here, now).

    python bench/gpu/kernel_table.py --out DIR      # on the GPU: the step item c times (7B shape, bf16, kv 1024)
    python bench/gpu/kernel_table.py --quick        # CPU, tiny shape, emulated graph: the same table of CPU ops

The step is the one bench/gpu/gpu_scaling.py's latency curve times: the engine's Core built as a run builds
it (the static cache, CUDA graphs on), random weights, a kv_len-token cache, one query token. Two profiles:
  1. the graph replay (what runs): every kernel inside the replayed graph with its device time. Kernels in a
     graph carry no aten op (the op ran at capture), so their bytes come from 2.
  2. the same step on the same fixed buffers with graphs off and record_shapes: each kernel is attributed to
     the aten op that launched it, and reads that op's input tensors (sizes x element size; a GEMM reads its
     largest input, the weight). A kernel name's bytes in the table = its bytes per call in profile 2 x its
     calls in profile 1; a kernel seen only in the replay has no bytes ("–").
On CPU the "kernels" are the aten ops that do the work (no aten op below them but views and allocations),
timed by their own CPU time, with their own inputs' bytes; same columns.

Floor = the step's analytic bytes (profiling.flops.step_cost: weights + KV read/written + activations, as
item c reports bandwidth) / the measured copy bandwidth (profiling.calibrate.measure: a copy reads and writes
every byte). Goal (bench/gpu/GPU.md): the 1-token step <= 1.5x that floor. Writes DIR/kernels.md and .json.
Imports no gradio / plotly.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from decoding.engine.core import core_options  # noqa: E402
from decoding.engine.timing import path_of, sync, time_step, timing_core  # noqa: E402
from decoding.fast.graphs import emulated_graphs  # noqa: E402
from decoding.fast.static_cache import bucket  # noqa: E402
from gpu_scaling import SHAPE_7B, SHAPE_QUICK, build  # noqa: E402
from profiling.calibrate import device_name, measure  # noqa: E402
from profiling.flops import arch_of, dtype_bytes, step_cost  # noqa: E402

GOAL_FLOOR_RATIO = 1.5
TOP = 25  # rows in kernels.md (the json keeps every kernel)
# the profiler's dtype names (c10 scalar type names) -> bytes per element
ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                 "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1,
                 "c10::Float8_e5m2": 1, "c10::complex<float>": 8}
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::_addmm_activation", "aten::_int_mm"}
# aten ops that move no data of their own: on CPU an op counts as a "kernel" when nothing below it but these ran
NO_WORK = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided", "aten::view",
           "aten::_unsafe_view", "aten::reshape", "aten::resolve_conj", "aten::resolve_neg", "aten::result_type",
           "aten::detach", "aten::detach_", "aten::lift_fresh", "aten::alias", "aten::t", "aten::transpose",
           "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select",
           "aten::contiguous", "aten::size", "aten::stride", "aten::is_nonzero", "aten::_reshape_alias",
           "aten::unflatten", "aten::flatten", "aten::split", "aten::chunk", "aten::narrow", "aten::to",
           "aten::_to_copy", "aten::numpy_T", "aten::broadcast_tensors", "aten::view_as", "aten::type_as"}


def input_bytes(name: str, shapes: list, dtypes: list) -> int | None:
    """Bytes an aten op reads: its tensor inputs' elements x element size; a GEMM: its largest input (the
    weight; the one-token activation is a rounding error). None when no input is a sized tensor."""
    sizes = []
    for shape, dt in zip(shapes or [], dtypes or []):
        if dt in ELEMENT_BYTES and isinstance(shape, (list, tuple)) and all(isinstance(x, int) for x in shape):
            n = 1
            for x in shape:
                n *= x
            sizes.append(n * ELEMENT_BYTES[dt])
    if not sizes:
        return None
    return max(sizes) if name in GEMM_OPS else sum(sizes)


def cpu_kernels(events) -> list[dict]:
    """The CPU ops that do a step's work: aten ops with no working aten op below them; time = their CPU
    time (self + the no-work ops below), bytes = their own inputs."""
    out = []
    for e in events:
        if e.device_type != DeviceType.CPU or not e.name.startswith("aten::") or e.name in NO_WORK:
            continue
        stack, working = list(e.cpu_children), False
        while stack and not working:
            c = stack.pop()
            working = c.name.startswith("aten::") and c.name not in NO_WORK
            stack.extend(c.cpu_children)
        if working:
            continue
        out.append({"name": e.name, "us": e.cpu_time_total, "op": e.name,
                    "bytes": input_bytes(e.name, e.input_shapes, getattr(e, "input_dtypes", None))})
    return out


def device_kernels(events) -> list[dict]:
    """Every kernel (and device memcpy / memset) the device ran, with its device time in us."""
    return [{"name": e.name, "us": e.time_range.elapsed_us(), "op": None, "bytes": None}
            for e in events if e.device_type == DeviceType.CUDA]


def attributed(events) -> dict[str, dict]:
    """{kernel name: {bytes per call, launching aten op}} from an eager profile with record_shapes: each
    kernel belongs to the aten op whose launch it correlates with (torch.profiler's FunctionEvent.kernels)."""
    per: dict[str, list] = {}
    for e in events:
        if e.device_type != DeviceType.CPU:
            continue
        for k in getattr(e, "kernels", []):
            per.setdefault(k.name, []).append((e.name, input_bytes(e.name, e.input_shapes,
                                                                   getattr(e, "input_dtypes", None))))
    out = {}
    for name, calls in per.items():
        known = [b for _, b in calls if b is not None]
        ops = sorted({op for op, _ in calls})
        out[name] = {"bytes_per_call": sum(known) / len(known) if known else None, "op": ", ".join(ops)}
    return out


def profiled_step(core, step: tuple, device: torch.device, shapes: bool):
    """torch.profiler around one step (the step undone afterwards: the cache stays at kv_len)."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts, record_shapes=shapes) as prof:
        core.forward(*step)
        sync(device)
    core.commit([])
    return prof.events()


def table(kernels: list[dict], attr: dict[str, dict], layers: int) -> list[dict]:
    """One row per kernel name: total us, calls, launches per layer, bytes (attributed), share of the step."""
    rows: dict[str, dict] = {}
    for k in kernels:
        r = rows.setdefault(k["name"], {"kernel": k["name"], "us": 0.0, "calls": 0, "bytes": 0, "op": k["op"],
                                        "bytes_known": True})
        r["us"] += k["us"]
        r["calls"] += 1
        b = k["bytes"] if k["bytes"] is not None else (attr.get(k["name"]) or {}).get("bytes_per_call")
        if b is None:
            r["bytes_known"] = False
        else:
            r["bytes"] += b
        if r["op"] is None and k["name"] in attr:
            r["op"] = attr[k["name"]]["op"]
    total = sum(r["us"] for r in rows.values()) or 1.0
    out = []
    for r in sorted(rows.values(), key=lambda r: -r["us"]):
        known = r.pop("bytes_known")
        r["bytes"] = int(r["bytes"]) if known else None
        r["per_layer"] = r["calls"] / layers
        r["share"] = r["us"] / total
        r["gb_per_s"] = r["bytes"] / (r["us"] * 1e-6) / 1e9 if r["bytes"] and r["us"] > 0 else None
        r["op"] = r["op"] or "–"
        out.append(r)
    return out


def markdown(doc: dict) -> str:
    m, s = doc["meta"], doc["step"]
    unit = "kernels (device time)" if m["device_type"] == "cuda" else "CPU ops (CPU time; the CPU stand-in for kernels)"
    lines = [f"# Kernel table of one 1-token decode step{' (quick: CPU, tiny shape; not the goal)' if m['quick'] else ''}",
             "", f"{m['device']}, {m['dtype']}, torch {m['torch']}; Llama {m['layers']} layers x {m['hidden']} hidden, "
             f"random weights, kv length {m['kv_len']}; path: {m['path']['label']}; command `{m['command']}`; "
             f"{m['finished']}.", "",
             f"Step: {s['ms']:.3f} ms (median of {s['reps']} timed steps); profiled {unit} of the {m['profiled']}: "
             f"{s['profiled_ms']:.3f} ms in "
             f"{s['launches']} launches ({s['launches'] / m['layers']:.1f} per layer).",
             f"Floor: {s['bytes'] / 1e6:.1f} MB (weights + KV + activations, analytic) / {s['copy_gb_per_s']:.0f} GB/s "
             f"measured copy bandwidth = {s['floor_ms']:.3f} ms; step / floor = **{s['floor_ratio']:.2f}x** "
             f"(goal <= {GOAL_FLOOR_RATIO}x: **{doc['goal']['status']}**). Bytes attributed to the table's kernels: "
             f"{s['attributed_bytes'] / 1e6:.1f} MB.", "",
             f"| kernel | aten op | total us | share | calls | per layer | MB read | GB/s |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["kernels"][:TOP]:
        name = r["kernel"] if len(r["kernel"]) <= 90 else r["kernel"][:87] + "..."
        lines.append(f"| `{name}` | {r['op']} | {r['us']:.1f} | {100 * r['share']:.1f}% | {r['calls']} | "
                     f"{r['per_layer']:.2f} | " + (f"{r['bytes'] / 1e6:.2f}" if r["bytes"] is not None else "–")
                     + " | " + (f"{r['gb_per_s']:.1f}" if r["gb_per_s"] else "–") + " |")
    if len(doc["kernels"]) > TOP:
        lines.append(f"| ({len(doc['kernels']) - TOP} more in kernels.json) | | "
                     f"{sum(r['us'] for r in doc['kernels'][TOP:]):.1f} | | "
                     f"{sum(r['calls'] for r in doc['kernels'][TOP:])} | | | |")
    lines += ["", "Bytes: each kernel's launching aten op's input tensors (sizes x element size; a GEMM its weight), "
              "from the same step run eagerly on the same buffers with record_shapes; '–' where no op could be "
              "attributed. bench/gpu/kernel_table.py says how."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CPU, tiny shape, emulated graph: seconds")
    ap.add_argument("--kv-len", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None, help="default bench/results/gpu-<device>/ (gpu-rehearse with --quick)")
    a = ap.parse_args(argv)
    gpu = torch.cuda.is_available() and not a.quick
    if not gpu and not a.quick:
        print("error: no CUDA device here; --quick runs the table on CPU at a tiny shape", file=sys.stderr)
        raise SystemExit(2)
    device = torch.device("cuda" if gpu else "cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    shape = SHAPE_7B if gpu else SHAPE_QUICK
    kv = a.kv_len if gpu else 32
    reps = a.reps if gpu else 3
    if a.out:
        out = Path(a.out)
    else:
        sys.path.insert(0, str(ROOT / "bench"))
        from gpu_run import device_slug
        out = ROOT / "bench" / "results" / f"gpu-{device_slug() if gpu else 'rehearse'}"
    out.mkdir(parents=True, exist_ok=True)
    graphs_ctx = contextlib.nullcontext() if gpu else emulated_graphs()  # CPU: the emulated graph path
    with graphs_ctx:
        model = build(shape, str(device), dtype)
        layers = model.config.num_hidden_layers
        vocab = model.config.vocab_size
        prompt = [(13 * i + 5) % vocab for i in range(kv)]
        step = ([7 % vocab], [-1], [0])

        def fresh(**opts):
            with core_options(**opts):
                core = timing_core(model, kv + bucket(1), True)
            core.prefill(prompt)
            core.commit(list(range(kv)))
            time_step(core, *step, 3)  # warm-up; on the graph path: the bucket's capture
            return core

        source = "graph replay" if gpu else "emulated graph replay (CPU ops)"
        core = fresh()
        times = time_step(core, *step, reps)
        events = profiled_step(core, step, device, shapes=not gpu)
        path = path_of(core)
        if gpu:
            kernels = device_kernels(events)
            eager = fresh(graphs=False, fixed=True)  # the same data path, no graph: kernels keep their aten op
            eager_events = profiled_step(eager, step, device, shapes=True)
            attr = attributed(eager_events)
            del eager
            if not kernels:  # a profiler that shows no kernel inside a graph replay: the eager step's, labelled
                kernels, source = device_kernels(eager_events), "eager step (the replay showed no kernels)"
        else:
            kernels, attr = cpu_kernels(events), {}
    rows = table(kernels, attr, layers)
    copy = measure(device, dtype, copy_mb=None if gpu else 16, budget_s=2.0 if gpu else 0.5)
    cost = step_cost(arch_of(model.config), 1, kv, dtype_bytes(dtype))
    ms = statistics.median(times)
    floor_ms = cost["bytes"] / copy["bandwidth"] * 1e3
    ratio = ms / floor_ms
    doc = {"meta": {"device": device_name(device), "device_type": device.type, "dtype": str(dtype).replace("torch.", ""),
                    "torch": torch.__version__, "quick": not gpu, "layers": layers, "hidden": shape["hidden_size"],
                    "shape": shape, "kv_len": kv, "path": path, "profiled": source,
                    "command": "python bench/gpu/kernel_table.py" + (" --quick" if not gpu else ""),
                    "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
           "step": {"ms": ms, "reps": reps, "times_ms": times, "profiled_ms": sum(r["us"] for r in rows) / 1e3,
                    "launches": sum(r["calls"] for r in rows), "bytes": cost["bytes"],
                    "weight_bytes": cost["weight_bytes"], "kv_read_bytes": cost["kv_read_bytes"],
                    "attributed_bytes": sum(r["bytes"] or 0 for r in rows),
                    "copy_gb_per_s": copy["bandwidth"] / 1e9, "copy_bytes": copy["copy_bytes"],
                    "floor_ms": floor_ms, "floor_ratio": ratio},
           "goal": {"goal": f"7B bf16 1-token step <= {GOAL_FLOOR_RATIO}x the measured copy-bandwidth floor",
                    "value": f"{ratio:.2f}x ({ms:.2f} ms vs {floor_ms:.2f} ms)",
                    "status": "info" if not gpu else ("pass" if ratio <= GOAL_FLOOR_RATIO else "fail")},
           "kernels": rows}
    (out / "kernels.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "kernels.md").write_text(markdown(doc))
    print(markdown(doc))
    return doc


if __name__ == "__main__":
    main()
