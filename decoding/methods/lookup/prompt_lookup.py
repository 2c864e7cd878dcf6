"""Prompt lookup decoding: find the latest earlier occurrence of the context's last n-gram and propose
the tokens that followed it. Several distinct continuations can be verified in the same forward pass.

The shared n-gram index (decoding/methods/lookup/ngrams.py: n-gram → positions where it ended) is updated
incrementally, so a lookup costs O(1) instead of a scan of the whole context every step.

Reference lookup (LLMA, Yang et al. 2023, "Inference with Reference"): the same lookup also searches
reference texts the user supplies (retrieved documents, the file being edited), and copies up to
`reference_tokens` tokens from there; tokens accepted from a reference get the origin "reference".
Aggressive decoding (Ge et al.) is its special case where the reference is the input of an edit
(fix typos, rewrite a function): the output copies long spans of it. Each reference keeps a cursor
(where the last accepted copy ended), and the occurrence at or after it is offered first: in an edit
the output walks through the input in order, and a frequent n-gram (`self.x`) must not jump back.

adaptive=1 (greedy) copies only as far as pays on this device: position d of a copy is accepted with the run's
own rate so far (accepted / tried at that position, from a prior of one half), so a copy's node at depth d
has path probability q_1 x ... x q_d, and the row-cost pricing (row_cost.py) keeps the depth whose expected
tokens pay for its rows at the run's going rate; no node pays, a plain step. On a CPU a 10-token copy costs an
11-row step (2-3 one-row steps) whether chat accepts one token of it or code ten.
"""
from __future__ import annotations

from dataclasses import dataclass
import bisect

from decoding.engine.drafter import Abilities, Plan
from decoding.engine.masks import add_trie, depths_of
from decoding.methods.lookup.ngrams import NGramIndex
from decoding.engine.verify import Verdict, common_prefix
from decoding.params import LIMITS
from decoding.methods.row_cost import (RowCost, adaptive_config, adaptive_flag, adaptive_knob, parse_curve,
                                      priced_copies, row_ms_knob)
from decoding.methods.spec import MethodSpec, knob
from decoding.methods.tree_verdict import record_verdict


class PromptLookup:
    name = "prompt_lookup"

    @property
    def abilities(self) -> Abilities:
        """adaptive: bound to the target (bind) to measure what its rows cost."""
        return Abilities(binds_target=self.adaptive)

    @classmethod
    def from_params(cls, **p) -> "PromptLookup":
        return cls(p.get("max_ngram", 3), p.get("num_tokens", 10), p.get("candidates", 1),
                   reference=p.get("reference_ids"), reference_tokens=p.get("reference_tokens", 24),
                   adaptive=p.get("adaptive") or 0, row_ms=p.get("row_ms"))

    def __init__(self, max_ngram: int = 3, num_tokens: int = 10, candidates: int = 1, min_ngram: int = 1,
                 reference: list[list[int]] | None = None, reference_tokens: int = 24, adaptive: int = 0,
                 row_ms: str | None = None):
        if not (1 <= min_ngram <= max_ngram) or num_tokens < 1 or candidates < 1 or reference_tokens < 1:
            raise ValueError("prompt lookup needs 1 <= min_ngram <= max_ngram, num_tokens >= 1, candidates >= 1, "
                             "reference_tokens >= 1")
        self.adaptive = adaptive_flag(adaptive, "prompt lookup", "copy num_tokens",
                                      "copies priced by the row-cost curve")
        self.row_ms = parse_curve(row_ms) if row_ms else None
        self.cost: RowCost | None = None
        if reference is not None and (not reference or not all(reference)):
            raise ValueError("a reference text is empty (it has no tokens)")
        self.max_ngram, self.min_ngram, self.K, self.C = max_ngram, min_ngram, num_tokens, candidates
        self.reference = [list(r) for r in reference or []]
        self.R = reference_tokens

    def config(self) -> dict:
        c = {"max_ngram": self.max_ngram, "min_ngram": self.min_ngram, "num_tokens": self.K, "candidates": self.C}
        if self.reference:  # sizes only: the texts are the user's and can be long
            c.update(references=len(self.reference), reference_tokens=self.R,
                     reference_lengths=[len(r) for r in self.reference])
        if self.adaptive:
            c.update(adaptive_config(self.cost))
        return c

    def bind(self, model, sampling) -> None:
        """adaptive only: the target's row-cost curve (given, or measured once per model)."""
        self.cost = priced_copies("prompt lookup", model, sampling, self.row_ms, self.max_depth())

    def max_depth(self) -> int:
        return max(self.K, self.R if self.reference else 0) + 1

    def start(self, prompt_ids: list[int]) -> None:
        # n-grams ending before the last token: the one ending at it is what we look up
        self.index = NGramIndex(self.max_ngram, self.min_ngram, follow=1)
        self.refs = []
        for r in self.reference:
            idx = NGramIndex(self.max_ngram, self.min_ngram, follow=1)
            idx.update(r)
            self.refs.append(idx)
        self.cursor = [0] * len(self.refs)  # per reference: the position after the last accepted copy
        depth = self.max_depth()
        self.tried, self.hit = [0] * depth, [0] * depth  # adaptive: per copy position, tried and accepted
        if self.cost is not None:
            self.cost.start()

    def _priced(self, cands: list[list[int]]) -> tuple[int, list[float]]:
        """adaptive: how deep to copy (0: not at all) and the kept nodes' path probabilities. Position d is
        accepted at the run's rate so far (Laplace's rule from 1/2); the row-cost pricing keeps the best
        prefix of the nodes in depth order (a depth's nodes are at least as likely as the next depth's)."""
        probs, p, depth_of = [], 1.0, []
        for d in range(1, max(map(len, cands)) + 1):
            p *= (self.hit[d] + 1) / (self.tried[d] + 2)
            nodes = len({tuple(c[:d]) for c in cands if len(c) >= d})  # the trie's nodes at depth d
            probs += [p] * nodes
            depth_of += [d] * nodes
        keep = self.cost.keep(probs)
        if keep == 0:
            return 0, []
        depth = depth_of[keep - 1] if keep == len(probs) or depth_of[keep] != depth_of[keep - 1] \
            else depth_of[keep - 1] - 1  # whole depths only: every candidate is cut at the same length
        return depth, [q for q, d in zip(probs, depth_of) if d <= depth]
    def _from_references(self, key: tuple[int, ...]) -> list[tuple[list[int], int, int]]:
        """(continuation, reference, end of the matched key) for up to C references that contain key:
        the occurrence at or after the reference's cursor first, else the nearest before it."""
        out = []
        for d, idx in enumerate(self.refs):
            ends = idx.ends.get(key)
            if not ends:
                continue
            i = bisect.bisect_left(ends, self.cursor[d] - 1)
            end = ends[i] if i < len(ends) else ends[-1]
            cont = self.reference[d][end + 1:end + 1 + self.R]
            if cont:
                out.append((cont, d, end))
            if len(out) >= self.C:
                break
        return out

    def plan(self, context: list[int]) -> Plan:
        if self.cost is not None:
            self.cost.tick()
        self.index.update(context)
        cands: list[list[int]] = []
        key: list[int] = []
        refs: list[tuple[list[int], int, int]] = []
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            k = tuple(context[-n:])
            refs = self._from_references(k) if self.refs else []
            found = self.index.continuations(k, self.K, self.C)
            if found or refs:  # the longest n-gram that occurred earlier (or in a reference) decides
                key = context[-n:]
                cands = [c for c, _, _ in refs] + [list(c) for c, _ in found if list(c) not in [r[0] for r in refs]]
                break
        priced = None
        if self.cost is not None and cands:
            depth, priced = self._priced(cands)
            cands, refs = [c[:depth] for c in cands if depth], refs if depth else []
        sources = ["reference"] * len(refs) + ["text"] * (len(cands) - len(refs))
        # not retrieval.trie: copies are ranked by recency, and each keeps its candidate slot (chosen, cursors)
        parents, roles, slots = [-1], ["x0"], [(0, 0)]
        tokens = [context[-1]] + add_trie(parents, roles, slots, cands)  # shared prefixes verified once
        info = {"key": key, "candidates": cands}
        if priced is not None:
            info["priced"] = round(sum(priced), 4)  # the kept nodes' expected tokens, before calibration
        origins = None
        if self.refs:  # a node first proposed by a reference candidate is a reference copy
            info.update(candidate_sources=sources, reference_at=[[d, e] for _, d, e in refs])
            origins = ["target"] + [("reference" if sources[g] == "reference" else "prompt_lookup")
                                    for g, _ in slots[1:]]
        return Plan(tokens, parents, depths_of(parents), roles, slots, [r == "candidate" for r in roles],
                    origin="prompt_lookup", info=info, origins=origins)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        acc = verdict.tokens
        plan.info["matched"] = [common_prefix(c, acc) for c in plan.info["candidates"]]
        if self.cost is not None:
            drafted, got = max(map(len, plan.info["candidates"]), default=0), len(verdict.path) - 1
            for d in range(1, min(drafted, got + 1) + 1):  # position d is tried when d - 1 was accepted
                self.tried[d] += 1
                self.hit[d] += d <= got
            self.cost.observe(plan.info.get("priced", 0.0), len(verdict.tokens), len(plan.tokens))
        chosen = plan.slots[verdict.path[-1]][0] if len(verdict.path) > 1 else None
        plan.info["chosen"] = chosen
        record_verdict(plan, verdict)  # the tree view's accepted path and first rejected node
        at = plan.info.get("reference_at") or []
        if chosen is not None and chosen < len(at):  # the copy went this far: continue from there
            d, end = at[chosen]
            self.cursor[d] = end + 1 + plan.info["matched"][chosen]


@dataclass
class PromptLookupParams:
    max_ngram: int = knob(3, lo=LIMITS["max_ngram"][0], hi=LIMITS["max_ngram"][1], cli="--max-ngram", ui=True,
                          label="max n-gram to match", help="prompt lookup: longest n-gram matched (default 3)")
    num_tokens: int = knob(10, lo=LIMITS["num_tokens"][0], hi=LIMITS["num_tokens"][1], cli="--num-tokens", ui=True,
                           label="tokens to copy", help="prompt lookup: tokens proposed (default 10)")
    candidates: int = knob(1, lo=LIMITS["candidates"][0], hi=LIMITS["candidates"][1], cli="--candidates",
                           help="prompt lookup: continuations verified per step")
    reference: object = knob(None, cli="--reference", kind="texts",
                             help="prompt lookup: also copy from this UTF-8 text file (repeatable; reference lookup, "
                                  "LLMA; the input of an edit makes it aggressive decoding)")
    reference_ids: object = knob(None, internal=True, help="the references' token ids (run() tokenises reference=)")
    reference_tokens: int = knob(24, lo=LIMITS["reference_tokens"][0], hi=LIMITS["reference_tokens"][1],
                                 cli="--reference-tokens",
                                 help="prompt lookup: tokens copied from a reference per step (default 24)")
    adaptive: bool = adaptive_knob()
    row_ms: str = row_ms_knob()


def prepare(p: dict, model, tokenizer) -> dict:
    """Reference texts (reference=) become the token ids the drafter copies from: only the tokenizer knows
    them."""
    if p.get("reference") is None:
        return p
    from decoding.methods.lookup.reference_text import tokenize_references
    p = dict(p)
    return {**p, "reference_ids": tokenize_references(tokenizer, p.pop("reference"))}


def words(c: dict) -> str:
    line = (f"prompt lookup · n-gram {c.get('min_ngram')}–{c.get('max_ngram')} · copy {c.get('num_tokens')}"
            f" · {c.get('candidates', 1)} candidate(s)")
    if c.get("references"):
        line += f" · {c['references']} reference text(s), copy {c.get('reference_tokens')}"
    return line


SPEC = MethodSpec(
    name="prompt_lookup", drafter=PromptLookup, params=PromptLookupParams, label="prompt lookup", colour="#c51b7d",
    summary="copies what followed the last n-gram earlier in the prompt, the output or a reference text",
    explain=(
    "### Prompt lookup\n"
    "Code and chat often repeat what is already in the text. Prompt lookup finds the last few tokens (up to "
    "**max n-gram**) earlier in the prompt or output and proposes what followed them there (up to **num "
    "tokens**). The model checks the copy in one forward pass and keeps the part that matches its own "
    "choices. No second model, no training — the *pool* view shows the matched key and the candidate copies.\n"
    "\n"
    "**Reference text** (reference lookup, Yang et al. 2023, *Inference with Reference*, LLMA): the same "
    "lookup also searches a text you paste under the prompt — a retrieved document, the file being edited — "
    "and copies up to 24 tokens from it per step (cyan in the text and the pool view). **Aggressive "
    "decoding** (Ge et al., *Lossless Acceleration for Seq2seq Generation with Aggressive Decoding*) is the "
    "special case where the reference is the input of an edit: most of the output *is* the input, so whole "
    "spans are accepted in one step and the model's own token replaces each typo. Try the edit example: 20+ "
    "tokens per step where the input was right."),
    paper="Saxena 2023, Prompt Lookup Decoding; Yang et al. 2023, Inference with Reference (LLMA, arXiv 2304.04487)",
    prepare=prepare,
    presets={"cpu_embedded": {"max_ngram": 3, "num_tokens": 10}, "cpu_default": {"max_ngram": 3, "num_tokens": 10, "adaptive": 1},
             "teaching": {"max_ngram": 3, "num_tokens": 10}},
    pictures=("mask", "pool", "tree"), words=words,
    capabilities=("reference_texts",),
    learns=False,  # its example drafts from the text alone (a reference copy's cursor and --adaptive learn in observe)
    examples=({"num_tokens": 4, "candidates": 2},))
