"""Stream a decoding run step by step: the engine runs in a worker thread and reports every step through
on_step; the caller (a Gradio generator) reads the steps from a queue and yields UI updates.

Stop: set the run's stop event (the Stop button does, and so does closing the generator when Gradio
cancels the event); the worker raises Stopped at its next step, so the worker is freed within one step.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from decoding import Trace, run
from decoding.api import vocab_for


class Stopped(Exception):
    """Raised inside the engine's on_step when the user pressed Stop."""


@dataclass
class Live:
    """What a running decode has produced so far (a partial Trace the pictures can draw)."""
    trace: Trace
    done: bool = False
    final: Trace | None = None
    error: BaseException | None = None
    steps_seen: int = 0
    t0: float = field(default_factory=time.perf_counter)


class Sessions:
    """Stop events per browser session, so Stop only stops the session that pressed it."""

    def __init__(self):
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def start(self, session: str | None) -> threading.Event:
        """The stop event of a new run; ev.ended is set when the run's handler has finished."""
        ev = threading.Event()
        ev.ended = threading.Event()
        with self._lock:
            self._events[session or ""] = ev
        return ev

    def stop(self, session: str | None, wait_s: float = 0.0) -> bool:
        """Ask the session's run to stop; optionally wait (up to wait_s) until its handler has finished,
        so nothing the run sends arrives after the caller's own 'stopped' message."""
        with self._lock:
            ev = self._events.pop(session or "", None)
        if ev is None:
            return False
        ev.set()
        if wait_s > 0:
            ev.ended.wait(wait_s)
        return True

    def end(self, session: str | None, ev: threading.Event) -> None:
        with self._lock:
            if self._events.get(session or "") is ev:
                del self._events[session or ""]
        ended = getattr(ev, "ended", None)
        if ended is not None:
            ended.set()


def stream(model, tok, prompt: str, method: str, stop: threading.Event, *, min_interval: float = 0.2,
           thread_setup=None, **kw):
    """Yield Live snapshots while the run goes (at most one per min_interval), then the finished one.

    kw go to decoding.run (max_new_tokens, sampling, method parameters). Exceptions from the engine are
    re-raised here, in the caller's thread; Stopped is raised when stop was set."""
    q: queue.Queue = queue.Queue()
    ids = tok(prompt)["input_ids"]
    partial = Trace(method=method, config={}, prompt_ids=list(ids))

    def on_step(step, out):
        q.put(("step", step, list(out)))
        if stop.is_set():
            raise Stopped()

    def work():
        if thread_setup:
            thread_setup()
        try:
            q.put(("done", run(model, tok, prompt, method, on_step=on_step, **kw), None))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            q.put(("error", e, None))

    worker = threading.Thread(target=work, daemon=True, name="decodescope-run")
    live = Live(partial)
    worker.start()
    last = 0.0
    try:
        while True:
            kind, a, b = q.get()
            if kind == "step":
                partial.steps.append(a)
                partial.output_ids = b
                live.steps_seen += 1
                now = time.perf_counter()
                if now - last >= min_interval and q.empty():
                    last = now
                    partial.wall_s = now - live.t0
                    partial.text = tok.decode(partial.output_ids)
                    partial.vocab = vocab_for(partial, tok)
                    yield live
            elif kind == "error":
                raise a
            else:
                live.done, live.final = True, a
                yield live
                return
    finally:
        stop.set()  # a cancelled or closed generator frees the worker at its next step
