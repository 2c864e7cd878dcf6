"""ZeroGPU: each @spaces.GPU call runs in a forked worker while Stop runs in the main process;
Stop must still end the worker's run. And the GPU durations charged to a visitor follow the settings."""
from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from appkit.run.stream import GPU_EVENTS, Job, Sessions, gpu_seconds
from appkit.run.settings import FIELDS, Settings


def _handler(sessions: Sessions, started, session: str) -> None:
    """What a decorated handler does in the worker: start the session's job, stream until it ends."""
    stop = sessions.start(session)

    def work(job: Job):
        started.set()
        for _ in range(1000):  # ~10 s unless stopped: the engine calls job.check after every step
            time.sleep(0.01)
            job.check()
        return "finished"

    kind = None
    for kind, _ in Job(work, stop).updates(min_interval=0.01):
        pass
    raise SystemExit(0 if kind == "stopped" else 1)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork on this platform")
def test_stop_reaches_a_run_in_a_forked_worker():
    ctx = mp.get_context("fork")
    sessions = Sessions()          # created before the fork, as app.py builds it before serving
    started = ctx.Event()
    child = ctx.Process(target=_handler, args=(sessions, started, "visitor-1"))
    child.start()
    try:
        assert started.wait(20), "the worker's run did not start"
        t0 = time.perf_counter()
        assert sessions.stop("visitor-1") is False  # no job of that session in this (main) process...
        child.join(10)
        assert child.exitcode == 0, "...but the worker's run must stop"  # 1 = ran to the end
        assert time.perf_counter() - t0 < 5
    finally:
        if child.is_alive():
            child.kill()


def test_stop_of_another_session_or_an_earlier_stop_does_not_stop_a_run():
    sessions = Sessions()
    sessions.stop("visitor-2")          # pressed before the run began
    mine = sessions.start("visitor-2")
    assert not mine.is_set()
    sessions.stop("visitor-3")
    assert not mine.is_set()
    assert sessions.stop("visitor-2") is True and mine.is_set()


def test_gpu_durations_follow_the_settings():
    values = [getattr(Settings(), f) for f in FIELDS]
    short = dict(zip(FIELDS, values), max_new=16)
    long = dict(zip(FIELDS, values), max_new=400)
    for event, (runs, cap) in GPU_EVENTS.items():
        fn = gpu_seconds(event)
        a, b = fn(object(), *short.values()), fn(object(), *long.values())  # a gr.Request first, then values
        assert 20 <= a <= b <= cap
        if runs:
            assert a < b or b == cap
    assert gpu_seconds("run")(*long.values()) < GPU_EVENTS["race"][1]
