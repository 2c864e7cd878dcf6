"""Collective time per decoding step, from torch.profiler on rank 0.

Why the profiler and not a stopwatch: in a tensor-parallel forward the all-reduces and all-gathers
happen inside transformers' layers, where no timer of ours can sit. The profiler records them: on CPU the
gloo work ("gloo:all_reduce", "gloo:all_gather") and the c10d ops that issue and wait for it; on CUDA the
NCCL kernels ("ncclDevKernel_AllReduce...") on the GPU's own timeline. A step's collective time is the
union of those events' intervals inside the step's record_function range (nested events count once);
its compute time is the rest of the step's wall time.
"""
from __future__ import annotations

import contextlib
import re

import torch
from torch.profiler import ProfilerActivity, profile, record_function

STEP = "decodescope.step."
COLLECTIVE = re.compile(r"^(gloo:|nccl:|c10d::|_c10d_functional::wait_tensor)|nccl.*kernel|ncclDevKernel", re.I)
BACKEND_EVENT = re.compile(r"^(gloo|nccl):", re.I)  # one per collective call: the count
SOURCE = ("torch.profiler on rank 0: union of gloo:* / nccl:* / c10d::* / _c10d_functional::wait_tensor CPU events "
          "and NCCL GPU kernels inside each step's record_function range")


class StepComm:
    """Profile a run on this process; per_step() -> {step index: {"comm_ms", "collectives"}}."""

    def __init__(self, enabled: bool = True, cuda: bool = False):
        self.enabled, self.cuda = enabled, cuda
        self._prof = None

    def __enter__(self) -> "StepComm":
        if self.enabled:
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self._prof = profile(activities=acts)
            self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._prof is not None:
            self._prof.__exit__(*exc)

    def step_context(self, index: int, kind: str):
        """The runner's step_context: one named range per step, which per_step() reads back."""
        return record_function(f"{STEP}{index}") if self.enabled else contextlib.nullcontext()

    def per_step(self) -> dict[int, dict]:
        if self._prof is None:
            return {}
        steps, comm = {}, []
        for e in self._prof.events():
            r = e.time_range
            if e.name.startswith(STEP):
                steps[int(e.name[len(STEP):])] = (r.start, r.end)
            elif COLLECTIVE.search(e.name):
                comm.append((r.start, r.end, bool(BACKEND_EVENT.match(e.name))))
        out = {}
        for i, (a, b) in steps.items():
            inside = sorted((max(s, a), min(t, b), n) for s, t, n in comm if s < b and t > a)
            out[i] = {"comm_ms": round(_union_us(inside) / 1e3, 4), "collectives": sum(n for *_, n in inside)}
        return out


def _union_us(intervals: list[tuple]) -> float:
    """Total length of the union of sorted (start, end, ...) intervals."""
    total, end = 0.0, float("-inf")
    for s, t, *_ in intervals:
        if t <= end:
            continue
        total += t - max(s, end)
        end = t
    return total


def annotate(trace, comm: dict[int, dict]) -> None:
    """Write each step's collective and compute time (wall minus collectives) into step.info."""
    for s in trace.steps:
        c = comm.get(s.index)
        if c is not None:
            s.info.update(comm_ms=c["comm_ms"], compute_ms=round(max(s.wall_ms - c["comm_ms"], 0.0), 4),
                          collectives=c["collectives"])


def cuda_model(model) -> bool:
    return model.get_input_embeddings().weight.device.type == "cuda" and torch.cuda.is_available()
