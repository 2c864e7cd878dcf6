"""ONE streaming and stop mechanism for Run, Race and Sweep.

The work (one run, or several in a row) goes to a worker thread; the Gradio generator only wakes at most
every `min_interval` seconds to send a small update, so the engine keeps its speed and the browser's main
thread stays free. Stop sets the session's event; the engine's on_step hook (`Job.check`, called after
every step) raises Stopped, so a run ends within one step and the caller gets the partial result at once.

ZeroGPU runs each @spaces.GPU call in a forked worker, while Stop (queue=False, undecorated) runs in the
main process: a threading.Event set there never reaches the worker. So Stop also writes the session's
hash into shared memory created with Sessions (before any fork); the worker's stop signal reads it.
"""
from __future__ import annotations

import hashlib
import threading
import time
from multiprocessing.sharedctypes import RawArray
from typing import Any, Callable, Iterator

from decoding import Step, Trace

from ..public.fair import Cut, TurnCancelled, between_steps

# ~3 UI updates a second, whatever the engine's speed: the live path's cost is per update, so a bounded rate keeps
# it bounded (tests/test_browser.py checks the rate and <= 50 ms of engine slowdown per update; at 0.15 s a
# 400-token live run kept 62-84% of the engine-alone tokens/s on the 2-core box, at 0.3 s 96-100%).
MIN_INTERVAL_S = 0.3


class Stopped(Exception):
    """Raised inside the engine's on_step when the user pressed Stop."""


SLOTS = 1024  # shared stop slots: a session's slot holds its hash while a Stop for it is pending


def _session_key(session: str | None) -> tuple[int, int]:
    """(slot, hash) of a session id, the same in every process (Python's hash() is salted per process)."""
    h = int.from_bytes(hashlib.blake2b((session or "").encode(), digest_size=7).digest(), "little") + 1
    return h % SLOTS, h


class StopSignal:
    """The stop event of one job: set in this process (threading.Event), or by a Stop from another
    process (the shared slot holds this session's hash). Same is_set()/set() as threading.Event."""

    def __init__(self, shared, session: str | None, abandoned: Callable[[], bool] | None = None):
        self.event, self.shared, self.abandoned = threading.Event(), shared, abandoned
        self.slot, self.hash = _session_key(session)
        shared[self.slot] = 0  # a Stop pressed before this job started does not stop it

    def is_set(self) -> bool:
        if self.abandoned is not None and not self.event.is_set() and self.abandoned():
            self.event.set()  # nobody reads this job's results: it ends as if stopped
        return self.event.is_set() or self.shared[self.slot] == self.hash

    def set(self) -> None:
        self.event.set()


class Sessions:
    """The stop signal of each browser session's current job, so Stop only stops that session's work,
    in this process or in a forked worker (ZeroGPU)."""

    def __init__(self):
        self._events: dict[str, StopSignal] = {}
        self._lock = threading.Lock()
        self._shared = RawArray("q", SLOTS)  # anonymous shared memory: inherited by forked workers
        # session -> True when nobody reads its results (public mode: app.py counts the messages Gradio holds
        # unread for it; a `/call` job whose stream nobody opens would otherwise run to its end)
        self.abandoned: Callable[[str | None], bool] | None = None

    def start(self, session: str | None) -> StopSignal:
        check = self.abandoned
        ev = StopSignal(self._shared, session, (lambda: check(session)) if check is not None else None)
        with self._lock:
            self._events[session or ""] = ev
        return ev

    def stop(self, session: str | None) -> bool:
        """Stop the session's job here, and in any forked worker (the shared slot). True when a job of
        the session runs in this process (a worker's job cannot be seen from here)."""
        slot, h = _session_key(session)
        self._shared[slot] = h
        with self._lock:
            ev = self._events.get(session or "")
        if ev is None:
            return False
        ev.set()
        return True

    def end(self, session: str | None, ev: threading.Event) -> None:
        with self._lock:
            if self._events.get(session or "") is ev:
                del self._events[session or ""]


class Recorder:
    """on_step target that keeps every step, so a stopped run still has its partial trace."""

    def __init__(self, method: str, prompt_ids: list[int], config: dict | None = None):
        self.trace = Trace(method=method, config=dict(config or {}), prompt_ids=list(prompt_ids))
        self.t0 = time.perf_counter()

    def add(self, step: Step, out: list[int]) -> None:
        self.trace.steps.append(step)
        self.trace.output_ids = list(out)
        self.trace.wall_s = time.perf_counter() - self.t0


def mark_interleaved(tr: Trace, held) -> Trace:
    """A run that gave the model to other visitors between its steps (appkit/public/fair.py): its trace says how
    often and how long, and its wall time counts its own steps only. Its tokens are the same either way: a run's
    KV cache, drafter and sampler are its own."""
    if held is not None and getattr(held, "pauses", 0) and isinstance(tr, Trace):
        tr.config["interleaved"] = {"pauses": held.pauses, "waited_s": round(held.waited_s, 3)}
        tr.wall_s = max(tr.wall_s - held.waited_s, 1e-6)
    return tr


class Job:
    """A worker thread running work(job); the caller iterates job.updates() in the Gradio generator."""

    def __init__(self, work: Callable[["Job"], Any], stop: "StopSignal | threading.Event",
                 setup: Callable[[], None] | None = None):
        self.stop, self.result, self.error, self.stopped = stop, None, None, False
        self.cut: Cut | None = None  # a public bound ended the work after a step (fair.Budget)
        self.progress: Any = None
        self._wake = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._main, args=(work, setup), daemon=True, name="decodescope-run")

    def check(self, step: Step | None = None, out: list[int] | None = None) -> None:
        """on_step hook: Stop ends the work here, after the step that just finished; then the step is charged to
        the request's budget and the model may go to a waiting visitor before the next step
        (appkit/public/fair.py: between_steps)."""
        if self.stop.is_set():
            raise Stopped()
        if step is None:
            return
        try:
            between_steps(step.n_query, step.kv_len)
        except Cut as e:
            self.cut = e
            raise Stopped() from None
        except TurnCancelled:
            raise Stopped() from None

    def report(self, progress: Any) -> None:
        """Latest progress (overwrites the previous one: the UI only needs the newest)."""
        self.progress = progress
        with self._wake:
            self._wake.notify_all()

    def _main(self, work, setup) -> None:
        try:
            if setup:
                setup()
            self.result = work(self)
        except Stopped:
            self.stopped = True
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = e
        finally:
            with self._wake:
                self._done = True
                self._wake.notify_all()

    def updates(self, min_interval: float = MIN_INTERVAL_S) -> Iterator[tuple[str, Any]]:
        """('progress', latest) at most every min_interval, then ('done', result) or ('stopped', latest);
        the worker's exception is re-raised here. Closing the generator (a cancelled event) stops the work."""
        self._thread.start()
        last, seen = 0.0, None
        try:
            while True:
                with self._wake:
                    if not self._done:
                        pending = self.progress is not seen
                        remaining = last + min_interval - time.perf_counter()
                        if not pending:
                            self._wake.wait(1.0)  # until new progress or the end
                        elif remaining > 0:
                            self._wake.wait(remaining)  # throttle, but wake at once at the end
                    done = self._done
                if done:
                    break
                if self.progress is not seen and time.perf_counter() - last >= min_interval:
                    seen, last = self.progress, time.perf_counter()
                    yield "progress", seen
        finally:
            self.stop.set()
        if self.error is not None:
            raise self.error
        yield ("stopped", self.progress) if self.stopped else ("done", self.result)


# @spaces.GPU durations: what the visitor's ZeroGPU quota is charged up front, so computed from the
# settings instead of a fixed worst case. SECONDS_PER_TOKEN bounds a decoded token on a GPU slice with
# margin (embedded model ~150 tokens/s; a 7B model ~30); `runs` = decodes one event makes.
SECONDS_PER_TOKEN = 0.05
GPU_EVENTS = {"run": (1, 120), "race": (5, 180), "profile": (2, 240), "sweep": (12, 240), "tune": (8, 300),
              "load_models": (0, 60)}  # event -> (decodes of max_new tokens, cap in seconds)


def gpu_seconds(event: str, floor: int = 20) -> Callable[..., int]:
    """A duration callable for spaces.GPU(duration=...): called with the event's arguments, reads
    max_new from them (by name from the keyword API, else Settings order after a gr.Request if any) and returns seconds within the cap."""
    runs, cap = GPU_EVENTS[event]

    def duration(*args, **kwargs) -> int:
        from .settings import FIELDS
        values = [a for a in args if isinstance(a, (str, int, float, bool, type(None)))]
        try:
            max_new = float(kwargs.get("max_new", dict(zip(FIELDS, values)).get("max_new", 64)))
        except (TypeError, ValueError):
            max_new = 64.0
        return int(min(cap, max(floor, floor + runs * max_new * SECONDS_PER_TOKEN)))
    return duration
