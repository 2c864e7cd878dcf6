"""What a single Run may say about its speed against greedy: a measured step cost with its spread.

Why: one run's tokens/s over one greedy run's is one noisy comparison (a shared CPU swings 10-40% between
presses), so "1.35x" in bold was shown for a prompt lookup run that took 128 steps for 128 tokens, greedy's
own work. A run's speed against greedy is its tokens per step times greedy's step time over its own step
time; both step times are measured on every step, so their spread is measured too. This module turns them
into one of three claims:
- the step count contradicts a speed-up (no more than one token per step): no speed-up is ever shown;
- the interval of the estimate holds 1.0: "within noise", no bold figure;
- otherwise the estimate with its interval, saying it is one run each (the Race repeats, interleaved).
The interval is a bootstrap over the two runs' decode steps (seeded: the same runs give the same words).

A claim survives contention or is not made. A shared CPU said Medusa ran "1.82x greedy's speed" with a 5-token
step measured cheaper than greedy's 1-token step, and greedy against itself spread 0.93-1.98x. So:
- a run measured with `timed` records its wall time, the CPU time of the thread that decoded (time.thread_time)
  and the machine's load; when either run's thread got well under a core (CPU time far below wall time) or the
  load was above the cores, the words are "machine busy: speed not measured" and the cost model instead (steps,
  rows a step, the measured step times): what the steps can buy, not what the clock said;
- a step with more query rows measured cheaper than greedy's 1-row step is contention, not speed: no ratio the
  step counts and the row cost cannot produce is printed.
"""
from __future__ import annotations

import os
import random
import time
from statistics import mean

BUSY_SHARE = 0.75   # the decoding thread's CPU time under this share of its wall time: it waited for a core
CHEAPER = 0.9       # a many-row step measured under this fraction of greedy's 1-row step: the clock, not the work
RESAMPLES = 400
LOW, HIGH = 0.05, 0.95  # the interval's percentiles


def timed(fn):
    """(fn(), {"wall_s", "cpu_s", "load", "cores"}): the run's wall time, the CPU time of this thread (the one
    that decodes), and the machine's 1-minute load at the end. A run whose thread got a core for its whole
    wall time has cpu_s close to wall_s; an oversubscribed machine shows far less."""
    w0, c0 = time.perf_counter(), time.thread_time()
    out = fn()
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return out, {"wall_s": wall, "cpu_s": cpu, "load": load, "cores": os.cpu_count() or 1}


def own_time(tr, measure: dict) -> dict:
    """The measure of a run that gave the model to other visitors between its steps (public mode: the trace's
    config.interleaved): its wall time without those waits, in which its thread used no CPU either."""
    waited = float((getattr(tr, "config", None) or {}).get("interleaved", {}).get("waited_s", 0.0) or 0.0)
    if waited > 0:
        measure = {**measure, "wall_s": max(measure["wall_s"] - waited, measure["cpu_s"], 1e-6)}
    return measure


def busy_words(*measures: dict | None) -> str:
    """'' when every measured run had its core; else why the clock cannot be trusted (the first reason)."""
    for m in measures:
        if not m:
            continue
        if m["wall_s"] > 0 and m["cpu_s"] < BUSY_SHARE * m["wall_s"]:
            return f"the decoding thread got {m['cpu_s'] / m['wall_s']:.0%} of a core while it ran"
        if m["load"] > m["cores"]:
            return f"load {m['load']:.1f} on {m['cores']} cores"
    return ""


def decode_ms(trace) -> list[float]:
    """The wall time of every decode step (the prefill is the same work for every method)."""
    return [float(s.wall_ms) for s in trace.steps if s.kind == "decode" and s.wall_ms > 0]


def tokens_per_step(trace) -> float:
    steps = [s for s in trace.steps if s.kind == "decode"]
    return sum(len(s.accepted) for s in steps) / len(steps) if steps else 0.0


def _resampled_mean(xs: list[float], rng: random.Random) -> float:
    return mean(rng.choices(xs, k=len(xs)))


def estimate(method_ms: list[float], per_step: float, greedy_ms: list[float]) -> tuple[float, float, float]:
    """(speed-up, low, high): tokens per step x greedy's mean step time / the method's mean step time, and
    its bootstrap interval over both runs' steps."""
    point = per_step * mean(greedy_ms) / mean(method_ms)
    rng = random.Random(len(method_ms) * 7919 + len(greedy_ms))
    draws = sorted(per_step * _resampled_mean(greedy_ms, rng) / _resampled_mean(method_ms, rng)
                   for _ in range(RESAMPLES))
    return point, draws[int(LOW * (RESAMPLES - 1))], draws[int(HIGH * (RESAMPLES - 1))]


def rows_per_step(trace) -> float:
    steps = [s for s in trace.steps if s.kind == "decode"]
    return sum(s.n_query for s in steps) / len(steps) if steps else 0.0


def cost_model(trace, ms: list[float], greedy_ms: list[float]) -> str:
    """What the steps can buy, in the numbers they were measured in: steps, rows a step, both step times, and
    the speed-up those would give (tokens per step over the step's cost in greedy steps)."""
    st, per_step, rows = trace.stats(), tokens_per_step(trace), rows_per_step(trace)
    cost = mean(ms) / mean(greedy_ms)
    return (f"cost model: {st['steps']} steps for {st['new_tokens']} tokens ({per_step:.2f} a step), {rows:.1f} "
            f"query rows a step at {mean(ms):.1f} ms against greedy's 1 row at {mean(greedy_ms):.1f} ms")


def claim(trace, greedy_ms: list[float] | None, busy: str = "") -> str:
    """The speed words of a finished non-greedy run; every variant names "greedy's speed" (the status line
    beside the Run button picks that part). busy: busy_words of the two runs' measures ('' when quiet)."""
    if not greedy_ms:
        return "speed vs greedy: **not measured** (run greedy on this prompt, or race)"
    st = trace.stats()
    ms, per_step = decode_ms(trace), tokens_per_step(trace)
    if not ms:
        return "speed vs greedy's speed: not measured (no decode step to time)"
    if busy:
        return f"machine busy: speed vs greedy's speed not measured ({busy}); {cost_model(trace, ms, greedy_ms)}"
    point, lo, hi = estimate(ms, per_step, greedy_ms)
    cost = mean(ms) / mean(greedy_ms)
    if per_step > 1.0 and rows_per_step(trace) > 1.0 and cost < CHEAPER:
        return (f"speed vs greedy's speed not measured: a {rows_per_step(trace):.1f}-row step timed cheaper than "
                f"greedy's 1-row step ({cost:.2f}x) is the machine's load, not the method; "
                f"{cost_model(trace, ms, greedy_ms)}")
    how = (f"{per_step:.2f} tokens per step at {cost:.2f}x greedy's step time ({mean(ms):.1f} vs "
           f"{mean(greedy_ms):.1f} ms, {len(ms)} and {len(greedy_ms)} steps timed)")
    if per_step <= 1.0:
        slower = f"; slower: {point:.2f}x ({lo:.2f}-{hi:.2f}x)" if hi < 1 else ""
        return (f"no speed-up over greedy's speed: {st['steps']} steps for {st['new_tokens']} tokens is greedy's "
                f"own work (compression {st['compression']:.2f}){slower}")
    if lo <= 1.0 <= hi:
        return (f"within noise of greedy's speed ({lo:.2f}-{hi:.2f}x from {how}; one run each: the Race repeats "
                f"them interleaved)")
    return (f"**{point:.2f}x** greedy's speed ({lo:.2f}-{hi:.2f}x from {how}; one run each: the Race repeats "
            f"them interleaved)")
