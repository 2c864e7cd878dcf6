"""A visitor's fair share of the one model (public mode): turns shared step by step, job limits, a work budget.

Why: one model serves every visitor. In Gradio's queue (first come, first served) one visitor's 10-repeat race
held it for minutes; a single run inside every limit (1,007 prompt tokens, 256 new, a 112-query lookahead step,
temperature 2) held it for 165 s; 16 addresses x 3 jobs kept a fresh visitor waiting 25-136 s. Here:
- the model is shared step by step (iteration-level scheduling, as Orca and vLLM schedule): a run holds the
  model for one decoding step at a time; between two steps it gives the model to any waiting client that has
  received less service (model seconds in the last RECENT_S) than it has, so a fresh visitor waits a few steps of
  someone else's run, whatever that run's length. A run's own state (its KV cache, drafter, sampler) is its own,
  so its tokens are the same whether it was interleaved or not; its trace says how often it gave way
  (`config.interleaved`) and its wall time counts only its own steps;
- a step's real cost, query positions x (context + the weights' share, `weight_span`), is charged as it runs
  against the request's work budget, and a run holds the model for at most RUN_MODEL_S and lasts at most
  RUN_WALL_S: past either the run is cut after its step, keeps what it made and says why;
- each session has at most one running and one queued job, each client (an address, an IPv6 /64:
  appkit/public/clients.py) CLIENT_JOBS over all its sessions, and the server TOTAL_JOBS, the last RESERVE of
  them for clients with nothing running: a further one is refused in one line at once;
- fp16/bf16 on a CPU (emulated: several times slower than fp32) is refused in public mode (limits.py).
Locally the same turns keep one unit at a time (the page's own events), with no budget and no job limit.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager
from typing import Callable, Iterator

# One request's work, counted before it starts in tokens (prompt + new, x runs; a race: (methods + greedy) x
# repeats; a profile: 2 runs, each profiled; a sweep: its runs + the baseline; a Tune: its pilot runs). A prompt
# token counts as much as a new one: an 8,100-token prefill held the CPU worker 65-288 s. (256 + 256) tokens x 8
# runs x 2 repeats = 8,192: a full race at the public token cap with 2 repeats on a prompt of up to 256 tokens.
PUBLIC_WORK = 8192
# The same budget as it is charged while the request runs, in work units: a step costs its query positions x
# (their context + the model's weight span). A token-equivalent is one query position at a context of
# WORK_CONTEXT: PUBLIC_WORK of them. A lookahead step of 112 queries costs 112 times a greedy step's weights.
WORK_CONTEXT = 1024
PROFILE_COST = 2  # a profiled run costs about twice a plain one (the profiler's records, the Perfetto file)
CLIENT_JOBS = 3  # per client (address or IPv6 /64) over all its sessions (a few visitors may share one address)
TOTAL_JOBS = 64  # running or waiting on the server, all clients
RESERVE = 16  # the last places of TOTAL_JOBS: only for a client with nothing running or waiting
RECENT_S = 300.0  # service older than this no longer counts against a client's next turn
RUN_MODEL_S = 60.0  # public mode: model seconds one run may hold (its steps only, not its waits)
RUN_WALL_S = 180.0  # public mode: a run's wall time, waits included


class Refused(ValueError):
    """A request refused by the fair share (one line, shown as the event's message)."""


class TurnCancelled(Exception):
    """The wait for a turn ended because the job was stopped (the caller turns it into its own Stopped)."""


class Cut(TurnCancelled):
    """A run ended by a public bound after a step (work budget, model time, wall time): `reason` is the trace's
    stop_reason, `why` the line the page shows."""

    def __init__(self, reason: str, why: str):
        super().__init__(why)
        self.reason, self.why = reason, why


def weight_span(config) -> int:
    """The context length whose attention costs what one query position's weights cost: 2 x parameters of the
    layers over 4 x layers x hidden size (a query's attention reads keys and values of every context position
    in every layer). SmolLM2-135M: ~3,900 positions; the embedded 10M model: ~1,000."""
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0) or 0)
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0) or 0)
    inter = int(getattr(config, "intermediate_size", 0) or getattr(config, "n_inner", 0) or 4 * hidden)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if not hidden or not layers:
        return WORK_CONTEXT
    params = layers * (4 * hidden * hidden + 3 * hidden * inter) + vocab * hidden  # the LM head reads every row
    return max(1, 2 * params // (4 * layers * hidden))


def step_cost(n_query: int, kv_len: int, span: int) -> int:
    """A step's work units: each query position attends over the cache and the step's earlier positions (on
    average half of them) and reads the weights (`span`)."""
    return int(n_query) * (int(kv_len) + int(n_query) // 2 + int(span))


class Budget:
    """One request's work as it runs: charged per step (step_cost), with its runs' model and wall time bounds.
    limit None: counted but never cut (local mode)."""

    def __init__(self, limit_tokens: int | None = None, run_model_s: float | None = None,
                 run_wall_s: float | None = None):
        self.limit_tokens, self.run_model_s, self.run_wall_s = limit_tokens, run_model_s, run_wall_s
        self.span = WORK_CONTEXT  # set from the model once it is loaded (weight_span)
        self.used = 0

    @property
    def limit(self) -> int | None:
        return None if self.limit_tokens is None else self.limit_tokens * (WORK_CONTEXT + self.span)

    def charge(self, n_query: int, kv_len: int, held_s: float, wall_s: float) -> None:
        """Count a finished step; Cut when the request's budget or the run's time bound is passed."""
        self.used += step_cost(n_query, kv_len, self.span)
        if self.limit is not None and self.used > self.limit:
            raise Cut("work_budget", f"cut: this request used its work budget ({self.used:,} of {self.limit:,} "
                                     "units: query positions x (context + the weights' span)); lower max new "
                                     "tokens, the draft's size or the prompt")
        if self.run_model_s is not None and held_s > self.run_model_s:
            raise Cut("time_limit", f"cut: this run held the model {held_s:.0f} s, the most one run may hold here "
                                    f"is {self.run_model_s:.0f} s")
        if self.run_wall_s is not None and wall_s > self.run_wall_s:
            raise Cut("time_limit", f"cut: this run took {wall_s:.0f} s, the most one run may take here is "
                                    f"{self.run_wall_s:.0f} s")


_held = threading.local()  # the turn this thread holds: between_steps (the engine's on_step) reads it


class Held:
    """A turn on the model while it is held: `between_steps` shares it and charges the budget."""

    def __init__(self, turns: "Turns", key: str, stopped: Callable[[], bool], budget: Budget | None, share: bool):
        self.turns, self.key, self.stopped, self.budget, self.share = turns, key, stopped, budget, share
        self.t0 = self.start = time.monotonic()  # this segment's start; the run's start
        self.held_s = 0.0  # model seconds in earlier segments
        self.pauses, self.waited_s = 0, 0.0
        self.holding = True  # False once a Stop ended a wait to take the model back


def between_steps(n_query: int = 0, kv_len: int = 0) -> float:
    """Called after each decoding step by the thread holding a turn (stream.Job.check): charges the step to the
    request's budget (Cut past it) and, if a waiting client has had less service, gives the model to it and
    waits for the next turn (TurnCancelled on Stop). Returns the seconds it waited (0 if it kept the model).
    A profile keeps the model for its whole run: torch.profiler would record another visitor's steps."""
    held: Held | None = getattr(_held, "held", None)
    if held is None:
        return 0.0
    now = time.monotonic()
    if held.budget is not None:
        held.budget.charge(n_query, kv_len, held.held_s + now - held.t0, now - held.start)
    if not held.share or _profiling():
        return 0.0
    return held.turns.give_way(held)


def _profiling() -> bool:
    import torch
    return bool(torch.autograd.profiler._is_profiler_enabled)


class Turns:
    """Who runs on the model next: one unit at a time, the least-served waiting client first; a unit that runs
    steps gives way between two of them (between_steps)."""

    def __init__(self, max_jobs: int | None = None, client_jobs: int | None = None, total_jobs: int | None = None,
                 reserve: int = 0):
        self.max_jobs = max_jobs  # per session: running + queued (None: no limit)
        self.client_jobs = client_jobs  # per client, over all its sessions (None: no limit)
        self.total_jobs, self.reserve = total_jobs, reserve  # on the server (None: no limit)
        self._owner: OrderedDict[str, str] = OrderedDict()  # session -> client: turns are shared per client
        self._cv = threading.Condition()
        self._busy = False
        self._waiting: list[tuple[str, int]] = []  # (client key, ticket) in arrival order
        self._ticket = 0
        # key -> [[end, seconds], ...] (one entry a second at most) and its running sum: every waiting thread asks
        # for every waiting client's service each time it wakes, so it must not cost the length of its history
        self._served: OrderedDict[str, deque] = OrderedDict()
        self._sums: dict[str, float] = {}
        self._jobs: dict[str, int] = {}
        self._total = 0

    # ---- per-session jobs
    @contextmanager
    def job(self, session: str | None, client: str | None = None) -> Iterator[None]:
        """One event of a session, from its start to its end: refused when the session already has a running
        and a queued one, its client has client_jobs over all its sessions (each API call is a session of its
        own: a limit per session alone never held for one machine), or the server is full (its last `reserve`
        places are kept for clients with nothing running). Released on every exit (done, failed, stopped)."""
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
            if self.total_jobs is not None and (self._total >= self.total_jobs or
                                                (m and self._total >= self.total_jobs - self.reserve)):
                raise Refused(f"**the server is busy**: {self._total} jobs are running or waiting; its last places "
                              "are kept for visitors with nothing running: try again when your job has finished")
            self._jobs[key] = n + 1
            if client:
                self._jobs[who] = m + 1
            self._total += 1
        try:
            yield
        finally:
            with self._cv:
                for k in (key, who) if client else (key,):
                    self._jobs[k] -= 1
                    if not self._jobs[k]:
                        del self._jobs[k]
                self._total -= 1

    def jobs(self) -> int:
        """Jobs running or waiting now (the tests' and the docs' count)."""
        with self._cv:
            return self._total

    # ---- turns on the model
    def _recent(self, key: str, now: float) -> float:
        """The key's model seconds in the last RECENT_S: older entries leave its running sum as they expire."""
        q = self._served.get(key)
        if not q:
            return 0.0
        while q and now - q[0][0] >= RECENT_S:
            self._sums[key] -= q.popleft()[1]
        return max(self._sums[key], 0.0) if q else 0.0

    def _next(self) -> tuple[str, int] | None:
        now = time.monotonic()
        return min(self._waiting, key=lambda w: (self._recent(w[0], now), w[1]), default=None)

    def _record(self, key: str, seconds: float, end: float) -> None:
        q = self._served.get(key)
        if q is None:
            q = self._served[key] = deque()
            self._sums[key] = 0.0
        if q and end - q[-1][0] < 1.0:  # a step's turn every few ms: one entry a second keeps the history short
            q[-1][0] = end
            q[-1][1] += seconds
        else:
            q.append([end, seconds])
        self._sums[key] += seconds
        self._served.move_to_end(key)
        while len(self._served) > 1024:
            old, _ = self._served.popitem(last=False)
            self._sums.pop(old, None)

    def _wait(self, key: str, stopped: Callable[[], bool], waiting: Callable[[int], None] | None = None) -> None:
        """Queue as `key` and return holding the model (under self._cv); TurnCancelled when stopped()."""
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

    @contextmanager
    def turn(self, session: str | None, stopped: Callable[[], bool] = lambda: False,
             waiting: Callable[[int], None] | None = None, budget: Budget | None = None,
             share: bool = True) -> Iterator[Held]:
        """Hold the model for one unit of work. Waits for this session's turn; `stopped()` ends the wait
        (TurnCancelled), `waiting(n)` hears how many units run or wait before this one. The unit's steps may
        give way to others in between (between_steps) unless share is False."""
        with self._cv:
            key = self._owner.get(session or "", session or "")  # a client's sessions share its service
            self._wait(key, stopped, waiting)
        held = Held(self, key, stopped, budget, share)
        outer = getattr(_held, "held", None)
        _held.held = held
        try:
            yield held
        finally:
            _held.held = outer
            if held.holding:
                with self._cv:
                    end = time.monotonic()
                    self._record(key, end - held.t0, end)
                    self._busy = False
                    self._cv.notify_all()

    def give_way(self, held: Held) -> float:
        """Between two steps of `held`'s unit: if a waiting client has had less service than held's (its current
        unit included), let it run and wait for the next turn. Returns the seconds waited."""
        with self._cv:
            if not self._waiting:
                return 0.0
            now = time.monotonic()
            first = self._next()
            if first is None or self._recent(first[0], now) >= self._recent(held.key, now) + now - held.t0:
                return 0.0
            self._record(held.key, now - held.t0, now)
            held.held_s += now - held.t0
            self._busy = False
            self._cv.notify_all()
            try:
                self._wait(held.key, held.stopped)
            except TurnCancelled:  # stopped while waiting: the unit ends without the model
                held.holding = False
                raise
            held.t0 = time.monotonic()
            held.pauses += 1
            held.waited_s += held.t0 - now
            return held.t0 - now


def check_work(tokens: int, runs: int, limit: int | None, what: str, prompt: int = 0) -> None:
    """A request's work ((prompt + new tokens) x runs) within the budget, else one line naming what to lower."""
    total = (prompt + tokens) * runs
    if limit is None or total <= limit:
        return
    raise Refused(f"**work budget**: this {what} asks for ({prompt:,} prompt + {tokens:,} new tokens) x {runs} runs "
                  f"= {total:,} tokens; a request on this Space may process at most {limit:,}: shorten the prompt, "
                  "lower max new tokens, methods or repeats")
