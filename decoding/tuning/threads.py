"""How many CPU threads a run gets when --threads is not given, and the one line that says why.

Why: torch starts with one thread per core. On a 2-core machine that another process keeps busy, two
decoding threads wait on each other at every matmul: the default model (134.5M parameters) ran at 1.6
tokens/s on 2 threads against 65.9 on 1 right after, on a busy machine (quiet: 100-106 either way). So the
rule takes the cores this process may use minus the 1-minute load average (what other processes keep
busy), at least one; small models (under 100M parameters) on at most 2 cores always get one, measured
faster there whatever the load; OMP_NUM_THREADS, when set (torchrun sets 1 per process), is kept. The rule
and its inputs are printed in the CLI's [threads] line.
"""
from __future__ import annotations

import os

SMALL = 100_000_000  # parameters: one thread on <= 2 cores (measured: the second thread gains 5-30% at best)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def pick_threads(n_params: int, cores: int, load: float | None) -> tuple[int, str]:
    """(threads, the rule that chose them, with its inputs)."""
    if cores <= 2 and n_params < SMALL:
        return 1, f"1 (a model under {SMALL // 10**6}M parameters on {cores} core{'s' * (cores > 1)}: one thread)"
    if load is None:
        return cores, f"{cores} (the usable cores; no load average on this system)"
    n = max(1, min(cores, int(cores - load + 0.5)))
    return n, f"{n} (the {cores} usable cores minus the 1-minute load average {load:.1f}; --threads N to choose)"


def apply(model, threads: int | None) -> str | None:
    """Set torch's thread count for a CPU model: `threads`, else the rule. Returns the [threads] line's
    text (None for a model that is not on the CPU and no --threads)."""
    import torch
    if threads:
        torch.set_num_threads(threads)
        return f"{threads} (--threads)"
    if next(model.parameters()).device.type != "cpu":
        return None
    if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():  # torchrun sets 1 per process; a user's choice
        return f"{torch.get_num_threads()} (OMP_NUM_THREADS)"
    n, why = pick_threads(sum(p.numel() for p in model.parameters()), usable_cores(), load_average())
    torch.set_num_threads(n)
    return why
