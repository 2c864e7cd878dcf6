"""Prompt lookup decoding: find the latest earlier occurrence of the context's last n-gram and propose
the tokens that followed it. Several distinct continuations can be verified in the same forward pass.

The shared n-gram index (decoding/ngrams.py: n-gram → positions where it ended) is updated
incrementally, so a lookup costs O(1) instead of a scan of the whole context every step.
"""
from __future__ import annotations

from .drafters import Plan
from .masks import add_trie, depths_of
from .ngrams import NGramIndex
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
        # n-grams ending before the last token: the one ending at it is what we look up
        self.index = NGramIndex(self.max_ngram, self.min_ngram, follow=1)

    def plan(self, context: list[int]) -> Plan:
        self.index.update(context)
        cands: list[list[int]] = []
        key: list[int] = []
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            found = self.index.continuations(tuple(context[-n:]), self.K, self.C)
            if found:  # the longest n-gram that occurred earlier decides
                key, cands = context[-n:], [list(c) for c, _ in found]
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
