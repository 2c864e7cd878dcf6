"""DecodeScope profiling: per-step FLOPs/bytes, machine peaks, profiled runs, roofline data, latency sweeps.

Everything returned is plain JSON-ready data keyed by step index, like decoding.Trace.
"""
from .calibrate import DATASHEET, datasheet_for, peaks
from .flops import Arch, arch_of, step_cost, trace_costs
from .profiler import PROFILE_SCHEMA, StepClock, load_profile, profile_run, save_profile
from .roofline import compare, flops_series, points, roof
from .sweep import latency_sweep

__all__ = ["Arch", "DATASHEET", "PROFILE_SCHEMA", "StepClock", "arch_of", "compare", "datasheet_for",
           "flops_series", "latency_sweep", "load_profile", "peaks", "points", "profile_run", "roof",
           "save_profile", "step_cost", "trace_costs"]
