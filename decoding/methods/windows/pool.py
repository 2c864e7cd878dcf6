"""The lookahead n-gram pool: key = a token, value = the N-1 tokens that followed it somewhere.

Two shelves per key: n-grams seen in real text (the prompt and the accepted output) and n-grams
harvested from the Jacobi window (guesses). Lookups offer real-text n-grams first, most recent first:
they are what prompt lookup exploits, and a window guess rarely beats text that already occurred.
Text n-grams are also indexed by the two tokens (previous, key), so a lookup that knows the token
before x0 offers the continuations of the longer, more specific match first.

Text n-grams are read from the shared n-gram index (decoding/methods/lookup/ngrams.py), which also serves prompt
lookup and the staged stage 2. A text n-gram also remembers where it occurred, so a lookup given the text can offer a longer
continuation (`span` tokens) than N-1: measured on the embedded model and the code prompts, 89% of the
extra tokens lookahead accepted came from text n-grams and most such accepts used all N-1 tokens, so
the N-1 cap was what limited them (the window's own guesses are kept at N-1: beyond it they are unknown).
"""
from __future__ import annotations

from collections import OrderedDict

from decoding.methods.lookup.ngrams import NGramIndex


class Pool:
    def __init__(self, n1: int, cap: int, span: int | None = None):
        self.n1, self.cap = n1, max(cap, 1)
        self.span = max(span or n1, n1)
        # text n-grams: where each token (and each two-token key) occurred with n1 known tokens after it
        self.index = NGramIndex(2, 1, follow=n1)
        self.sources: list[tuple[int, str]] = []  # (first position, "prompt" | "output") where a source starts
        self.window: dict[int, OrderedDict[tuple[int, ...], None]] = {}
        self._distinct: dict[int, set[tuple[int, ...]]] = {}  # text n-grams per key, for `size`
        self.size = 0  # n-grams a lookup can offer: up to cap per key and shelf
        # Only when tracing: every change in order, ["t"|"w"|"x", key, *value] (text added, window added,
        # window evicted), so the trace can carry per-step deltas and the pool browser rebuild any step.
        self.log: list[list[int | str]] | None = None

    def add(self, key: int, value: tuple[int, ...], source: str = "window") -> None:
        """A window n-gram (harvested guesses): kept per key, the cap most recent (LRU)."""
        if source != "window":
            raise ValueError("text n-grams come from add_text; add() takes window n-grams")
        shelf = self.window.setdefault(key, OrderedDict())
        if value in shelf:
            shelf.move_to_end(value)
            return
        shelf[value] = None
        if self.log is not None:
            self.log.append(["w", key, *value])
        if len(shelf) > self.cap:
            old, _ = shelf.popitem(last=False)
            if self.log is not None:
                self.log.append(["x", key, *old])
        else:
            self.size += 1

    def add_text(self, tokens: list[int], start: int, source: str) -> int:
        """Add every n-gram of tokens starting at index >= start; returns the next start index."""
        self.index.skip_to(start)
        new = self.index.update(tokens)
        if len(new) and (not self.sources or self.sources[-1][1] != source):
            self.sources.append((new.start, source))
        for i in new:  # size counts distinct continuations per key, at most cap (what a shelf holds)
            seen = self._distinct.setdefault(tokens[i], set())
            value = tuple(tokens[i + 1:i + 1 + self.n1])
            if value not in seen:
                seen.add(value)
                if self.log is not None:
                    self.log.append(["t", tokens[i], *value])
                if len(seen) <= self.cap:
                    self.size += 1
        return self.index.done

    def contents(self) -> dict[int, dict[str, set[tuple[int, ...]]]]:
        """Every n-gram held, by key and shelf (text: each distinct N-1 continuation seen; window: the LRU
        shelf): what the trace's pool deltas rebuild, for the pool browser and its test."""
        out: dict[int, dict[str, set[tuple[int, ...]]]] = {}
        for key, seen in self._distinct.items():
            out.setdefault(key, {"text": set(), "window": set()})["text"] |= seen
        for key, shelf in self.window.items():
            if shelf:
                out.setdefault(key, {"text": set(), "window": set()})["window"] |= set(shelf)
        return out

    def _source(self, at: int) -> str:
        for first, src in reversed(self.sources):  # a short list: one entry per change of source
            if first <= at:
                return src
        raise ValueError(f"position {at} was never indexed")

    def lookup(self, key: int, limit: int, prev: int | None = None,
               text: list[int] | None = None) -> tuple[list[tuple[int, ...]], list[str]]:
        """Up to `limit` distinct continuations of key: text n-grams that also match the previous token,
        then other text n-grams, then window n-grams; each shelf newest first and at most `cap` deep.
        Given the text the pool was filled from, a text n-gram is offered with up to `span` tokens of
        what followed its latest occurrence there."""
        found: dict[tuple[int, ...], str] = {}
        keys = ([(prev, key)] if prev is not None else []) + [(key,)]  # two-token match first
        for k in keys:
            for value, at in self.index.continuations(k, self.n1, self.cap):
                if len(found) >= limit:
                    break
                if text is not None and self.span > self.n1:
                    value = tuple(text[at + 1:at + 1 + self.span])
                if value not in found:
                    found[value] = self._source(at)
        for value in reversed(self.window.get(key, {})):
            if len(found) >= limit:
                break
            found.setdefault(value, "window")
        return list(found), list(found.values())
