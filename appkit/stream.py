"""ONE streaming and stop mechanism for Run, Race and Sweep.

The work (one run, or several in a row) goes to a worker thread; the Gradio generator only wakes at most
every `min_interval` seconds to send a small update, so the engine keeps its speed and the browser's main
thread stays free. Stop sets the session's event; the engine's on_step hook (`Job.check`, called after
every step) raises Stopped, so a run ends within one step and the caller gets the partial result at once.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

from decoding import Step, Trace

# ~3 UI updates a second. The browser and the engine share the cores: at 0.15 s a 400-token live run kept
# 62-84% of the engine-alone tokens/s on the 2-core box, at 0.3 s 96-100% (tests/test_browser.py, -s).
MIN_INTERVAL_S = 0.3


class Stopped(Exception):
    """Raised inside the engine's on_step when the user pressed Stop."""


class Sessions:
    """The stop event of each browser session's current job, so Stop only stops that session's work."""

    def __init__(self):
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def start(self, session: str | None) -> threading.Event:
        ev = threading.Event()
        with self._lock:
            self._events[session or ""] = ev
        return ev

    def stop(self, session: str | None) -> bool:
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


class Job:
    """A worker thread running work(job); the caller iterates job.updates() in the Gradio generator."""

    def __init__(self, work: Callable[["Job"], Any], stop: threading.Event, setup: Callable[[], None] | None = None):
        self.stop, self.result, self.error, self.stopped = stop, None, None, False
        self.progress: Any = None
        self._wake = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._main, args=(work, setup), daemon=True, name="decodescope-run")

    def check(self, step: Step | None = None, out: list[int] | None = None) -> None:
        """on_step hook: Stop ends the work here, after the step that just finished."""
        if self.stop.is_set():
            raise Stopped()

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
