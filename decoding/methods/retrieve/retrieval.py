"""Retrieval drafting: the draft is what followed the context's longest matching suffix elsewhere; no model drafts.

Two sources, one drafter:
- a datastore (REST, He et al., 2023, arXiv 2311.08252): a corpus with a suffix array (datastore.py). REST takes
  up to 5,000 continuations of 10 tokens after the longest matching suffix and verifies the 64 most frequent
  prefixes as a trie.
- no datastore: the suffix cache (SuffixDecoding, Oliaro et al., 2024, arXiv 2411.04975; suffix_cache.py): the
  prompt, the output so far and the earlier runs (of this process: suffix_cache.HISTORY; the app passes each
  session's own History, so one visitor never drafts from another's runs). The tree's node probabilities are the
  continuations' frequencies, nodes below min_token_prob are dropped, and the draft is at most
  max_spec_factor x the match length (a long match is trusted with a long draft, a one-token match gets one).
- both (a datastore with with_cache=True, the default): each step takes the longer of the two matches. Ours,
  not REST's: a datastore cannot know what this very answer repeats, the suffix cache does. The adaptive draft
  length applies to datastore matches too (REST's own settings: budget=64, max_spec_factor=64, with_cache=False).

Both build the same frequency trie (trie() below): a node's count is how many continuations start with its
prefix, so a child never counts more than its parent and the `budget` most frequent nodes form a tree. One
target forward verifies it (the engine's tree attention). Greedy: verify.greedy, so the output is HF greedy's.
Sampling: the proposals are deterministic tokens (Plan.q None), so the engine's verify.sampled keeps the
target's distribution exactly. adaptive=1 (greedy) prices the tree's nodes against the device's row-cost curve
(row_cost.py: a node is verified when its share of the continuations pays for its row at the run's going
rate), on top of the length rule; budget stays the most nodes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
import time
from pathlib import Path

import numpy as np

from decoding.engine.drafter import Abilities, Plan, tree_record
from decoding.engine.verify import Verdict
from decoding.methods.retrieve.datastore import Datastore, DatastoreError, Match
from decoding.methods.tree_verdict import record_verdict
from decoding.methods.row_cost import (RowCost, adaptive_config, adaptive_flag, adaptive_knob, parse_curve,
                                      priced_copies, row_ms_knob)
from decoding.methods.retrieve.suffix_cache import HISTORY, History, lookup as suffix_lookup
from decoding.params import MAX_TREE_NODES
from decoding.methods.spec import MethodSpec, knob

# Defaults per source. REST's paper verifies 64 nodes and has no adaptive length (budget=64, max_spec_factor=64,
# with_cache=False reproduce it); ArcticInference's suffix cache uses max_spec_factor 1.0. On the CPU every
# verified row costs, and on the tuning prompts (bench/prompts/chat + code, never the held-out sets;
# bench/results/retrieval-tuning.md) a draft of at most 2 x the match length, and 16 datastore nodes, kept the
# most tokens per step for the rows spent.
REST = {"budget": 16, "continuations": 5000, "span": 10, "max_suffix": 16, "max_spec_factor": 2.0,
        "min_token_prob": 0.0}
SUFFIX = {"budget": 64, "max_spec_factor": 2.0, "min_token_prob": 0.1, "span": 16, "max_suffix": 32}
_OPEN: dict[tuple, Datastore] = {}  # path, sizes, mtimes -> opened datastore (its CRC check runs once)
# Where a step's draft came from (info.retrieval.drafted_from), in this order.
SOURCES = ("datastore", "prompt", "output", "earlier_run")


def drafted_from(src: str, where: list[tuple[str, int]]) -> list[str]:
    """The step's sources: the datastore, or for the suffix cache the places its continuations were read from
    (this prompt, this run's output so far, an earlier run of the history it was given)."""
    if src == "datastore":
        return ["datastore"]
    seen = {"earlier_run" if str(w).startswith("run ") else str(w) for w, _ in where}
    return [x for x in SOURCES if x in seen]


def open_datastore(path: str | Path, tokenizer=None) -> Datastore:
    """A datastore, opened once per process per file version; the tokenizer check runs every call."""
    from decoding.models import shipped_folder
    p = Path(shipped_folder("datastore", str(path))).expanduser()
    try:
        key = (str(p.resolve()),) + tuple((f.stat().st_size, f.stat().st_mtime_ns) if f.exists() else None
                                          for f in (p / "datastore.json", p / "tokens.bin", p / "sa.bin"))
    except OSError:
        key = None
    ds = _OPEN.get(key) if key else None
    if ds is None:
        ds = Datastore(p)
        if key:
            _OPEN[key] = ds
    if tokenizer is not None:
        from decoding.methods.retrieve.datastore import tokenizer_fingerprint
        ds.check_tokenizer(tokenizer_fingerprint(tokenizer))
    return ds


def trie(conts: np.ndarray, budget: int, min_prob: float = 0.0) -> dict[str, np.ndarray]:
    """The `budget` most frequent prefixes of the continuations ([k, span], -1 = none) as a tree, vectorised.

    Rows are sorted, so every prefix is a run of consecutive rows; for each depth a prefix starts where a row
    differs from the one before in its first d tokens. Returns per node (parents first): depth (1-based), token,
    count, parent (index into the returned nodes, -1 = the root x0), row (one continuation that has it)."""
    k, span = conts.shape
    if k == 0:
        return {"depth": np.zeros(0, int), "token": np.zeros(0, int), "count": np.zeros(0, int),
                "parent": np.zeros(0, int), "row": np.zeros(0, int)}
    order = np.lexsort(conts.T[::-1])
    s = conts[order]
    change = np.zeros(k - 1, dtype=bool)
    depth, token, count, parent, row = [], [], [], [], []
    prev_gid, offset = None, 0
    for d in range(span):
        change |= s[1:, d] != s[:-1, d]
        start = np.concatenate([[True], change])
        gid = np.cumsum(start) - 1
        first = np.flatnonzero(start)
        valid = s[first, d] >= 0
        cnt = np.bincount(gid, minlength=len(first))
        par = np.full(len(first), -1) if prev_gid is None else prev_gid[first]
        depth.append(np.full(len(first), d + 1)); token.append(s[first, d]); count.append(cnt)
        parent.append(par); row.append(order[first])
        # node ids: offset + group; invalid groups (past a continuation's end) are dropped below
        prev_gid, offset = gid + offset, offset + len(first)
        if not valid.any():
            break
    depth, token, count = np.concatenate(depth), np.concatenate(token), np.concatenate(count)
    parent, row = np.concatenate(parent), np.concatenate(row)
    ok = (token >= 0) & (count >= max(1, math.ceil(min_prob * k - 1e-9)))
    ranked = np.lexsort((np.arange(len(count)), depth, -count))  # most frequent first, then shallower
    chosen = ranked[ok[ranked]][:budget]
    chosen = chosen[np.lexsort((chosen, depth[chosen]))]  # parents before children
    new = np.full(len(count), -1)
    new[chosen] = np.arange(len(chosen))
    return {"depth": depth[chosen], "token": token[chosen], "count": count[chosen],
            "parent": np.where(parent[chosen] >= 0, new[np.maximum(parent[chosen], 0)], -1), "row": row[chosen]}


class Retrieval:
    name = "retrieval"
    tracing = True  # set by the runner: the target probabilities of the tree are read only for the trace

    @property
    def abilities(self) -> Abilities:
        """adaptive: bound to the target (bind) to measure what its rows cost."""
        return Abilities(binds_target=self.adaptive, wants_tracing=True)

    @classmethod
    def from_params(cls, **p) -> "Retrieval":
        return cls(**p)

    def __init__(self, datastore: str | Path | Datastore | None = None, tokenizer=None, budget: int | None = None,
                 max_spec_factor: float | None = None, min_token_prob: float | None = None,
                 max_suffix: int | None = None, span: int | None = None, continuations: int = 5000,
                 history: bool | History = True, with_cache: bool = True, model_vocab: int | None = None,
                 adaptive: int = 0, row_ms: str | None = None):
        rest = datastore is not None
        self.adaptive = adaptive_flag(adaptive, "retrieval", "the length rule alone",
                                      "nodes priced by the row-cost curve")
        self.row_ms = parse_curve(row_ms) if row_ms else None
        self.cost: RowCost | None = None
        d = REST if rest else SUFFIX
        self.budget = int(budget if budget is not None else d["budget"])
        self.max_suffix = int(max_suffix if max_suffix is not None else d["max_suffix"])
        self.span = int(span if span is not None else d["span"])
        self.factor = float(max_spec_factor if max_spec_factor is not None else d["max_spec_factor"])
        self.min_prob = float(min_token_prob if min_token_prob is not None else d["min_token_prob"])
        # history: True = the process's (HISTORY), False = none, a History = that one (the app: the session's)
        self.continuations = int(continuations)
        if not isinstance(history, (bool, History)) and history not in (0, 1):
            raise ValueError(f"history is on or off (True or False) or a suffix_cache.History, got {history!r}")
        self.hist: History | None = history if isinstance(history, History) else (HISTORY if history else None)
        self.history = self.hist is not None
        # with a datastore, also the suffix cache (the request's own text and earlier runs): the longer match
        # drafts. Ours, not REST's: a datastore cannot know what this answer repeats (with_cache=False: REST only)
        self.with_cache = bool(with_cache) and rest
        self.cache_min_prob = SUFFIX["min_token_prob"]
        if not (1 <= self.budget <= 256 and 1 <= self.max_suffix <= 64 and 1 <= self.span <= 64
                and 1 <= self.continuations <= 100_000 and 0 <= self.min_prob < 1
                and 0 < self.factor <= 64):
            raise ValueError("retrieval: budget in [1, 256], max_suffix and span in [1, 64], continuations in "
                             "[1, 100000], min_token_prob in [0, 1), max_spec_factor in (0, 64]")
        self.vocab = model_vocab  # the process's history may hold another model's ids: none past it is drafted
        if isinstance(datastore, Datastore):
            self.ds = datastore
        else:
            self.ds = open_datastore(datastore, tokenizer) if rest else None
        if self.ds is not None and model_vocab is not None and (top := self.ds.max_id()) >= model_vocab:
            raise DatastoreError(f"{self.ds.path.name} holds token id {top:,} but the model's embedding has "
                                 f"{model_vocab:,} rows (ids 0 to {model_vocab - 1:,}): it was built for another "
                                 "model's tokenizer")
        self.prompt_len = 0

    def config(self) -> dict:
        c = {"source": ("datastore+suffix_cache" if self.with_cache else "datastore") if self.ds is not None
             else "suffix_cache", "budget": self.budget,
             "max_suffix": self.max_suffix, "span": self.span, "continuations": self.continuations,
             "min_token_prob": self.min_prob, "max_spec_factor": self.factor}
        if self.ds is not None:
            c.update(datastore=self.ds.path.name, datastore_tokens=self.ds.n)
        if self.ds is None or self.with_cache:
            c.update(history=self.history, history_runs=self.hist.count() if self.hist is not None else 0)
        if self.adaptive:
            c.update(adaptive_config(self.cost))
        return c

    def bind(self, model, sampling) -> None:
        """adaptive only: the target's row-cost curve (given, or measured once per model)."""
        self.cost = priced_copies("retrieval", model, sampling, self.row_ms, self.budget + 1)

    def max_depth(self) -> int:
        return max(self.span, SUFFIX["span"] if self.with_cache else 0) + 1

    def start(self, prompt_ids: list[int]) -> None:
        if self.hist is not None:
            self.hist.commit_pending()  # the previous run joins the history (of the process, or the session)
        self.prompt_len = len(prompt_ids)
        if self.cost is not None:
            self.cost.start()

    def _match(self, context: list[int]) -> tuple[str, Match | None, list[tuple[str, int]]]:
        """(source, match, where): the datastore's match, the suffix cache's, or (with_cache) the longer one."""
        if self.ds is not None:
            m = self.ds.lookup(context, self.max_suffix, self.continuations, self.span)
            out = "datastore", m, ([self.ds.where(int(x)) for x in m.starts[:3]] if m is not None else [])
            if not self.with_cache:
                return out
        hist = self.hist
        span = self.span if self.ds is None else SUFFIX["span"]
        mc, where = suffix_lookup(context, hist, self.prompt_len, SUFFIX["max_suffix"] if self.ds is not None
                                  else self.max_suffix, span, self.continuations)
        if self.ds is not None and (mc is None or (out[1] is not None and out[1].length > mc.length)):
            return out
        return "suffix", mc, where

    def plan(self, context: list[int]) -> Plan:
        t0 = time.perf_counter()
        if self.cost is not None:
            self.cost.tick()
        src, m, where = self._match(context)
        if m is not None and self.vocab is not None and (m.conts >= self.vocab).any():  # cut at the first such id
            m = dataclasses.replace(m, conts=np.where(np.cumsum(m.conts >= self.vocab, axis=1) > 0, -1, m.conts))
        budget, min_prob = self.budget, self.min_prob
        if src == "suffix" and self.ds is not None:  # the suffix cache beside a datastore: its own defaults
            min_prob = self.cache_min_prob
        if m is not None:  # SuffixDecoding's adaptive length: the draft grows with the match
            budget = max(1, min(budget, int(self.factor * m.length)))
        t = trie(m.conts, budget, min_prob) if m is not None else trie(np.zeros((0, 1), int), 0)
        if self.cost is not None and len(t["count"]):  # a node's path probability: its continuations' share
            keep = self.cost.keep(sorted((t["count"] / len(m.conts)).tolist(), reverse=True))
            if keep < len(t["count"]):  # the most frequent `keep` prefixes: the same rule, a smaller budget
                t = trie(m.conts, keep, min_prob)
        n = len(t["token"])
        toks = [context[-1]] + t["token"].tolist()
        parents = [-1] + (t["parent"] + 1).tolist()
        depths = [0] + t["depth"].tolist()
        counts = t["count"].tolist()
        total = len(m.conts) if m is not None else 0
        cnt_of = [total] + counts
        prob = [None] + [c / max(1, cnt_of[p]) for c, p in zip(counts, parents[1:])]
        rec = {"source": src, "suffix": list(context[-m.length:]) if m else [], "suffix_len": m.length if m else 0,
               "occurrences": m.count if m else 0, "used": total, "draft_len": budget if m else 0,
               "at": [{"where": str(w)[-200:], "offset": int(o)} for w, o in where[:3]],
               "drafted_from": drafted_from(src, where) if m is not None else []}
        if m is not None and src == "suffix":  # the suffix cache: where each node's first continuation came from
            rec["node_at"] = [str(where[r][0]) for r in t["row"].tolist()]
        info = {"tree": tree_record(toks, parents, depths, ["target"] + [src] * n, prob,
                                    count=[total if m else 0] + counts),
                "retrieval": rec, "drafted": n > 0, "draft_ms": (time.perf_counter() - t0) * 1e3,
                "target_forwards": 1, "mode": "retrieval"}
        return Plan(toks, parents, depths, ["x0"] + ["candidate"] * n, [[i, d] for i, d in enumerate(depths)],
                    [False] + [True] * n, origin=src, info=info)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        record_verdict(plan, verdict, self.tracing)
        plan.info["retrieval"]["accepted"] = len(verdict.path) - 1
        if self.cost is not None:
            counts = plan.info["tree"].get("count") or [0]
            self.cost.observe(sum(counts[1:]) / max(1, counts[0]), len(verdict.tokens), len(plan.tokens))
        if (self.ds is None or self.with_cache) and self.hist is not None:
            self.hist.pending = context  # the engine's list, appended in place: committed at the next start()


@dataclass
class RetrievalParams:
    datastore: object = knob(None, cli="--datastore", kind="folder",
                             help="retrieval: a REST datastore folder (python -m decoding build-datastore; shipped for "
                                  "the default model by name: smollm2); without it retrieval drafts from the "
                                  "suffix cache (SuffixDecoding: prompt, output so far, earlier runs)")
    tokenizer: object = knob(None, shared=True, internal=True, help="the target's tokenizer, checked against the datastore's")
    budget: int = knob(None, shared=True, lo=1, hi=MAX_TREE_NODES, cli="--budget",
                       help="tree nodes verified per step (default 16 with a datastore, 64 from the suffix cache)")
    max_spec_factor: float = knob(None, lo=0.0, hi=1000.0, help="draft at most this many times the match length")
    min_token_prob: float = knob(None, lo=0.0, hi=1.0, help="drop trie nodes rarer than this")
    max_suffix: int = knob(None, lo=1, hi=1024, help="longest suffix matched")
    span: int = knob(None, lo=1, hi=1024, help="tokens of each continuation")
    continuations: int = knob(5000, lo=1, hi=1_000_000, help="continuations read from the datastore per match")
    history: object = knob(True, kind="store",
                           help="the suffix cache's earlier runs: True (this process), False, or a History")
    with_cache: bool = knob(True, help="with a datastore, also match the suffix cache and take the longer match")
    model_vocab: int = knob(None, internal=True, help="the target's vocabulary size, checked against the datastore")
    adaptive: bool = adaptive_knob()
    row_ms: str = row_ms_knob()


def prepare(p: dict, model, tokenizer) -> dict:
    """A datastore made for another tokenizer or vocabulary is refused (the builder hands both in); the model's
    vocabulary size also bounds what the suffix cache drafts (the process's history may hold another model's ids)."""
    vocab = {"model_vocab": model.get_input_embeddings().num_embeddings}
    if p.get("datastore") is None:
        return {**vocab, **p}
    return {"tokenizer": tokenizer, **vocab, **p}


def query_tokens(p: dict) -> int:
    """x0 and the trie's nodes: at most the budget (its default depends on the source: REST or the suffix cache)."""
    budget = p.get("budget") or (REST if p.get("datastore") is not None else SUFFIX)["budget"]
    return budget + 1


SPEC = MethodSpec(
    name="retrieval", drafter=Retrieval, params=RetrievalParams, label="retrieval", colour="#b8860b",
    summary="drafts what followed the context's longest matching suffix in a datastore or the suffix cache",
    explain=(
    "### Retrieval\n"
    "No model drafts: the draft is what followed the context's longest matching suffix somewhere else. With a"
    " **datastore** (REST, He et al. 2023) that is a corpus indexed by a suffix array: the continuations "
    "after the match are merged into a frequency trie and the most frequent nodes (the **budget**) are "
    "verified in one forward. Without one, the **suffix cache** (SuffixDecoding, Oliaro et al. 2024) matches "
    "the prompt, the output so far and your earlier runs, and drafts longer when the match is longer. The "
    "*retrieval* view shows the match, the trie and what was kept; greedy output equals the target's own."),
    paper="He et al. 2023, REST (arXiv 2311.08252); Oliaro et al. 2024, SuffixDecoding (arXiv 2411.04975)",
    prepare=prepare, presets={"cpu_embedded": {}},
    pictures=("mask", "tree", "retrieval"),
    learns=False,  # drafts from the context or a datastore; observe() hands the run to later runs' history
    query_tokens=query_tokens, capabilities=("datastore", "session_history"),
    examples=({},))
