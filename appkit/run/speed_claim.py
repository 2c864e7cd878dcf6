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
"""
from __future__ import annotations

import random
from statistics import mean

RESAMPLES = 400
LOW, HIGH = 0.05, 0.95  # the interval's percentiles


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


def claim(trace, greedy_ms: list[float] | None) -> str:
    """The speed words of a finished non-greedy run; every variant names "greedy's speed" (the status line
    beside the Run button picks that part)."""
    if not greedy_ms:
        return "speed vs greedy: **not measured** (run greedy on this prompt, or race)"
    st = trace.stats()
    ms, per_step = decode_ms(trace), tokens_per_step(trace)
    if not ms:
        return "speed vs greedy's speed: not measured (no decode step to time)"
    point, lo, hi = estimate(ms, per_step, greedy_ms)
    cost = mean(ms) / mean(greedy_ms)
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
