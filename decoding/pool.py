"""The lookahead n-gram pool: key = a token, value = the N-1 tokens that followed it somewhere.

Two shelves per key: n-grams seen in real text (the prompt and the accepted output) and n-grams
harvested from the Jacobi window (guesses). Lookups offer real-text n-grams first, most recent first:
they are what prompt lookup exploits, and a window guess rarely beats text that already occurred.
"""
from __future__ import annotations

from collections import OrderedDict


class Pool:
    def __init__(self, n1: int, cap: int):
        self.n1, self.cap = n1, max(cap, 1)
        self.text: dict[int, OrderedDict[tuple[int, ...], str]] = {}
        self.window: dict[int, OrderedDict[tuple[int, ...], str]] = {}
        self.size = 0
        self.lookups = 0
        self.hits = 0

    def add(self, key: int, value: tuple[int, ...], source: str) -> None:
        shelf = (self.window if source == "window" else self.text).setdefault(key, OrderedDict())
        if value in shelf:
            shelf.move_to_end(value)
            return
        shelf[value] = source
        self.size += 1
        if len(shelf) > self.cap:
            shelf.popitem(last=False)
            self.size -= 1

    def add_text(self, tokens: list[int], start: int, source: str) -> int:
        """Add every n-gram of tokens starting at index >= start; returns the next start index."""
        n1 = self.n1
        end = len(tokens) - n1
        for i in range(max(start, 0), end):
            self.add(tokens[i], tuple(tokens[i + 1:i + 1 + n1]), source)
        return max(start, end)

    def lookup(self, key: int, limit: int) -> tuple[list[tuple[int, ...]], list[str]]:
        """Up to `limit` distinct continuations of key: text n-grams first, each shelf newest first."""
        self.lookups += 1
        found: dict[tuple[int, ...], str] = {}
        for shelves in (self.text, self.window):
            shelf = shelves.get(key)
            if shelf:
                for value in reversed(shelf):
                    if len(found) >= limit:
                        break
                    found.setdefault(value, shelf[value])
        if found:
            self.hits += 1
        return list(found), list(found.values())
