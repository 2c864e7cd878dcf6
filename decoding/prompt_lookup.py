"""Prompt lookup decoding: find the latest earlier occurrence of the context's last n-gram and propose
the tokens that followed it. Several distinct continuations can be verified in the same forward pass.

An index (n-gram → positions where it ended) is updated incrementally, so a lookup costs O(1)
instead of a scan of the whole context every step.
"""
from __future__ import annotations

from .drafters import Plan
from .masks import add_trie, depths_of
from .verify import Verdict, common_prefix


class PromptLookup:
    name = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, num_tokens: int = 10, candidates: int = 1, min_ngram: int = 1):
        if not (1 <= min_ngram <= max_ngram) or num_tokens < 1 or candidates < 1:
            raise ValueError("prompt lookup needs 1 <= min_ngram <= max_ngram, num_tokens >= 1, candidates >= 1")
        self.max_ngram, self.min_ngram, self.K, self.C = max_ngram, min_ngram, num_tokens, candidates

    def config(self) -> dict:
        return {"max_ngram": self.max_ngram, "min_ngram": self.min_ngram, "num_tokens": self.K,
                "candidates": self.C}

    def max_depth(self) -> int:
        return self.K + 1

    def start(self, prompt_ids: list[int]) -> None:
        self.index: dict[tuple[int, ...], list[int]] = {}
        self._indexed = 0

    def _update_index(self, ctx: list[int]) -> None:
        # ends < len(ctx) - 1 only: the n-gram ending at the last token is the one we look up
        for end in range(self._indexed, len(ctx) - 1):
            for n in range(self.min_ngram, self.max_ngram + 1):
                if end - n + 1 >= 0:
                    self.index.setdefault(tuple(ctx[end - n + 1:end + 1]), []).append(end)
        self._indexed = max(self._indexed, len(ctx) - 1)

    def plan(self, context: list[int]) -> Plan:
        self._update_index(context)
        cands: list[list[int]] = []
        key: list[int] = []
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if n > len(context):
                continue
            ends = self.index.get(tuple(context[-n:]))
            if not ends:
                continue
            key = context[-n:]
            for end in reversed(ends):
                cont = context[end + 1:end + 1 + self.K]
                if cont and cont not in cands:
                    cands.append(cont)
                    if len(cands) >= self.C:
                        break
            break
        parents, roles, slots = [-1], ["x0"], [(0, 0)]
        tokens = [context[-1]] + add_trie(parents, roles, slots, cands)  # shared prefixes verified once
        info = {"key": key, "candidates": cands}
        return Plan(tokens, parents, depths_of(parents), roles, slots, [r == "candidate" for r in roles],
                    origin="prompt_lookup", info=info)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        acc = verdict.tokens
        plan.info["matched"] = [common_prefix(c, acc) for c in plan.info["candidates"]]
        plan.info["chosen"] = plan.slots[verdict.path[-1]][0] if len(verdict.path) > 1 else None
