"""Replaying the tree builder from one device read (draft_tree.py, TreeBuilder._replay): when the draft's
levels were chained on the device, the host rebuilds the same nodes from the top lists read at the end.
A node the device did not run aborts the replay (_Miss) and the step falls back to the level-by-level build.
"""
from __future__ import annotations


class _Miss(Exception):
    """The replay needed a node the device did not run."""


class _Missing:
    """The top list of a region row the device did not run: reading it aborts the replay."""

    def __getitem__(self, i):
        raise _Miss

    def __iter__(self):
        raise _Miss


class _Replay:
    """The draft Core as build() sees it during a replay (TreeBuilder._replay): grow() runs no forward, it
    names each new row by its token path below x0 (catch-up rows: none; x0: ()); tops() hands back the top
    lists read from the device for those paths."""

    def __init__(self, length: int, n0: int, n_catch: int, table: dict):
        self.length, self.table, self.catch_end = length, table, n0 + n_catch
        self.spec_parents: list[int] = [-1] * n0
        self.paths: dict[int, tuple | None] = {}

    def grow(self, tokens: list[int], parents: list[int], skip: int = 0) -> list[int]:
        out = []
        for t, p in zip(tokens, parents):
            v = len(self.spec_parents)
            self.spec_parents.append(p)
            if v < self.catch_end:
                self.paths[v] = () if v == self.catch_end - 1 else None
            else:
                up = self.paths.get(p)
                self.paths[v] = None if up is None else up + (t,)
            out.append(v)
        return out[skip:]

    def tops(self, rows: list[int]) -> list:
        return [self.table[self.paths[v]][0] if self.paths[v] in self.table else _Missing() for v in rows]

    def real(self, v: int) -> int:
        """A replayed row's row in the draft's region (catch-up rows, and -1, are the same)."""
        return v if v < self.catch_end else self.table[self.paths[v]][1]


def _top_list(toks: list[float], probs: list[float]) -> list[tuple[int, float]]:
    """A read row as _tops makes it: (token, probability) pairs, best first."""
    return [(int(t), p) for t, p in zip(toks, probs)]
