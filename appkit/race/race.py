"""The Race tab's numbers: repeats interleaved, one row per method (median and spread), the winner named,
and one measured reason line for every method (the tokens-over-time figure is drawn in viz/race.py).

Why repeats, interleaved: on a shared CPU one run's wall time swings by 10-40% between presses, so a
single run named a different "winner" each time. Each repeat runs every method once, in a rotated order
(no method always runs first, on a cold cache), and the race reports the median with its min-max spread.

Why a reason line for every method: a method is faster than greedy only when it accepts more tokens per
step than its step costs in 1-token steps. Both numbers are measured in the race, so the line says why a
method won or lost instead of leaving a bare ratio.
"""
from __future__ import annotations

from statistics import median

from decoding import run
from decoding.methods.registry import BASELINE
from viz.escape import esc, md_text

from ..run.method_fields import is_baseline, spec
from ..run.speed_claim import busy_words, own_time, rows_per_step, timed

WIN = 1.2  # at or above this speed-up a method "pays"; below, the line says what it would need
REPEATS, MAX_REPEATS = 3, 10


def decode_steps(trace) -> list:
    return [s for s in trace.steps if s.kind == "decode"]


def mean_accepted(trace) -> str:
    """'n/a' when there was no decode step (a 1-token run): there is nothing to average."""
    steps = decode_steps(trace)
    return f"{sum(len(s.accepted) for s in steps) / len(steps):.2f}" if steps else "n/a"


def order(methods: list[str], repeat: int) -> list[str]:
    """Repeat r runs the methods rotated by r: interleaved, and no method always first."""
    k = repeat % len(methods)
    return methods[k:] + methods[:k]


def badge(trace, greedy_trace, sampled: bool) -> str:
    if sampled:
        return "n/a (sampling: same distribution, different draws)"
    if greedy_trace is None or trace is greedy_trace:
        return "reference"
    if trace.output_ids == greedy_trace.output_ids:
        return "✓ identical to greedy"
    n = next((i for i, (a, b) in enumerate(zip(trace.output_ids, greedy_trace.output_ids)) if a != b),
             min(len(trace.output_ids), len(greedy_trace.output_ids)))
    return f"✗ differs from greedy at token {n}"


def representative(traces: list):
    """The run with the median wall time (its steps and tokens are what the table and figures show)."""
    return sorted(traces, key=lambda t: t.stats()["wall_s"])[(len(traces) - 1) // 2]


def race_row(name: str, traces: list, greedy_traces: list, sampled: bool) -> dict:
    """One method's row over its repeats: median wall time, min-max spread, speed-up of medians."""
    tr, g = representative(traces), greedy_traces[0] if greedy_traces else None
    walls = [t.stats()["wall_s"] for t in traces]
    g_med = median(t.stats()["wall_s"] for t in greedy_traces) if greedy_traces else median(walls)
    med = median(walls)
    exact = [badge(t, g, sampled) for t in traces] if not is_baseline(name) else ["reference"]
    st = tr.stats()
    return {"method": name, "config": "", "tokens": st["new_tokens"], "steps": st["steps"],
            "compression": round(st["compression"], 3), "mean accepted": mean_accepted(tr),
            "tokens/s": round(st["new_tokens"] / med, 1) if med > 0 else 0.0,
            "runs": len(traces), "wall s (median)": round(med, 3),
            "wall s (min-max)": f"{min(walls):.3f}-{max(walls):.3f}",
            "speedup vs greedy": round(g_med / med, 2) if med > 0 else 0.0,
            "speedup (min-max)": f"{g_med / max(walls):.2f}-{g_med / min(walls):.2f}" if min(walls) > 0 else "",
            "step saving vs greedy": round(g.stats()["steps"] / st["steps"], 2) if g and st["steps"] else 0.0,
            "exact": next((b for b in exact if b.startswith("✗")), exact[0]),
            "busy": busy_words(*[getattr(t, "measure", None) for t in [*traces, *greedy_traces]]),
            "rows/step": round(rows_per_step(tr), 1),
            "ms/step": f"{_mean_ms([tr]):.1f} vs greedy's {_mean_ms(greedy_traces[:1]):.1f}"}


def _mean_ms(traces: list) -> float:
    steps = [s for t in traces for s in decode_steps(t)]
    return sum(s.wall_ms for s in steps) / len(steps) if steps else 0.0


def reason(name: str, traces: list, greedy_traces: list, speedup: float, device: str, busy: str = "") -> str:
    """One line with measured numbers for every method: its step's cost in 1-token steps against the
    tokens it accepted per step, the speed-up those two predict, and the one measured."""
    where = "on this GPU" if device.startswith("cuda") else "on this CPU"
    sp, baseline = spec(name), is_baseline(name)
    needs = sp.needs if sp is not None else ()
    name = md_text(name)  # markdown: a method's name is shown as text, never read as a link or a tag
    g_ms = _mean_ms(greedy_traces)
    if baseline:
        return (f"**greedy** is the baseline: 1 token per step, {g_ms:.1f} ms per step {where} "
                f"(mean over {len(greedy_traces)} runs).") if g_ms > 0 else ""
    steps = [s for t in traces for s in decode_steps(t)]
    ms = _mean_ms(traces)
    if not steps or g_ms <= 0:
        return f"**{name}** ran no decode step (a 1-token run): nothing to compare."
    q = sum(s.n_query for s in steps) / len(steps)
    acc = sum(len(s.accepted) for s in steps) / len(steps)
    cost = ms / g_ms
    what = (f"a {name} step (draft forwards + a {q:.0f}-token check)" if "draft_model" in needs
            else f"a {name} step (head forwards + a {q:.0f}-token check)" if "heads" in needs
            else f"a {q:.0f}-token {name.replace('_', ' ')} step")
    facts = (f"{what} costs {cost:.1f}x a 1-token step {where} ({ms:.1f} vs {g_ms:.1f} ms) and accepted "
             f"{acc:.2f} tokens per step: {acc / cost:.2f}x predicted, {speedup:.2f}x measured")
    if busy:  # the cost model only: a ratio the loaded clock measured is not one the page can defend
        return (f"**{name}** is not timed here, speed not measured (machine busy): {what} costs {cost:.1f}x a "
                f"1-token step {where} ({ms:.1f} vs {g_ms:.1f} ms as measured under the load) and accepted "
                f"{acc:.2f} tokens per step: {acc / cost:.2f}x is what the steps give at those step times.")
    if acc <= 1.0:
        return (f"**{name}** did greedy's work: {what} costs {cost:.1f}x a 1-token step {where} and accepted "
                f"{acc:.2f} tokens per step, so it cannot be faster than greedy; the {speedup:.2f}x its clock "
                f"measured is noise.")
    if speedup >= WIN:
        return f"**{name}** is faster than greedy because {facts}."
    verdict = "slower than" if speedup < 1 else f"only {speedup:.2f}x"
    return (f"**{name}** is {verdict} greedy here because {facts} — it wins only when tokens per step exceed "
            f"the step's cost in 1-token steps.")


def fastest(rows: list[dict]) -> str | None:
    """The accelerated method with the best median speed-up (the side-by-side view's default partner)."""
    others = [r for r in rows if not is_baseline(r["method"])]
    return max(others, key=lambda r: r["speedup vs greedy"])["method"] if others else None


def _spread(row: dict) -> tuple[float, float]:
    lo, hi = (row["speedup (min-max)"] or "0-0").split("-")
    return float(lo), float(hi)


CLOSE = 0.05  # medians within 5% are a tie: less than a shared machine's run-to-run noise


def greedys_work(row: dict) -> bool:
    """An accelerated method that took a step per token: the step count says it did greedy's work, so any
    speed-up its wall-clock shows is noise and is never claimed."""
    return not is_baseline(row["method"]) and row["tokens"] > 0 and row["steps"] >= row["tokens"]


def leaders(rows: list[dict]) -> list[dict]:
    """The best row by median speed-up, then every row these repeats cannot separate from it: its
    median within CLOSE of the best, or (with repeats) its fastest run reaching the best row's slowest.
    A best row that did greedy's work (greedys_work) is tied with greedy, whatever the clock said."""
    ranked = sorted(rows, key=lambda r: -r["speedup vs greedy"])
    best = ranked[0]
    tied = [r for r in ranked[1:] if r["speedup vs greedy"] >= (1 - CLOSE) * best["speedup vs greedy"]
            or (r["runs"] > 1 and best["runs"] > 1 and _spread(r)[1] >= _spread(best)[0])
            or (greedys_work(best) and is_baseline(r["method"]))]
    return [best] + tied


def winner(rows: list[dict]) -> str:
    """The verdict: one winner when its runs beat every other method's runs, else "too close to call"
    naming the methods whose runs overlap (alphabetically, so repeated races give the same verdict when
    the noise only swaps their medians)."""
    if len(rows) < 2:
        return ""
    top = [{**r, "method": md_text(r["method"])} for r in leaders(rows)]  # names as markdown text
    best, runs = top[0], top[0]["runs"]
    spread = f"{best['speedup (min-max)']}×" if runs > 1 else "a single run"
    if len(top) == 1:
        return (f"**Winner: {best['method']}** — {best['speedup vs greedy']}× greedy's wall-clock (median of {runs} "
                f"interleaved run{'s' if runs > 1 else ''}; spread {spread}; every other method's median is over {CLOSE:.0%} lower and its runs do not reach "
                f"this one's).")
    names = sorted(r["method"] for r in top)
    work = [r["method"] for r in top if greedys_work(r)]
    same = (f" {', '.join(work)} took as many steps as tokens, greedy's own work, so no speed-up is claimed "
            f"for {'it' if len(work) == 1 else 'them'}." if work else "")
    each = ", ".join(f"{r['method']} {r['speedup vs greedy']}× (runs {r['speedup (min-max)']}×)" for r in top)
    return (f"**Too close to call: {' and '.join(names)}** — their interleaved runs overlap or their medians "
            f"are within {CLOSE:.0%} ({each}; median of {runs}), so this race cannot name one winner: "
            f"{best['method']} leads by median only.{same} More repeats or more new tokens narrow the spreads.")


def drift_note(rows: list[dict], dtype: str) -> str:
    """Why a ✗ appears: expected rounding drift in bf16/fp16, a bug in fp32."""
    bad = [r for r in rows if str(r["exact"]).startswith("✗")]
    if not bad:
        return ""
    names = ", ".join(md_text(r["method"]) for r in bad)
    if "float32" in dtype:
        return (f"⚠️ {names}: in fp32 every greedy mode must match greedy exactly — this is a bug; please report "
                f"it with the trace.")
    return (f"ℹ️ ✗ for {names} is **expected {dtype.replace('torch.', '')} drift**, not a bug: a step that scores k tokens "
            f"at once sums in a different order than a 1-token step, so a near-tied argmax can round the other "
            f"way; every token before the first difference is identical. Pick dtype fp32 for exact tokens.")


def _speed_words(r: dict) -> str:
    if r.get("busy"):
        return (f"speed not measured (machine busy); cost model: {r['steps']} steps for {r['tokens']} tokens, "
                f"{r.get('rows/step', '?')} query rows a step at {r.get('ms/step', '?')} ms")
    if greedys_work(r):
        return (f"no speed-up: {r['steps']} steps for {r['tokens']} tokens, greedy's own work (its wall-clock, "
                f"{r['speedup vs greedy']}×, runs {r['speedup (min-max)']}×, is noise)")
    return f"{r['speedup vs greedy']}× wall-clock (runs {r['speedup (min-max)']}×)"


def sizing_note(rows: list[dict]) -> str:
    """What 'sized per step' is sized from, said where a race has such a method: the row-cost curve measured
    once per model on this machine (the trace's config row_ms), never the run's timed speed, so every repeat
    of the same click takes the same steps and the race compares like with like."""
    if not any("sized per step" in str(r.get("config", "")) for r in rows):
        return ""
    return ("*Sized per step* trees are sized from this machine's row-cost curve, measured once per model and "
            "kept (each trace records it as row_ms), not from how fast this run went: every repeat takes the "
            "same steps.")


def summary(rows: list[dict], reasons: list[str], greedy: bool, preset_note: str = "", dtype: str = "",
            copies: list[str] = (), final: bool = True) -> str:
    """The race's words; `copies` (appkit/run/copied.py) join the verdict: a method that copied earlier answers
    is never crowned without saying so. While runs stream in (final=False) there is no verdict, only progress:
    a headline that flipped from one leader to another as the runs arrived taught nothing."""
    parts = [f"**{md_text(r['method'])}** {md_text(r['config'])}: {_speed_words(r)}, "
             f"{r['compression']} tokens/step, <span class='ds-badge'>{esc(r['exact'])}</span>" for r in rows[1:]]
    head = "Exactness checked on the spot (greedy mode)." if greedy else "Sampling mode: exactness is distributional."
    runs = rows[0]["runs"] if rows else 0
    head += f" Median of {runs} interleaved run{'s' if runs != 1 else ''} per method, min-max in brackets."
    done = sum(r["runs"] for r in rows)
    busy = next((r["busy"] for r in rows if r.get("busy")), "")
    named = (f"**Machine busy: speed not measured** ({busy}): the clock measured the load, not the methods, so "
             f"no winner is named; each method's cost model is below (steps, rows a step, step times)."
             if busy else winner(rows))
    verdict = (" ".join(x for x in (named, *copies) if x) if final else
               f"**Racing…** {done} run{'s' if done != 1 else ''} finished so far: the verdict comes when every "
               f"run has finished.")
    lines = [head + (" " + preset_note if preset_note else ""), verdict, *parts, drift_note(rows, dtype),
             sizing_note(rows), *[r for r in reasons if r]]
    return "\n\n".join(x for x in lines if x)


def race_runs(p, methods: list[str], repeats: int, job) -> dict[str, list]:
    """Greedy and each method `repeats` times, interleaved (repeat r runs them rotated by r); progress goes to
    job.report as ({method: [trace, ...]}, what runs now). Every run starts from the same state: a fresh drafter,
    and for retrieval a frozen copy of the session's earlier runs (Prepared.drafter), so no repeat drafts from
    an earlier repeat's or another contender's output."""
    with p.turn():
        run(p.model, p.tok, p.prompt, BASELINE, max_new_tokens=2, trace=False)  # warm-up: first forwards are slow
    runs: dict[str, list] = {m: [] for m in [BASELINE, *methods]}

    def done() -> dict:
        return {m: list(t) for m, t in runs.items() if t}

    for r in range(repeats):
        for m in order([BASELINE, *methods], r):
            job.report((done(), f"{m} (run {r + 1} of {repeats})"))
            tr, measure = timed(lambda: p.run(m, on_step=job.check))  # wall, the thread's CPU time, load
            tr.measure = own_time(tr, measure)  # less the steps it let other visitors run (public mode)
            runs[m].append(tr)
    job.report((done(), None))
    return done()
