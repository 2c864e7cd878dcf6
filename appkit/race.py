"""The Race tab's numbers: one row per method and the one-line reason when a method does not pay (the
tokens-over-time figure is drawn in viz/race.py).

Why a reason line: a method is faster than greedy only when it accepts more tokens per step than its step
costs in 1-token steps. When it loses, the user sees both measured numbers instead of a bare slowdown.
"""
from __future__ import annotations

WIN = 1.2  # below this speed-up the race says why


def decode_steps(trace) -> list:
    return [s for s in trace.steps if s.kind == "decode"]


def mean_accepted(trace) -> str:
    """'n/a' when there was no decode step (a 1-token run): there is nothing to average."""
    steps = decode_steps(trace)
    return f"{sum(len(s.accepted) for s in steps) / len(steps):.2f}" if steps else "n/a"


def race_row(name: str, trace, greedy_trace, sampled: bool) -> dict:
    st = trace.stats()
    base = greedy_trace.stats() if greedy_trace is not None else st
    if sampled:
        badge = "n/a (sampling: same distribution, different draws)"
    elif greedy_trace is None or trace is greedy_trace:
        badge = "reference"
    elif trace.output_ids == greedy_trace.output_ids:
        badge = "✓ identical to greedy"
    else:
        n = next((i for i, (a, b) in enumerate(zip(trace.output_ids, greedy_trace.output_ids)) if a != b),
                 min(len(trace.output_ids), len(greedy_trace.output_ids)))
        badge = f"✗ differs from greedy at token {n}"
    return {"method": name, "config": "", "tokens": st["new_tokens"], "steps": st["steps"],
            "compression": round(st["compression"], 3), "mean accepted": mean_accepted(trace),
            "tokens/s": round(st["tokens_per_s"], 1), "wall s": round(st["wall_s"], 3),
            "speedup vs greedy": round(base["wall_s"] / st["wall_s"], 2) if st["wall_s"] > 0 else 0.0,
            "step saving vs greedy": round(base["steps"] / st["steps"], 2) if st["steps"] else 0.0,
            "exact": badge}


def _mean_ms(trace) -> float:
    steps = decode_steps(trace)
    return sum(s.wall_ms for s in steps) / len(steps) if steps else 0.0


def reason(name: str, trace, greedy_trace, speedup: float, device: str) -> str:
    """One line, with measured numbers, when `name` did not reach WIN x greedy; '' otherwise."""
    steps, g_ms, ms = decode_steps(trace), _mean_ms(greedy_trace), _mean_ms(trace)
    if speedup >= WIN or not steps or g_ms <= 0:
        return ""
    q = sum(s.n_query for s in steps) / len(steps)
    acc = sum(len(s.accepted) for s in steps) / len(steps)
    cost = ms / g_ms
    where = "on this GPU" if device.startswith("cuda") else "on this CPU"
    what = (f"a speculative step (draft forwards + a {q:.0f}-token check)" if name == "speculative"
            else f"a {q:.0f}-token {name.replace('_', ' ')} step")
    verdict = "slower than" if speedup < 1 else f"only {speedup:.2f}x"
    return (f"**{name}** is {verdict} greedy here because {what} costs {cost:.1f}x a 1-token step {where} "
            f"({ms:.1f} vs {g_ms:.1f} ms) and accepted {acc:.2f} tokens per step — it wins only when tokens "
            f"per step exceed the step's cost in 1-token steps.")


def summary(rows: list[dict], reasons: list[str], greedy: bool, preset_note: str = "") -> str:
    parts = [f"**{r['method']}** {r['config']}: {r['speedup vs greedy']}× wall-clock, {r['compression']} tokens/step, "
             f"<span class='ds-badge'>{r['exact']}</span>" for r in rows[1:]]
    head = "Exactness checked on the spot (greedy mode)." if greedy else "Sampling mode: exactness is distributional."
    lines = [head + (" " + preset_note if preset_note else ""), *parts, *[r for r in reasons if r]]
    return "\n\n".join(lines)
