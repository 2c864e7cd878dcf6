"""SuffixDecoding's source (Oliaro et al., 2024, arXiv 2411.04975): what was already said, searched by suffix.

Why: agentic and chat workloads repeat themselves (the prompt's code, the answer so far, earlier answers), so
the longest suffix of the context that occurred before predicts what comes next, for free. SuffixDecoding keeps
a suffix tree per request (prompt and output so far) and a global one over earlier responses; here the
request's own text is the context itself and the global history holds the earlier runs of this process (the
app's history), bounded to HISTORY_TOKENS (oldest runs dropped first).

The search is vectorised (numpy): the positions where the last context token occurs, narrowed one suffix
length at a time (a loop over match length, at most max_suffix, never over positions), which at these sizes
(a request plus ~1M history tokens) costs well under the 2 ms a lookup may take. The CLI and the library share
one process-wide history (HISTORY: SuffixDecoding's global tree, one user per process; HISTORY.clear() empties
it). A server with several visitors must not: one visitor's prompt would be drafted into another's run. The app
keeps one History per browser session (Histories below) and gives a race a frozen copy per run (History.copy).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from decoding.methods.retrieve.datastore import Match

HISTORY_TOKENS = 1_000_000
SEP = -1


class History:
    """Earlier runs (prompt + output token ids), newest last, as one array with SEP between runs."""

    def __init__(self, limit: int = HISTORY_TOKENS):
        self.limit = limit
        self.runs: list[np.ndarray] = []
        self._flat: np.ndarray | None = None
        self._starts = np.zeros(0, dtype=np.int64)
        self.pending: list[int] | None = None  # the run in progress (the engine's context list)

    def commit_pending(self) -> None:
        """Add the run in progress (its prompt and output) to the history: called when the next run starts."""
        if self.pending is not None:
            self.add(list(self.pending))
            self.pending = None

    def count(self) -> int:
        """The earlier runs a run starting now drafts from: the kept ones and the one still pending (it joins
        when the next run starts, so a config written before that start must count it too)."""
        return len(self.runs) + (1 if self.pending is not None and len(self.pending) >= 2 else 0)

    def add(self, ids: list[int]) -> None:
        if len(ids) < 2:
            return
        self.runs.append(np.asarray(ids[-self.limit:], dtype=np.int64))
        while sum(len(r) + 1 for r in self.runs) > self.limit:
            self.runs.pop(0)
        self._flat = None

    def copy(self) -> "History":
        """A snapshot: the runs so far (the run in progress included), nothing pending. A run drafting from the
        copy adds nothing to this history, so several runs (a race's repeats) all start from the same state."""
        h = History(self.limit)
        h.runs = list(self.runs)
        if self.pending is not None and len(self.pending) >= 2:
            h.add(list(self.pending))
        return h

    def clear(self) -> None:
        self.runs.clear()
        self._flat, self.pending = None, None

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """(all runs joined with SEP, start of each run in it), rebuilt only after a change."""
        if self._flat is None:
            parts = [x for r in self.runs for x in (r, np.array([SEP]))]
            self._flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            self._starts = np.cumsum([0] + [len(r) + 1 for r in self.runs])[:-1].astype(np.int64)
        return self._flat, self._starts


HISTORY = History()  # the process's global history (SuffixDecoding's global tree): the CLI's and the library's


class Histories:
    """One History per session (a browser session of the app), so a run drafts only from its own session's
    earlier runs. Bounded: at most `sessions` histories (the least recently used is dropped first) of at most
    `limit` tokens each; an unknown session (None) gets an empty history of its own every time."""

    def __init__(self, sessions: int = 64, limit: int = HISTORY_TOKENS):
        self.sessions, self.limit = sessions, limit
        self._by: OrderedDict[str, History] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: str | None) -> History:
        if not session:
            return History(self.limit)
        with self._lock:
            h = self._by.pop(session, None) or History(self.limit)
            self._by[session] = h  # most recently used last
            while len(self._by) > self.sessions:
                self._by.popitem(last=False)
            return h

    def __len__(self) -> int:
        return len(self._by)


def longest_suffix(buf: np.ndarray, context: np.ndarray, max_suffix: int, end: int | None = None) -> tuple[int, np.ndarray]:
    """(m, ends): the longest m <= max_suffix such that context[-m:] occurs in buf ending at positions `ends`
    (each < end, so a continuation exists), and those end positions; (0, empty) when not even the last token
    occurs. Vectorised over positions; the loop runs over the match length only."""
    end = len(buf) - 1 if end is None else end
    if end <= 0 or len(context) == 0:
        return 0, np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(buf[:end] == context[-1])
    m = 1 if len(ends) else 0
    while m and m < min(max_suffix, len(context)):
        prev = ends - m
        ok = prev >= 0
        nxt = ends[ok][buf[prev[ok]] == context[-m - 1]]
        if not len(nxt):
            break
        ends, m = nxt, m + 1
    return m, ends


def continuations(buf: np.ndarray, ends: np.ndarray, span: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """[k, span] tokens after up to `limit` match ends (the most recent ones: SuffixDecoding favours what the
    request said last), -1 past the buffer or a run's end; and the ends used."""
    ends = ends[-limit:]
    pos = ends[:, None] + 1 + np.arange(span, dtype=np.int64)[None, :]
    conts = buf[np.minimum(pos, len(buf) - 1)].copy()
    dead = (pos >= len(buf)) | (np.cumsum(conts == SEP, axis=1) > 0)
    conts[dead] = -1
    return conts, ends


def lookup(context: list[int], history: History | None, prompt_len: int, max_suffix: int = 32, span: int = 16,
           limit: int = 5000) -> tuple[Match | None, list[tuple[str, int]]]:
    """The longer of the two matches (this request's own text, the history; a tie goes to the request) and,
    for every continuation, where it matched: ("prompt" | "output", position) or ("run k", position), k
    counting earlier runs from 1 = the oldest kept."""
    ctx = np.asarray(context, dtype=np.int64)
    m_own, e_own = longest_suffix(ctx, ctx, max_suffix, end=len(ctx) - 1)
    flat, starts = history.flat() if history is not None else (ctx[:0], ctx[:0])
    m_h, e_h = longest_suffix(flat, ctx, max_suffix) if len(flat) else (0, e_own[:0])
    if max(m_own, m_h) == 0:
        return None, []
    total = len(e_own) if m_own >= m_h else len(e_h)
    if m_own >= m_h:
        conts, ends = continuations(ctx, e_own, span, limit)
        where = [("prompt" if e < prompt_len else "output", int(e) + 1 - m_own) for e in ends.tolist()]
        m = m_own
    else:
        conts, ends = continuations(flat, e_h, span, limit)
        run = np.searchsorted(starts, ends, side="right") - 1
        where = [(f"run {r + 1}", int(e - starts[r]) + 1 - m_h) for r, e in zip(run.tolist(), ends.tolist())]
        m = m_h
    return Match(m, total, conts, np.asarray([w[1] for w in where], dtype=np.int64)), where
