"""A profiled decoding run: torch.profiler around the engine, one record_function range per step.

The engine calls step_context(index, kind) around every step (prefill is step 0); StepClock puts a range
"<method>/step <index>" there, times the step (CUDA events on a GPU, so the time is the device's, not the
launch queue's) and reads memory. After the run the Perfetto trace is exported and every step gets its
analytic FLOPs/bytes and roofline numbers. The result is a plain dict (PROFILE_SCHEMA) keyed by step
index like the Trace, so viz/ and the app read it without torch.

Profile dict (PROFILE_SCHEMA):
  method, config, device, device_type, dtype, dtype_bytes, arch (flops.Arch fields), wall_s,
  peaks {flops, bandwidth, device, dtype, threads, datasheet, ...} | None, datasheet {GPU: {flops, bandwidth}},
  steps[i] (i == trace step index): index, kind, n_query, kv_len, accepted, wall_ms (CUDA events on GPU),
    host_ms, engine_ms, mem_bytes, flops, linear_flops, attn_flops, attn_proj_flops, mlp_flops,
    lm_head_flops, bytes, weight_bytes, kv_read_bytes, kv_write_bytes, act_bytes, intensity,
    total_flops (+ draft_flops, draft_bytes, target_ms for speculative), achieved_flops,
    achieved_bandwidth, and with peaks: attainable_flops, bound ("memory" | "compute"), roof_fraction,
  ranges [{name, index, ts_us, dur_us}] from the Perfetto file, perfetto (its path),
  memory {kind: "cuda_allocator" | "process_rss", peak_bytes}, series (roofline.flops_series),
  totals (roofline.totals), and "sweep" (sweep.latency_sweep) when the CLI ran one.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from decoding import Sampling, Trace, run

from . import calibrate, roofline
from .flops import arch_of, bytes_counted, draft_cost, dtype_bytes, trace_costs

PROFILE_SCHEMA = "decodescope.profile/1"


def range_name(method: str, index: int) -> str:
    return f"{method}/step {index}"


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), 0 where unavailable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def peak_rss_bytes() -> int:
    """The process's RSS high-water mark (ru_maxrss is KiB on Linux, bytes on macOS)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


class StepClock:
    """step_context for decoding.generate/run: a named range, a timer and a memory reading per step."""

    def __init__(self, method: str, device: torch.device | str = "cpu"):
        self.method = method
        self.device = torch.device(device)
        self.gpu = self.device.type == "cuda"
        self.records: dict[int, dict] = {}
        self._events: list[tuple[int, Any, Any]] = []

    @contextlib.contextmanager
    def __call__(self, index: int, kind: str) -> Iterator[None]:
        rec: dict[str, Any] = {"index": index, "kind": kind, "range": range_name(self.method, index)}
        if self.gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(torch.cuda.current_stream(self.device))  # this device's stream, not the current device's
        t0 = time.perf_counter()
        with torch.profiler.record_function(rec["range"]):
            yield
        if self.gpu:
            end.record(torch.cuda.current_stream(self.device))
            self._events.append((index, start, end))
            rec["mem_bytes"] = torch.cuda.max_memory_allocated(self.device)
        else:
            rec["mem_bytes"] = rss_bytes()
        rec["host_ms"] = rec["wall_ms"] = (time.perf_counter() - t0) * 1e3
        self.records[index] = rec

    def finish(self) -> dict[int, dict]:
        """Resolve CUDA event times (one sync at the end, not per step)."""
        if self._events:
            torch.cuda.synchronize(self.device)
            for index, start, end in self._events:
                self.records[index]["wall_ms"] = start.elapsed_time(end)
            self._events.clear()
        return self.records


def _no_server_path(path: Path) -> None:
    """torch writes the file's own absolute path into it ("traceName"): a download would carry the server's
    temp folder. The file's name stays; one linear pass over the bytes."""
    raw, full = path.read_bytes(), str(path.resolve()).encode()
    for p in {full, str(path).encode()}:
        raw = raw.replace(p, path.name.encode())
    path.write_bytes(raw)


def perfetto_ranges(path: str | Path, method: str) -> list[dict]:
    """The step ranges in an exported Chrome/Perfetto trace (host-side user annotations)."""
    data = json.loads(Path(path).read_text())
    prefix = f"{method}/step "
    out = []
    for ev in data.get("traceEvents", []):
        name = ev.get("name", "")
        if ev.get("ph") == "X" and ev.get("cat") == "user_annotation" and name.startswith(prefix):
            out.append({"name": name, "index": int(name[len(prefix):]), "ts_us": ev["ts"], "dur_us": ev["dur"]})
    return sorted(out, key=lambda r: r["ts_us"])


def write_step_ranges(path: str | Path, method: str, out: str | Path) -> Path:
    """A small Perfetto file beside the full one: only the step ranges (and the process/thread names), for
    sharing or a quick look: the full export holds every operator of every step (tens of MB for a few
    dozen steps)."""
    data = json.loads(Path(path).read_text())
    prefix = f"{method}/step "
    keep = [ev for ev in data.get("traceEvents", []) if ev.get("ph") == "M" or
            (ev.get("ph") == "X" and ev.get("cat") == "user_annotation" and str(ev.get("name", "")).startswith(prefix))]
    Path(out).write_text(json.dumps({"traceEvents": keep, "displayTimeUnit": data.get("displayTimeUnit", "ms")}))
    return Path(out)


def model_device_dtype(model) -> tuple[torch.device, torch.dtype]:
    w = model.get_input_embeddings().weight
    return w.device, w.dtype


def memory_summary(device: torch.device, records: dict[int, dict]) -> dict:
    if device.type == "cuda":
        return {"kind": "cuda_allocator", "peak_bytes": max((r["mem_bytes"] for r in records.values()), default=0)}
    return {"kind": "process_rss", "peak_bytes": peak_rss_bytes()}


def build_profile(tr: Trace, records: dict[int, dict], model, peaks: dict | None,
                  ranges: list[dict] | None = None, perfetto: str | None = None, draft_model=None) -> dict:
    """Join the trace, the step clock and the analytic costs into one JSON-ready profile.

    flops/bytes are the target forward's (the roofline point); total_flops adds a draft model's work
    (speculative) so FLOPs-vs-steps series compare what each method really pays."""
    device, dtype = model_device_dtype(model)
    costs = trace_costs(tr, model.config, dtype)
    draft = arch_of(draft_model.config) if draft_model is not None else None
    steps = []
    for s, c in zip(tr.steps, costs):
        rec = records.get(s.index, {})
        step = {**c, "accepted": len(s.accepted), "wall_ms": rec.get("wall_ms", s.wall_ms),
                "host_ms": rec.get("host_ms", s.wall_ms), "engine_ms": s.wall_ms,
                "mem_bytes": rec.get("mem_bytes", 0)}
        if draft is not None:
            step.update(draft_cost(draft, s.info.get("draft_nodes_run", 0), s.info.get("draft_forwards", 0),
                                   s.kv_len, dtype_bytes(dtype)))
        step["total_flops"] = step["flops"] + step.get("draft_flops", 0)
        if "target_ms" in s.info:  # the target forward alone (speculative): its roofline time
            step["target_ms"] = s.info["target_ms"]
        steps.append(step)
    roofline.annotate(steps, peaks)
    return {"schema": PROFILE_SCHEMA, "method": tr.method, "config": tr.config,
            "device": calibrate.device_name(device), "device_type": device.type,
            "dtype": str(dtype).replace("torch.", ""), "dtype_bytes": dtype_bytes(dtype),
            "bytes_counted": bytes_counted(tr.model if isinstance(tr.model, dict) else {}),
            "arch": arch_of(model.config).to_dict(), "peaks": peaks, "datasheet": calibrate.DATASHEET,
            "steps": steps, "ranges": ranges or [], "perfetto": perfetto,
            "memory": memory_summary(device, records), "series": roofline.flops_series(steps),
            "totals": roofline.totals(steps), "wall_s": tr.wall_s}


# Kineto (torch.profiler's C++ side) writes "USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52]
# profiler_start" and "... profiler_stop" to stderr at every start and stop, at a log level above ERROR, so
# KINETO_LOG_LEVEL cannot drop them without dropping its errors: they are filtered out by line instead.
USDT_LINE = re.compile(rb"USDT:\S+ \S+ \d+:\d+ \S+\] profiler_(start|stop)\s*")


@contextlib.contextmanager
def without_usdt_lines() -> Iterator[None]:
    """Around the profiler's start or stop: what is written to the process's stderr (fd 2, where Kineto
    writes) is held, then passed on without kineto's USDT marker lines; everything else (a real error) is
    written out unchanged when the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held if not USDT_LINE.fullmatch(line))
            if kept:
                os.write(2, kept)


def profile_run(model, tokenizer, prompt: str | list[int], method: str = "greedy", *,
                max_new_tokens: int = 64, sampling: Sampling = Sampling(), trace: bool = True,
                perfetto_path: str | Path | None = None, peaks: dict | None = None,
                measure_peaks: bool = True, **params: Any) -> tuple[Trace, dict]:
    """decoding.run under torch.profiler; returns (trace, profile) and writes the Perfetto file.

    peaks: machine peaks to use (default: calibrate.peaks(), measured after the run and cached)."""
    device, dtype = model_device_dtype(model)
    clock = StepClock(method, device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda" and torch.profiler.ProfilerActivity.CUDA in torch.profiler.supported_activities():
        activities.append(torch.profiler.ProfilerActivity.CUDA)  # (a CPU build has none: minutes per op asked)
    prof = torch.profiler.profile(activities=activities)
    with without_usdt_lines():
        prof.start()
    try:
        tr = run(model, tokenizer, prompt, method, max_new_tokens=max_new_tokens, sampling=sampling,
                 trace=trace, step_context=clock, **params)
    finally:
        with without_usdt_lines():
            prof.stop()
    clock.finish()
    if perfetto_path is None:
        perfetto_path = Path(tempfile.mkdtemp(prefix="decodescope-")) / f"{method}.perfetto.json"
    Path(perfetto_path).parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(perfetto_path))
    _no_server_path(Path(perfetto_path))
    if peaks is None and measure_peaks:
        peaks = calibrate.peaks(device, dtype)
    return tr, build_profile(tr, clock.records, model, peaks, perfetto_ranges(perfetto_path, method),
                             str(perfetto_path), params.get("draft_model"))


def save_profile(profile: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile))


def load_profile(path: str | Path) -> dict:
    d = json.loads(Path(path).read_text())
    if d.get("schema") != PROFILE_SCHEMA:
        raise ValueError(f"unsupported profile schema {d.get('schema')!r} (this version reads {PROFILE_SCHEMA})")
    return d
