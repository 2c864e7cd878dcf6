"""The tuning driver: runs a method's own tuner (its spec's Tuner, declared with the method in
decoding/methods/) with the pilot tools it lends it (PilotKit: decoding.run, the builder, time_pilots): what
`--auto`, the app's Tune button and auto preset, and the benches call. Also the thread-count tuner.

Timed tuners run every setting on every pilot prompt `reps` times, interleaved, and keep the fastest
repetition (on a shared machine noise only ever adds time). The strategies themselves (lookahead's latency
curve, speculative's draft shapes, the heads' tree budget, Jacobi's block) live with their methods.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Callable, ContextManager

# Each pilot run is held in `pause()` (default: nothing): a shared server hands the model to other visitors
# between pilot runs, so one Tune is many short turns, not one long one.
Pause = Callable[[], ContextManager]

from ..api import make_drafter, run
from ..methods.registry import BASELINE, SPECS, spec_of
from ..methods.spec import PilotKit, Tuner


def pilot_prompts(prompt) -> list:
    """One prompt (text or ids) or a list of texts -> the list of pilot prompts."""
    return prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else [prompt]


def time_pilots(model, tokenizer, prompts: list, runs: dict[str, tuple[str, dict]], *, pilot_tokens: int,
                reps: int, pause: Pause = nullcontext) -> dict[str, dict]:
    """Run every named (method, params) on every pilot prompt, `reps` rounds interleaved; per name: the
    fastest round's seconds, its new tokens and target forwards."""
    best = {name: float("inf") for name in runs}
    counts: dict[str, tuple[int, int]] = {}
    for _ in range(max(reps, 1)):
        for name, (method, params) in runs.items():
            seconds, tokens, steps = 0.0, 0, 0
            for p in prompts:
                with pause():  # the wait for a turn is not timed
                    t0 = time.perf_counter()
                    st = run(model, tokenizer, p, method, max_new_tokens=pilot_tokens, trace=False, **params).stats()
                    seconds += time.perf_counter() - t0
                tokens, steps = tokens + st["new_tokens"], steps + st["steps"]
            best[name] = min(best[name], seconds)
            counts[name] = (tokens, steps)
    return {n: {"seconds": best[n], "tokens": counts[n][0], "steps": counts[n][1],
                "tokens_per_s": counts[n][0] / best[n], "compression": counts[n][0] / max(counts[n][1], 1)}
            for n in runs}


def kit() -> PilotKit:
    """The pilot tools a method's tuner runs with (it may not import the API itself)."""
    return PilotKit(run=run, make_drafter=make_drafter, time_pilots=time_pilots, pilots=pilot_prompts, specs=SPECS)


def tuner_of(method: str) -> Tuner | None:
    """The method's tuner (its spec's), None for a method that is not tuned."""
    return spec_of(method).tuner


def pilot_runs(method: str, prompts: int, reps: int = 2) -> int:
    """How many pilot decodes tune() makes for `method` on `prompts` pilot prompts (a shared server counts
    them in a request's work before it starts); 0 for a method without a tuner."""
    t = tuner_of(method)
    return 0 if t is None else t.pilot_runs(prompts, reps)


def tune(method: str, model, tokenizer, prompts, *, pilot_tokens: int = 32, reps: int = 2, draft=None,
         heads: str | None = None, draft_tokenizer=None, **fixed) -> dict:
    """Tune `method` for this model, device and prompt(s): {"params": the drafter's parameters, "label":
    the words --auto prints, "result": the tuner's full measurements}. fixed: the tuner's own options
    (a grid, shapes, budgets, cuts, curve, ...). draft_tokenizer: the draft's, checked against the target's
    before any pilot runs."""
    t = tuner_of(method) if method in SPECS else None
    if t is None:
        tuned = [n for n, s in SPECS.items() if s.tuner is not None]
        raise ValueError(f"{method} has no tuner (tuned: {', '.join(tuned)})")
    return t.run(kit(), model, tokenizer, prompts, method=method, pilot_tokens=pilot_tokens, reps=reps, draft=draft,
                 heads=heads, draft_tokenizer=draft_tokenizer, **fixed)


def tune_threads(model, tokenizer, prompts, *, pilot_tokens: int = 8, reps: int = 2,
                 candidates: list[int] | None = None) -> dict:
    """The CPU thread count that decodes fastest here, measured like the other tuners: greedy on the pilot
    prompts at each candidate count (1 up to the cores), `reps` rounds interleaved, fastest round kept.
    Why: on a 2-core machine a second thread is worth 5-30% when the machine is quiet and ~10x slower when
    another process is busy; only a measurement on this machine, now, knows which. Leaves torch on the
    winner; returns {"threads": n, "tokens_per_s": {n: rate}}."""
    import os

    import torch
    if next(model.parameters()).device.type != "cpu":
        return {"threads": torch.get_num_threads(), "tokens_per_s": {}}
    cores = os.cpu_count() or 1
    counts = sorted({max(1, min(int(c), cores)) for c in (candidates or {1, 2, cores // 2, cores})})
    before = torch.get_num_threads()
    best: dict[int, float] = {}
    try:
        run(model, tokenizer, pilot_prompts(prompts)[0], BASELINE, max_new_tokens=2, trace=False)  # warm-up
        for r in range(max(reps, 1)):
            for n in counts:
                if r and best[n] * 3 < max(best.values()):
                    continue  # a count 3x slower than the best is out; its repeats would only cost time
                torch.set_num_threads(n)
                t0, made = time.perf_counter(), 0
                for p in pilot_prompts(prompts):
                    made += len(run(model, tokenizer, p, BASELINE, max_new_tokens=pilot_tokens,
                                    trace=False).output_ids)
                rate = made / max(time.perf_counter() - t0, 1e-9)
                best[n] = max(best.get(n, 0.0), rate)
    finally:
        torch.set_num_threads(before)
    pick = max(best, key=lambda n: (best[n], -n))
    torch.set_num_threads(pick)
    return {"threads": pick, "tokens_per_s": best}
