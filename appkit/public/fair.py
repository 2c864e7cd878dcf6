"""A visitor's fair share of the one model worker (public mode): turns, a per-session job limit, a work budget.

Why: one worker serves every visitor. In Gradio's queue (first come, first served) one visitor's 10-repeat race
held it for minutes and 16 clients x 2 jobs stretched a victim's 2-second run to over a minute. Here:
- each session has at most one running and one queued job, each client address (appkit/public/clients.py)
  three over all its sessions; a further one is refused in one line at once;
- the model runs one unit of work at a time (a run, one repeat of one method of a race, a profile's method, a
  replay's render), and the next turn goes to the waiting client that has had the least work recently (a
  client's new sessions inherit its service, so throwaway sessions are not favoured): a short
  job from a new visitor runs before a long job's next repeat;
- a request's work (prompt + new tokens, x runs; a Tune: its pilot runs) has a budget, and fp16/bf16 on a CPU (emulated: several times slower
  than fp32) is refused in public mode.
Locally the same turns keep one job at a time (the page's own events), with no budget and no job limit.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable, Iterator

# One request's work on a public Space: the tokens its decoding runs process, prompt and new, x runs (a race:
# (methods + greedy) x repeats; a profile: 2 runs, each profiled; a sweep: its runs + the baseline; a Tune: its
# pilot runs). A prompt token counts as much as a new one: an 8,100-token prefill held the CPU worker 65-288 s,
# 8-35 ms a token, the order of a decoded token. (256 + 256) tokens x 8 runs x 2 repeats = 8,192: a full race
# at the public token cap with 2 repeats on a prompt of up to 256 tokens.
PUBLIC_WORK = 8192
PROFILE_COST = 2  # a profiled run costs about twice a plain one (the profiler's records, the Perfetto file)
CLIENT_JOBS = 3  # per client address over all its sessions (a few visitors may share one address)
RECENT_S = 300.0  # service older than this no longer counts against a session's next turn


class Refused(ValueError):
    """A request refused by the fair share (one line, shown as the event's message)."""


class Turns:
    """Who runs on the model next: one unit at a time, the least-served waiting session first."""

    def __init__(self, max_jobs: int | None = None, client_jobs: int | None = None):
        self.max_jobs = max_jobs  # per session: running + queued (None: no limit)
        self.client_jobs = client_jobs  # per client address, over all its sessions (None: no limit)
        self._owner: OrderedDict[str, str] = OrderedDict()  # session -> client: turns are shared per client
        self._cv = threading.Condition()
        self._busy = False
        self._waiting: list[tuple[str, int]] = []  # (session, ticket) in arrival order
        self._ticket = 0
        self._served: OrderedDict[str, list[tuple[float, float]]] = OrderedDict()  # session -> [(end, seconds)]
        self._jobs: dict[str, int] = {}

    # ---- per-session jobs
    @contextmanager
    def job(self, session: str | None, client: str | None = None) -> Iterator[None]:
        """One event of a session, from its start to its end: refused when the session already has a running
        and a queued one, or its client (address) has client_jobs over all its sessions (each API call is a
        session of its own: a limit per session alone never held for one machine)."""
        key, who = session or "", "@" + (client or "")
        with self._cv:
            if client:
                self._owner[key] = who
                self._owner.move_to_end(key)
                while len(self._owner) > 4096:
                    self._owner.popitem(last=False)
            n, m = self._jobs.get(key, 0), self._jobs.get(who, 0)
            if self.max_jobs is not None and n >= self.max_jobs:
                raise Refused(f"**one job at a time**: this session already has {n} job{'s' if n != 1 else ''} "
                              "running or waiting; wait for it to finish (or press Stop), then try again")
            if client and self.client_jobs is not None and m >= self.client_jobs:
                raise Refused(f"**one job at a time**: this address already has {m} jobs running or waiting; "
                              "wait for them to finish (or press Stop), then try again")
            self._jobs[key] = n + 1
            if client:
                self._jobs[who] = m + 1
        try:
            yield
        finally:
            with self._cv:
                for k in (key, who) if client else (key,):
                    self._jobs[k] -= 1
                    if not self._jobs[k]:
                        del self._jobs[k]

    # ---- turns on the model
    def _recent(self, session: str, now: float) -> float:
        return sum(s for end, s in self._served.get(session, []) if now - end < RECENT_S)

    def _next(self) -> tuple[str, int] | None:
        now = time.monotonic()
        return min(self._waiting, key=lambda w: (self._recent(w[0], now), w[1]), default=None)

    @contextmanager
    def turn(self, session: str | None, stopped: Callable[[], bool] = lambda: False,
             waiting: Callable[[int], None] | None = None) -> Iterator[None]:
        """Hold the model for one unit of work. Waits for this session's turn; `stopped()` ends the wait
        (raising whatever the caller's check raises is its business: here the wait just returns), `waiting(n)`
        hears how many units run or wait before this one."""
        with self._cv:
            key = self._owner.get(session or "", session or "")  # a client's sessions share its service
            self._ticket += 1
            me = (key, self._ticket)
            self._waiting.append(me)
            try:
                while self._busy or self._next() != me:
                    if stopped():
                        raise TurnCancelled()
                    if waiting is not None:
                        waiting(len(self._waiting) - 1 + int(self._busy))
                    self._cv.wait(0.25)
            finally:
                self._waiting.remove(me)
            self._busy = True
        t0 = time.monotonic()
        try:
            yield
        finally:
            with self._cv:
                end = time.monotonic()
                self._served.setdefault(key, []).append((end, end - t0))
                self._served.move_to_end(key)
                self._served[key] = [x for x in self._served[key] if end - x[0] < RECENT_S]
                while len(self._served) > 1024:
                    self._served.popitem(last=False)
                self._busy = False
                self._cv.notify_all()


class TurnCancelled(Exception):
    """The wait for a turn ended because the job was stopped (the caller turns it into its own Stopped)."""


def check_work(tokens: int, runs: int, limit: int | None, what: str, prompt: int = 0) -> None:
    """A request's work ((prompt + new tokens) x runs) within the budget, else one line naming what to lower."""
    total = (prompt + tokens) * runs
    if limit is None or total <= limit:
        return
    raise Refused(f"**work budget**: this {what} asks for ({prompt:,} prompt + {tokens:,} new tokens) x {runs} runs "
                  f"= {total:,} tokens; a request on this Space may process at most {limit:,}: shorten the prompt, "
                  "lower max new tokens, methods or repeats")
