"""One n-gram index for every text-matching drafter: prompt lookup, the lookahead pool's text n-grams and
the staged stage-2 drafter (and the stage-2 corpus table).

It records where each n-gram (min_n..max_n tokens) of a growing text ENDS, oldest first, indexing only
n-grams followed by at least `follow` tokens (their continuation is known). Updates are incremental, so a
step costs the new tokens, not a rescan of the context. Consumers read what followed a match from the
text itself: the latest continuation (stage 2), or distinct continuations newest first (prompt lookup,
the pool).
"""
from __future__ import annotations


class NGramIndex:
    def __init__(self, max_n: int, min_n: int = 1, follow: int = 1):
        if not 1 <= min_n <= max_n or follow < 1:
            raise ValueError("n-gram index needs 1 <= min_n <= max_n and follow >= 1")
        self.max_n, self.min_n, self.follow = max_n, min_n, follow
        self.ends: dict[tuple[int, ...], list[int]] = {}
        self.text: list[int] = []
        self.done = 0  # the next end position to index
        self._memo: dict[tuple, tuple[int, list]] = {}  # (key, length, limit) -> (ends seen, answer)

    def skip_to(self, end: int) -> None:
        """Never index n-grams ending before `end` (text the caller does not want offered)."""
        self.done = max(self.done, end)

    def update(self, text: list[int]) -> range:
        """Index the n-grams of `text` (an extension of the text seen so far) that end at a new position
        with `follow` tokens after it; returns the range of end positions just indexed."""
        self.text = text
        new = range(self.done, len(text) - self.follow)
        for end in new:
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                self.ends.setdefault(tuple(text[end - n + 1:end + 1]), []).append(end)
        self.done = max(self.done, len(text) - self.follow)
        return new

    def latest(self, key: tuple[int, ...]) -> int | None:
        """The token that followed the most recent occurrence of key, or None."""
        ends = self.ends.get(key)
        return self.text[ends[-1] + 1] if ends else None

    def continuations(self, key: tuple[int, ...], length: int, limit: int) -> list[tuple[tuple[int, ...], int]]:
        """Up to `limit` distinct continuations (up to `length` tokens of what followed key), newest
        occurrence first, each with the end position of that latest occurrence.

        When length <= follow a continuation never changes once indexed, so the last answer for this key
        is extended with the occurrences since (an LRU of distinct continuations, as a shelf would keep)
        instead of rescanning every occurrence of a frequent token."""
        ends = self.ends.get(key, ())
        stable = length <= self.follow
        seen, before = self._memo.get((key, length, limit), (0, [])) if stable else (0, [])
        out: dict[tuple[int, ...], int] = {}
        for end in reversed(ends[seen:]):
            if len(out) >= limit:
                break
            cont = tuple(self.text[end + 1:end + 1 + length])
            if cont and cont not in out:
                out[cont] = end
        for cont, end in before:  # older than every occurrence above
            if len(out) >= limit:
                break
            out.setdefault(cont, end)
        answer = list(out.items())
        if stable:
            self._memo[(key, length, limit)] = (len(ends), answer)
        return answer
