"""The lookahead n-gram pool: key = a token, value = the N-1 tokens that followed it somewhere.

Two shelves per key: n-grams seen in real text (the prompt and the accepted output) and n-grams
harvested from the Jacobi window (guesses). Lookups offer real-text n-grams first, most recent first:
they are what prompt lookup exploits, and a window guess rarely beats text that already occurred.
Text n-grams are also indexed by the two tokens (previous, key), so a lookup that knows the token
before x0 offers the continuations of the longer, more specific match first.

A text n-gram also remembers where it occurred, so a lookup given the text can offer a longer
continuation (`span` tokens) than N-1: measured on the embedded model and the code prompts, 89% of the
extra tokens lookahead accepted came from text n-grams and most such accepts used all N-1 tokens, so
the N-1 cap was what limited them (the window's own guesses are kept at N-1: beyond it they are unknown).
"""
from __future__ import annotations

from collections import OrderedDict


class Pool:
    def __init__(self, n1: int, cap: int, span: int | None = None):
        self.n1, self.cap = n1, max(cap, 1)
        self.span = max(span or n1, n1)
        self.text: dict[int, OrderedDict[tuple[int, ...], str]] = {}
        self.window: dict[int, OrderedDict[tuple[int, ...], str]] = {}
        self.text2: dict[tuple[int, int], OrderedDict[tuple[int, ...], str]] = {}
        self.size = 0

    def add(self, key: int, value: tuple[int, ...], source: str, prev: int | None = None,
            at: int | None = None) -> None:
        """at: the key's index in the text, for longer continuations (text n-grams only)."""
        shelf = (self.window if source == "window" else self.text).setdefault(key, OrderedDict())
        self.size += _put(shelf, value, (source, at), self.cap)
        if prev is not None and source != "window":
            _put(self.text2.setdefault((prev, key), OrderedDict()), value, (source, at), self.cap)

    def add_text(self, tokens: list[int], start: int, source: str) -> int:
        """Add every n-gram of tokens starting at index >= start; returns the next start index."""
        n1 = self.n1
        end = len(tokens) - n1
        for i in range(max(start, 0), end):
            self.add(tokens[i], tuple(tokens[i + 1:i + 1 + n1]), source, tokens[i - 1] if i else None, i)
        return max(start, end)

    def lookup(self, key: int, limit: int, prev: int | None = None,
               text: list[int] | None = None) -> tuple[list[tuple[int, ...]], list[str]]:
        """Up to `limit` distinct continuations of key: text n-grams that also match the previous token,
        then other text n-grams, then window n-grams; each shelf newest first. Given the text the pool
        was filled from, a text n-gram is offered with up to `span` tokens of what followed it there."""
        found: dict[tuple[int, ...], str] = {}
        for shelf in (self.text2.get((prev, key)) if prev is not None else None, self.text.get(key),
                      self.window.get(key)):
            if shelf:
                for value in reversed(shelf):
                    if len(found) >= limit:
                        break
                    source, at = shelf[value]
                    if text is not None and at is not None and self.span > self.n1:
                        value = tuple(text[at + 1:at + 1 + self.span])
                    found.setdefault(value, source)
        return list(found), list(found.values())


def _put(shelf: OrderedDict, value: tuple[int, ...], entry: tuple[str, int | None], cap: int) -> int:
    """Insert or refresh value (LRU, at most cap; a refresh keeps the latest position); returns the change
    in the number of entries."""
    if value in shelf:
        shelf.move_to_end(value)
        shelf[value] = entry
        return 0
    shelf[value] = entry
    if len(shelf) > cap:
        shelf.popitem(last=False)
        return 0
    return 1
