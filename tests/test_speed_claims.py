"""A speed claim a teacher can defend: the Run tab's "x greedy" and the Race's verdict.

The traces here are built step by step with chosen step times: the claim is a decision over measured
numbers, and these are the cases a shared machine produces (a quiet moment makes greedy's own work look
1.35x faster; a real speed-up; a difference smaller than the steps' spread).
"""
from __future__ import annotations

import random
import re

from appkit.race import race as racekit
from appkit.public.per_session import PerSession
from appkit.run.threads import speed_of
from decoding.trace import Step, Trace


def trace(method: str, per_step: list[int], ms: list[float]) -> Trace:
    """A run whose prefill gives one token and whose decode step i accepts per_step[i] tokens in ms[i]."""
    steps = [Step(0, "prefill", 0, 4, [1], ["target"], wall_ms=20.0)]
    out = [1]
    for i, (n, t) in enumerate(zip(per_step, ms)):
        acc = [7] * n
        steps.append(Step(i + 1, "decode", 4 + len(out), max(n, 1), acc, ["target"] * n, wall_ms=t))
        out += acc
    return Trace(method, {}, [1, 2, 3, 4], out, steps, wall_s=(20.0 + sum(ms)) / 1000, stop_reason="max_new_tokens")


def jitter(base: float, n: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [base * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_a_run_with_greedys_step_count_never_shows_a_speed_up():
    """128 steps for 128 tokens measured in a quieter moment than greedy: 1.35x by the clock, none by the work."""
    rates = PerSession()
    key = ("same prompt and settings",)
    assert speed_of(rates, None, key, trace("greedy", [1] * 127, jitter(10.0, 127, 0.1, 1)), True) == ""
    lookup = trace("prompt_lookup", [1] * 127, jitter(7.4, 127, 0.1, 2))
    assert lookup.stats()["tokens_per_s"] / (128 / trace("greedy", [1] * 127, jitter(10.0, 127, 0.1, 1)).wall_s) > 1.3
    note = speed_of(rates, None, key, lookup, True)
    assert "no speed-up" in note and "128 steps for 128 tokens" in note and "compression 1.00" in note, note
    assert not re.search(r"\*\*[0-9.]+x\*\*", note), note  # no bold figure
    assert "greedy's speed" in note  # the status line beside Run picks this part


def test_a_real_speed_up_is_shown_with_its_interval_and_a_close_one_is_within_noise():
    rates = PerSession()
    key = ("k",)
    speed_of(rates, None, key, trace("greedy", [1] * 63, jitter(10.0, 63, 0.2, 3)), True)
    fast = speed_of(rates, None, key, trace("lookahead", [2] * 32, jitter(10.5, 32, 0.2, 4)), True)
    m = re.search(r"\*\*([0-9.]+)x\*\* greedy's speed \(([0-9.]+)-([0-9.]+)x from 2\.00 tokens per step", fast)
    assert m, fast
    point, lo, hi = map(float, m.groups())
    assert 1.0 < lo <= point <= hi and abs(point - 2 * 10 / 10.5) < 0.2, fast
    assert "one run each" in fast
    close = speed_of(rates, None, key, trace("lookahead", [1, 2] * 22, jitter(14.5, 44, 0.6, 5)), True)
    assert close.startswith("within noise of greedy's speed (") and "**" not in close, close
    lo, hi = map(float, re.search(r"\(([0-9.]+)-([0-9.]+)x", close).groups())
    assert lo <= 1.0 <= hi


def test_a_race_never_crowns_a_method_that_did_greedys_work():
    """Its interleaved runs were all faster than greedy's, but it took a step per token: a tie with greedy."""
    g = [trace("greedy", [1] * 31, [10.0 + r] * 31) for r in range(3)]
    pl = [trace("prompt_lookup", [1] * 31, [7.0 + r * 0.1] * 31) for r in range(3)]
    rows = [racekit.race_row("greedy", g, g, False), racekit.race_row("prompt_lookup", pl, g, False)]
    assert rows[1]["speedup vs greedy"] > 1.3 and racekit.greedys_work(rows[1])
    verdict = racekit.winner(rows)
    assert "Winner" not in verdict and "Too close to call: greedy and prompt_lookup" in verdict, verdict
    assert "greedy's own work" in verdict
    text = racekit.summary(rows, [racekit.reason("prompt_lookup", pl, g, rows[1]["speedup vs greedy"], "cpu")], True)
    assert "no speed-up: 32 steps for 32 tokens" in text and "did greedy's work" in text, text
    assert "is faster than greedy" not in text


def test_a_running_race_shows_progress_not_a_verdict():
    """While runs stream in the headline flipped ("Winner: greedy" -> "Winner: prompt_lookup" -> "Too close")."""
    g = [trace("greedy", [1] * 31, [10.0] * 31)]
    la = [trace("lookahead", [2] * 15 + [1], [10.0] * 16)]
    rows = [racekit.race_row("greedy", g, g, False), racekit.race_row("lookahead", la, g, False)]
    running = racekit.summary(rows, [], True, final=False)
    assert "Winner" not in running and "Too close" not in running and "**Racing…** 2 runs finished so far" in running
    assert "Winner: lookahead" in racekit.summary(rows, [], True)


def spinning(n: int = 2):
    """Threads spinning beside the run (the GIL and the cores taken): a classroom's shared CPU, made on purpose."""
    import threading
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(2000))
    ts = [threading.Thread(target=spin, daemon=True) for _ in range(n)]
    for t in ts:
        t.start()
    return stop, ts


def test_a_claim_under_contention_is_within_the_quiet_spread_or_not_made():
    """Greedy measured quietly, prompt lookup once quietly and once with busy threads beside it: the busy run's
    words either fall within the quiet claim's interval or say the speed was not measured (the decoding thread
    got far less CPU time than wall time). Timed by the clock alone, the busy run claimed a ratio the quiet one
    rules out."""
    import torch

    from conftest import tiny
    from decoding.api import run
    from appkit.run.speed_claim import timed
    torch.set_num_threads(1)
    model = tiny("llama")
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12, 5, 6, 7]

    def measured(method: str):
        tr, tr.measure = timed(lambda: run(model, None, prompt, method, max_new_tokens=48))
        return tr
    measured("greedy")  # warm-up
    rates, key = PerSession(), ("k",)
    speed_of(rates, None, key, measured("greedy"), True)
    quiet = speed_of(rates, None, key, measured("prompt_lookup"), True)
    stop, ts = spinning()
    try:
        loaded = speed_of(rates, None, key, measured("prompt_lookup"), True)
    finally:
        stop.set()
        for t in ts:
            t.join()
    assert "greedy's speed" in quiet and "greedy's speed" in loaded, (quiet, loaded)
    if "not measured" in loaded:
        assert "cost model:" in loaded and "steps for" in loaded, loaded
        return
    got = re.search(r"\(([0-9.]+)-([0-9.]+)x", loaded)
    spread = re.search(r"\(([0-9.]+)-([0-9.]+)x", quiet)
    assert got and spread, (quiet, loaded)  # a machine busy for both says "not measured" for both
    lo, hi = map(float, spread.groups())
    point = float(re.search(r"([0-9.]+)x", loaded).group(1))
    assert lo * 0.9 <= point <= hi * 1.1, (quiet, loaded)


def test_the_busy_words_come_from_the_runs_own_measure():
    from appkit.run.speed_claim import busy_words
    quiet = {"wall_s": 1.0, "cpu_s": 0.97, "load": 0.5, "cores": 2}
    assert busy_words(quiet, None) == ""
    assert "got 40% of a core" in busy_words(quiet, {**quiet, "cpu_s": 0.4})
    assert busy_words({**quiet, "load": 11.0}) == "load 11.0 on 2 cores"
    rates, key = PerSession(), ("k",)
    g = trace("greedy", [1] * 63, jitter(29.4, 63, 0.1, 3))
    g.measure = quiet
    speed_of(rates, None, key, g, True)
    medusa = trace("medusa", [5] * 12, jitter(28.9, 12, 0.1, 4))  # a 5-token step "cheaper" than greedy's 1-token
    medusa.measure = {**quiet, "load": 11.0}
    words = speed_of(rates, None, key, medusa, True)
    assert words.startswith("machine busy: speed vs greedy's speed not measured (load 11.0 on 2 cores)"), words
    assert "cost model: 13 steps for 61 tokens" in words and not re.search(r"[0-9.]+x", words.split(";")[0]), words
