"""Lookahead parallelism (Fu, Bailis, Stoica, Zhang 2024, "Break the Sequential Dependency of LLM Inference
Using Lookahead Decoding", arXiv 2402.02057, section on lookahead parallelism): every process holds the
whole model; one lookahead step's 2D window and its verification branch are split across the processes,
which run their parts in parallel and then exchange only what the next step needs.

The split. In the window each column j is one Jacobi trajectory: L_l[j] hangs under L_{l-1}[j], and level 0
is the chain x0, L0[0], L0[1], ... (decoding/engine/masks.py). Columns are therefore independent once row 0
up to them is known, so rank r gets a contiguous block of columns and runs x0, row 0 up to its last
column, and its columns' upper levels; the candidate n-grams (the verification branch) go round-robin,
candidate g to rank g % P. Row-0 cells left of a rank's block are recomputed there (the trace marks them).

No loop of its own: the engine's loop (engine/runner.py: plan -> forward -> verify -> commit -> observe)
drives a drafter/core pair, and the ranks meet only behind the core's seam:
  - LPDrafter wraps Lookahead. Its plan is the one-process plan (the same window and candidates on every
    rank), and it stages every rank's share of that plan (Share) for the core.
  - LPCore is the target the runner calls. forward() runs this rank's share on its own Core, then
    all-gathers every rank's greedy predictions at the plan's read rows (x0, the window's top row, the
    candidates); each node's prediction comes from one rank (the column's owner, the lowest rank holding a
    candidate node), so every rank hands the runner the same answer for the whole plan, and the runner
    verifies and advances the window exactly as in one process. commit(keep) broadcasts the K/V rows of
    the kept path (x0 included) from the lowest rank that computed all of it (the winner), and every rank
    writes them over its own.
So every rank ends the step with the same tokens, window, pool and KV cache, bit for bit; debug=True
checks it with a hash of all of them per step. Rank 0's prompt KV is broadcast the same way after the
prefill (every rank computes the prompt; rank 0's rows win).

Exact: the accepted tokens are the runner's greedy verification of the one-process plan against the
target's own predictions (decoding/engine/verify.py); tests/test_distributed.py compares them with
single-process HF greedy.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from transformers import PreTrainedModel

from ..engine.core import Core
from ..engine.drafter import Plan
from ..engine.masks import add_chains, add_trie, chain_parents
from ..engine.runner import generate
from ..engine.verify import Verdict, greedy
from decoding.methods.windows.lookahead import Lookahead
from ..trace import Trace
from .group import ensure


def split_columns(window: int, world: int) -> list[list[int]]:
    """Contiguous column blocks, sizes differing by at most one; rank 0 gets the leftmost (the shortest
    row-0 prefix), ranks beyond the window get none."""
    base, extra = divmod(window, world)
    out, start = [], 0
    for r in range(world):
        n = base + (1 if r < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


@dataclass
class Share:
    """One rank's part of a step: its query (x0, row 0 up to its last column, its columns' upper levels, its
    candidates), the plan node each of its nodes is (`full`), the rows whose logits it reads, the top
    cell of each of its columns, the window cells [level, column] it computes and its candidates."""
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    rows: list[int]
    full: list[int]
    tops: list[int]
    cells: list[list[int]]
    candidates: list[int]


def local_query(plan: Plan, window: int, levels: list[list[int]], cols: list[int], mine: list[int],
                dedupe: bool = True) -> Share:
    """This rank's share of the one-process lookahead plan `plan` (window W, the window's `levels`): its
    columns `cols` and candidates `mine` (global indices), laid out as the plan lays them out (a prefix
    tree when dedupe, else one chain per candidate), so that each node maps to one plan node."""
    jmax = max(cols) if cols else 0
    tokens = [plan.tokens[0]] + levels[0][:jmax]
    parents, depths = chain_parents(len(tokens)), list(range(len(tokens)))
    cell = {(0, j): j for j in range(jmax + 1)}
    for lev in range(1, len(levels)):
        for j in cols:
            p = cell[(lev - 1, j)]
            cell[(lev, j)] = len(tokens)
            tokens.append(levels[lev][j]); parents.append(p); depths.append(depths[p] + 1)
    full = [0] * len(tokens)
    for (lev, j), i in cell.items():
        full[i] = window * lev + j  # the plan's window order: row 0 = [x0, L0], then W per level
    tops = [cell[(len(levels) - 1, j)] for j in cols]
    roles: list[str] = ["window"] * len(tokens)
    slots: list = [(0, 0)] * len(tokens)
    n_window = len(tokens)
    cands = plan.info["candidates"]
    if dedupe:
        tokens += add_trie(parents, roles, slots, [list(cands[g]) for g in mine])
    else:
        add_chains(parents, roles, slots, [len(cands[g]) for g in mine])
        tokens += [t for g in mine for t in cands[g]]
    depths += [slots[i][1] + 1 for i in range(n_window, len(tokens))]
    where = candidate_nodes(plan)
    full += [where[(mine[slots[i][0]], slots[i][1])] for i in range(n_window, len(tokens))]
    cand_nodes = list(range(n_window, len(tokens)))
    return Share(tokens, parents, depths, sorted(set([0] + tops + cand_nodes)), full, tops,
                 [[lev, j] for (lev, j) in cell], list(mine))


def candidate_nodes(plan: Plan) -> dict[tuple[int, int], int]:
    """(candidate, offset) -> the plan node that token of the candidate is: the shared node of a prefix
    tree, the candidate's own node in a chain (several chains may start with the same token)."""
    kids: dict[tuple[int, int], list[int]] = {}
    for i, role in enumerate(plan.roles):
        if role == "candidate":
            kids.setdefault((plan.parents[i], plan.tokens[i]), []).append(i)
    out = {}
    for g, cand in enumerate(plan.info["candidates"]):
        node = 0
        for off, t in enumerate(cand):
            options = kids[(node, t)]
            node = next((i for i in options if plan.slots[i][0] == g), options[0])
            out[(g, off)] = node
    return out


@dataclass
class Split:
    """What the pair shares: the process group, the column blocks, every rank's share of the step being
    run (staged by LPDrafter.plan, run by LPCore.forward) and the rank whose prediction counts at each plan
    node (`owner`: a window cell's column owner, x0 being column 0; a candidate node's lowest holder), the
    last commit's source rank, and per step this rank's communication ms and query size (gathered into
    rank 0's trace at the end)."""
    rank: int
    world: int
    backend: str
    columns: list[list[int]]
    debug: bool = False
    shares: list[Share] | None = None
    owner: list[int] = field(default_factory=list)
    plan_tokens: list[int] | None = None
    winner: int = 0
    comm_ms: list[float] = field(default_factory=list)
    query: list[int] = field(default_factory=list)

    def stage(self, plan: Plan, la: Lookahead) -> None:
        """Every rank's share of `plan` (each rank works all of them out: the split is deterministic)."""
        cands = plan.info["candidates"]
        self.shares = [local_query(plan, la.W, la.levels, self.columns[r],
                                   [g for g in range(len(cands)) if g % self.world == r], la.dedupe)
                       for r in range(self.world)]
        col_owner = {j: r for r, cols in enumerate(self.columns) for j in cols}
        n_window = la.W * len(la.levels)
        self.owner = [col_owner[f % la.W] if f < n_window else -1 for f in range(len(plan.tokens))]
        for r in reversed(range(self.world)):  # a candidate node: the lowest rank that computed it
            for f in self.shares[r].full:
                if f >= n_window:
                    self.owner[f] = r
        self.plan_tokens = list(plan.tokens)


def _kv(core: Core) -> list:
    """The DynamicCache's layers (keys and values [1, kv_heads, seq, head_dim])."""
    return [layer for layer in core.cache.layers if layer.is_initialized]


def _gather_rows(core: Core, rows: list[int]) -> torch.Tensor:
    """K and V of the given absolute cache rows, all layers: [2 * layers, kv_heads, len(rows), head_dim]."""
    idx = torch.tensor(rows, device=core.device)
    return torch.stack([t[0].index_select(-2, idx) for layer in _kv(core) for t in (layer.keys, layer.values)])


def _write_rows(core: Core, start: int, kv: torch.Tensor) -> None:
    """Make rows start.. of every layer equal `kv` (the winner's), dropping anything above them."""
    for i, layer in enumerate(_kv(core)):
        layer.keys = torch.cat([layer.keys[..., :start, :], kv[2 * i][None].to(layer.keys.dtype)], dim=-2)
        layer.values = torch.cat([layer.values[..., :start, :], kv[2 * i + 1][None].to(layer.values.dtype)], dim=-2)
    core.length = start + kv.shape[-2]


def _kv_shape(core: Core, n: int) -> tuple[int, ...]:
    k = _kv(core)[0].keys
    return (2 * len(_kv(core)), k.shape[1], n, k.shape[-1])


class LPCore:
    """The target as the runner sees it (Core's length / prefill / forward / commit) for one rank of
    lookahead parallelism: its forward runs this rank's share and all-gathers the predictions, its commit
    broadcasts the kept K/V rows. It hands back scores whose argmax is the target's greedy token at each
    plan node (one-hot rows: lookahead parallelism is greedy, and only token ids cross between ranks)."""

    def __init__(self, model: PreTrainedModel, split: Split):
        self.core = Core(model, static=False, fused=False)  # K/V rows are exchanged through the DynamicCache's tensors
        self.split = split
        self.device = self.core.device
        self._held: list[dict[int, int]] = []  # per rank: plan node -> its query index, for the last forward
        self._past = 0

    @property
    def length(self) -> int:
        return self.core.length

    @torch.inference_mode()
    def prefill(self, tokens: list[int], hidden: list[int] | None = None, layers: tuple[int, ...] = (-1,)):
        """Every rank runs the prompt; rank 0's last row (the next token's logits, the one row the runner
        reads after a prefill) and, at commit, its K/V rows are everyone's."""
        if hidden is not None:
            raise ValueError("lookahead parallelism reads no hidden states")
        self._past = self.core.length
        logits = self.core.prefill(tokens)
        t0 = time.perf_counter()
        last = logits[-1].contiguous()
        dist.broadcast(last, 0)
        logits[-1] = last
        self._held = [{i: i for i in range(len(tokens))}] * self.split.world
        self.split.comm_ms.append((time.perf_counter() - t0) * 1e3)
        self.split.query.append(len(tokens))
        return logits

    @torch.inference_mode()
    def forward(self, tokens: list[int], parents: list[int], depths: list[int] | None = None,
                rows: list[int] | None = None, hidden: list[int] | None = None, layers: tuple[int, ...] = (-1,)):
        """The staged plan (`tokens`) split over the ranks: run this rank's share, then all-gather every
        rank's predictions at the plan's read rows; each row takes the one of the rank that owns it."""
        sp = self.split
        if sp.shares is None or sp.plan_tokens != list(tokens):
            raise RuntimeError("LPCore runs the plan LPDrafter staged: plan with LPDrafter before each forward")
        if hidden is not None:
            raise ValueError("lookahead parallelism reads no hidden states")
        self._past = self.core.length
        mine = sp.shares[sp.rank]
        logits = self.core.forward(mine.tokens, mine.parents, mine.depths, mine.rows)
        read = list(range(len(tokens))) if rows is None else list(rows)
        col = {node: k for k, node in enumerate(read)}
        send = torch.full((len(read),), -1, dtype=torch.long, device=self.device)
        local = [i for i in mine.rows if mine.full[i] in col]
        if local:
            send[[col[mine.full[i]] for i in local]] = logits[local].argmax(-1)
        t0 = time.perf_counter()
        box = [torch.empty_like(send) for _ in range(sp.world)]
        dist.all_gather(box, send)
        sp.comm_ms.append((time.perf_counter() - t0) * 1e3)
        sp.query.append(len(mine.tokens))
        got = torch.stack(box)  # [world, read rows]
        preds = torch.zeros(len(tokens), dtype=torch.long, device=self.device)  # unread rows: zero logits' argmax
        preds[read] = got[[sp.owner[n] for n in read], list(range(len(read)))]
        self._held = [{s.full[i]: i for i in range(len(s.tokens))} for s in sp.shares]
        sp.shares = sp.plan_tokens = None
        return self._scores(preds, logits.shape[-1])

    def _scores(self, preds: torch.Tensor, vocab: int) -> torch.Tensor:
        """One-hot rows [q, vocab]: what the runner reads of a forward is its argmax."""
        return torch.zeros((len(preds), vocab), dtype=torch.float32, device=self.device).scatter_(
            1, preds[:, None], 1.0)

    def commit(self, keep: list[int]) -> None:
        """Keep plan nodes `keep` (a root-first path): the lowest rank that computed all of them (the
        winner) broadcasts their K/V rows, and every rank writes them over its own."""
        sp, past = self.split, self._past
        winner = next(r for r, held in enumerate(self._held) if all(k in held for k in keep))
        t0 = time.perf_counter()
        if sp.rank == winner:
            kv = _gather_rows(self.core, [past + self._held[winner][k] for k in keep])
        else:
            kv = torch.empty(_kv_shape(self.core, len(keep)), dtype=self.core.dtype, device=self.device)
        dist.broadcast(kv, winner)
        self.core.commit([0])
        _write_rows(self.core, past, kv)
        sp.comm_ms[-1] += (time.perf_counter() - t0) * 1e3
        sp.winner, self._held = winner, []


class LPDrafter:
    """Lookahead as every rank plans it: the one-process plan, staged for LPCore; observe records the
    step's split (step.info["lp"]: winner, each rank's accepted length, this rank's cells and candidates,
    and with debug the state hash every rank agreed on)."""
    name = Lookahead.name

    def __init__(self, la: Lookahead, split: Split, core: LPCore | None = None):
        self.la, self.split, self.core = la, split, core
        self.abilities = la.abilities

    @property
    def tracing(self) -> bool:
        return self.la.tracing

    @tracing.setter
    def tracing(self, on: bool) -> None:
        self.la.tracing = on

    def config(self) -> dict:
        return self.la.config()

    def max_depth(self) -> int:
        return self.la.max_depth()

    def start(self, prompt_ids: list[int]) -> None:
        self.la.start(prompt_ids)

    def plan(self, context: list[int]) -> Plan:
        plan = self.la.plan(context)
        self.split.stage(plan, self.la)
        self._mine = self.split.shares[self.split.rank]
        self._held = [set(s.full) for s in self.split.shares]
        return plan

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        self.la.observe(plan, preds, verdict, context)
        by_rank = [len(greedy(plan.tokens, plan.parents, [p and i in held for i, p in enumerate(plan.proposal)],
                              preds).path) - 1 for held in self._held]
        lp = {"winner": self.split.winner, "accepted_by_rank": by_rank, "cells": self._mine.cells,
              "candidates": self._mine.candidates}
        if self.split.debug:
            lp["state_hash"] = _check_same(state_hash(self.core.core, self.la, context), len(self.split.query) - 1)
        plan.info["lp"] = lp


def state_hash(core: Core, la: Lookahead, context: list[int]) -> str:
    """sha256 of what must be identical on every rank: the KV cache up to its length, the window, the pool
    and the text. Debug mode only: it copies the whole cache to the host."""
    h = hashlib.sha256()
    for layer in _kv(core):
        for t in (layer.keys, layer.values):
            h.update(t[..., :core.length, :].detach().float().cpu().contiguous().numpy().tobytes())
    h.update(repr((la.levels, context, sorted((k, sorted(v["text"]), sorted(v["window"]))
                                            for k, v in la.pool.contents().items()))).encode())
    return h.hexdigest()


def generate_lp(model, prompt_ids: list[int], drafter: Lookahead, *, debug: bool = False, **kw) -> Trace:
    """Decode with lookahead, the step split over the process group's ranks: the runner's loop with the
    LPDrafter / LPCore pair (kw: generate's max_new_tokens, eos_token_id, trace, step_context, on_step).
    Every rank returns the same tokens; rank 0's Trace carries every rank's columns, candidates, query
    size and per-step compute and communication times (step.info["lp"])."""
    if not isinstance(drafter, Lookahead):
        raise ValueError("lookahead parallelism (--lp) splits lookahead's window: use --method lookahead")
    device = str(model.get_input_embeddings().weight.device)
    rank, world, backend = ensure(device)
    split = Split(rank, world, backend, split_columns(drafter.W, world), debug)
    pair = LPDrafter(drafter, split)

    def make_core(m: PreTrainedModel) -> LPCore:
        pair.core = LPCore(m, split)
        return pair.core

    tr = generate(model, prompt_ids, pair, static=False, make_core=make_core, **kw)
    _collect(tr, split)
    return tr


def _collect(tr: Trace, split: Split) -> None:
    """One gather at the end: every rank's per-step compute (the step's wall time less its communication)
    and communication times, query sizes and cells into rank 0's trace (the others keep their own)."""
    mine = {"comm": split.comm_ms, "query": split.query,
            "wall": [s.wall_ms for s in tr.steps], "cells": [s.info.get("lp", {}).pop("cells", []) for s in tr.steps]}
    everyone = [None] * split.world
    dist.all_gather_object(everyone, mine)
    for i, s in enumerate(tr.steps):
        lp = s.info.setdefault("lp", {})
        lp["compute_ms"] = [round(max(e["wall"][i] - e["comm"][i], 0.0), 4) for e in everyone]
        lp["comm_ms"] = [round(e["comm"][i], 4) for e in everyone]
        lp["query"] = [e["query"][i] for e in everyone]
        if s.kind == "decode":
            lp["cells"] = [e["cells"][i] for e in everyone]
    tr.config["distributed"] = {"mode": "lookahead_parallel", "world_size": split.world, "backend": split.backend,
                                "columns": split.columns, "debug_state_hash": split.debug,
                                "switched_off": {"static_cache": "lookahead parallelism exchanges K/V rows "
                                                 "through the DynamicCache's tensors; the static cache's fused "
                                                 "store and captured graphs are not wired for it"},
                                "comm_source": "time.perf_counter around the step's all-gather and broadcast, "
                                               "on every rank"}


def _check_same(digest: str, index: int) -> str:
    """All ranks' state hashes must agree: a mismatch is a bug, raised on every rank."""
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, digest)
    if len(set(digests)) != 1:
        raise RuntimeError(f"lookahead parallelism: rank states differ after step {index}: "
                           + ", ".join(f"rank {r} {d[:12]}" for r, d in enumerate(digests)))
    return digest[:16]
