"""State a visitor's runs leave for that visitor's later runs: one small dict per browser session.

Why: a cache shared by all sessions and keyed by visitor input answers questions about other visitors. The
greedy speed table was shared and keyed by the exact prompt, so "greedy measured on this prompt: 26.1
tokens/s" against "not measured" confirmed a guess at another visitor's secret prompt; and it was never
pruned, each entry holding a prompt of up to 20,000 characters. Here each session has its own table, at most
`entries` keys (kept as digests, not the prompt), and at most `sessions` sessions are kept, the least
recently used dropped first.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Hashable


def digest(key: Hashable) -> str:
    """A fixed-size stand-in for a key that holds visitor text."""
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()


class PerSession:
    """session -> {digest(key): value}, bounded in sessions and in entries per session."""

    def __init__(self, sessions: int = 256, entries: int = 64):
        self.sessions, self.entries = sessions, entries
        self._lock = threading.Lock()
        self._data: OrderedDict[str, OrderedDict[str, Any]] = OrderedDict()

    def get(self, session: str | None, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            mine = self._data.get(session or "")
            return default if mine is None else mine.get(digest(key), default)

    def put(self, session: str | None, key: Hashable, value: Any) -> None:
        with self._lock:
            mine = self._data.pop(session or "", None) or OrderedDict()
            k = digest(key)
            mine.pop(k, None)
            mine[k] = value
            while len(mine) > self.entries:
                mine.popitem(last=False)
            self._data[session or ""] = mine
            while len(self._data) > self.sessions:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._data.values())
