"""When a speed ratio measured here means nothing: the "machine busy" rule, one for every surface that
compares speeds (the CLI's --compare greedy; the app may read it too: it imports nothing of the project).

Why: a ratio of two runs' tokens/s is only a speed-up when both runs had the cores they asked for. On a
shared 2-core machine at load 6-8, one --compare greedy printed 1.55x for a method in fp32 and 0.86x in int8
for the same lookahead steps: the scheduler, not the method, set the ratio. Two signs say the cores were not
ours: the 1-minute load average above the usable cores (more runnable threads than cores), or the decoding
thread getting far less CPU time than the wall time it waited (it was runnable but not running). Either one: say
"machine busy: speed not measured" and give the work (steps, accepted tokens), which the load cannot change.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from .threads import load_average, usable_cores

MIN_CPU_SHARE = 0.75  # the decoding thread's CPU time / wall time below this: it waited for a core (a CPU
# decode keeps its thread running: 0.9-1.0 on an idle machine); the app's speed claims use the same share


def busy_reason(load: float | None, cores: int, cpu_s: float | None = None, wall_s: float | None = None) -> str | None:
    """Why speeds measured now are not speeds (None: the machine looked free). `cpu_s`/`wall_s`: the
    decoding thread's CPU time and the wall time of the timed runs (leave out for a check before them, or off the CPU)."""
    if load is not None and load > cores:
        return f"load average {load:.1f} on {cores} core{'s' * (cores != 1)}"
    if cpu_s is not None and wall_s and wall_s > 0 and cpu_s / wall_s < MIN_CPU_SHARE:
        return (f"the decoding thread got {cpu_s / wall_s:.0%} of a core while it ran ({cpu_s:.2f} s CPU in "
                f"{wall_s:.2f} s): it waited for a core")
    return None


def busy_now() -> str | None:
    """busy_reason for this machine now, before anything is timed."""
    return busy_reason(load_average(), usable_cores())


@dataclass
class Clock:
    """Wall time and this thread's CPU time (the thread that decodes) of timed blocks, summed over every
    `with clock:` (time.thread_time: other processes and idle pool threads do not count)."""
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def __enter__(self) -> "Clock":
        self._w, self._c = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s += time.perf_counter() - self._w
        self.cpu_s += time.thread_time() - self._c
