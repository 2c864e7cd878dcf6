"""Lookahead parallelism (Fu, Bailis, Stoica, Zhang 2024, "Break the Sequential Dependency of LLM Inference
Using Lookahead Decoding", arXiv 2402.02057, section on lookahead parallelism): every process holds the
whole model; one lookahead step's 2D window and its verification branch are split across the processes,
which run their parts in parallel and then exchange only what the next step needs.

The split. In the window each column j is one Jacobi trajectory: L_l[j] hangs under L_{l-1}[j], and level 0
is the chain x0, L0[0], L0[1], ... (decoding/engine/masks.py). Columns are therefore independent once row 0
up to them is known, so rank r gets a contiguous block of columns and runs x0, row 0 up to its last
column, and its columns' upper levels; the candidate n-grams (the verification branch) go round-robin,
candidate g to rank g % P. Row-0 cells left of a rank's block are recomputed there (the trace marks them).

The exchange, on torch.distributed (gloo on CPU, NCCL on GPUs), per step:
  1. all-gather: each rank's new top-row cells (the target's outputs at its columns: the new window row,
     which completes its columns' n-grams, the pool entries) and its verdict (accepted length, candidate);
  2. broadcast from the rank with the longest accepted candidate (lowest rank on ties): the accepted
     tokens, and the K/V rows of its accepted path (x0 included), which every rank writes over its own.
So every rank ends the step with the same tokens, window, pool and KV cache, bit for bit; debug=True
checks it with a hash of all of them per step. Rank 0's prompt KV is broadcast once after the prefill.

Exact: the accepted tokens come from one rank's greedy verification of its own candidates against its
own forward, as in one process (decoding/engine/verify.py); tests/test_distributed.py compares them with
single-process HF greedy.

The loop calls the runner's stop rule and EOS set (engine/runner.py) but not its _decode: the exchange sits
between the forward and the commit, and the runner records its prefill and steps inline, so those stay here.
"""
from __future__ import annotations

import contextlib
import hashlib
import time

import torch
import torch.distributed as dist

from ..engine.core import Core
from ..engine.masks import add_trie, chain_parents
from ..engine.runner import _accept, _eos_set
from ..engine.verify import common_prefix, greedy
from ..methods.lookahead import Lookahead
from ..trace import Step, Trace
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


def local_query(la: Lookahead, x0: int, cands: list[list[int]], cols: list[int], mine: list[int]) -> dict:
    """This rank's part of the step: x0, row 0 up to its last column, its columns' upper levels, its
    candidates as a prefix tree. Returns tokens, parents, depths, the top cell of each of its columns,
    candidate node indices and which candidate (global index) each belongs to."""
    levels = la.levels
    jmax = max(cols) if cols else 0
    tokens = [x0] + levels[0][:jmax]
    parents, depths = chain_parents(len(tokens)), list(range(len(tokens)))
    cell = {(0, j): j for j in range(jmax + 1)}
    for lev in range(1, len(levels)):
        for j in cols:
            p = cell[(lev - 1, j)]
            cell[(lev, j)] = len(tokens)
            tokens.append(levels[lev][j]); parents.append(p); depths.append(depths[p] + 1)
    tops = [cell[(len(levels) - 1, j)] for j in cols]
    roles: list[str] = ["window"] * len(tokens)
    slots: list = [(0, 0)] * len(tokens)
    n_window = len(tokens)
    tokens += add_trie(parents, roles, slots, [list(cands[g]) for g in mine])
    depths += [slots[i][1] + 1 for i in range(n_window, len(tokens))]
    cand_nodes = list(range(n_window, len(tokens)))
    cells = [[lev, j] for (lev, j) in cell]
    return {"tokens": tokens, "parents": parents, "depths": depths, "tops": tops, "cand_nodes": cand_nodes,
            "owner": [mine[slots[i][0]] for i in cand_nodes], "cells": cells,
            "proposal": [i >= n_window for i in range(len(tokens))]}


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
    core.spec_parents, core.spec_depths = [], []


def _kv_shape(core: Core, n: int) -> tuple[int, ...]:
    k = _kv(core)[0].keys
    return (2 * len(_kv(core)), k.shape[1], n, k.shape[-1])


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


def generate_lp(model, prompt_ids: list[int], drafter: Lookahead, *, max_new_tokens: int = 64,
                eos_token_id=None, trace: bool = True, debug: bool = False, step_context=None,
                on_step=None) -> Trace:
    """Decode with lookahead, the step split over the process group's ranks. Every rank returns the same
    tokens; rank 0's Trace carries every rank's columns, candidates, query size and per-step compute and
    communication times (step.info["lp"])."""
    if not isinstance(drafter, Lookahead):
        raise ValueError("lookahead parallelism (--lp) splits lookahead's window: use --method lookahead")
    device = str(model.get_input_embeddings().weight.device)
    rank, world, backend = ensure(device)
    eos = _eos_set(eos_token_id)
    drafter.tracing = trace
    core = Core(model, static=False)
    tr = Trace(method=drafter.name, config={**drafter.config(), "max_new_tokens": max_new_tokens,
                                            "sampling": {"temperature": 0.0}, "static": False},
               prompt_ids=list(prompt_ids))
    columns = split_columns(drafter.W, world)
    t_run = time.perf_counter()
    ctx = step_context or (lambda i, kind: contextlib.nullcontext())

    with ctx(0, "prefill"):
        t0 = time.perf_counter()
        logits = core.prefill(list(prompt_ids))
        core.commit(list(range(len(prompt_ids))))
        first = torch.tensor([int(logits[-1].argmax())], device=core.device)
        t1 = time.perf_counter()
        kv = _gather_rows(core, list(range(len(prompt_ids))))
        dist.broadcast(first, 0)  # rank 0's prefill is everyone's: identical state from the start
        dist.broadcast(kv, 0)
        _write_rows(core, 0, kv)
        t2 = time.perf_counter()
    drafter.start(list(prompt_ids))
    step = Step(0, "prefill", 0, len(prompt_ids), [], [], wall_ms=(t2 - t0) * 1e3)
    if trace:
        step.tokens, step.positions = list(prompt_ids), list(range(len(prompt_ids)))
        step.parents, step.roles = chain_parents(len(prompt_ids)), ["prompt"] * len(prompt_ids)
        step.slots = [[i, 0] for i in range(len(prompt_ids))]
    times = [((t1 - t0) * 1e3, (t2 - t1) * 1e3, len(prompt_ids))]
    out, context = [], list(prompt_ids)
    stop = _accept(out, context, [int(first.item())], step, max_new_tokens, eos)
    tr.steps.append(step)
    if on_step:
        on_step(step, out)

    while not stop:
        index = len(tr.steps)
        with ctx(index, "decode"):
            t0 = time.perf_counter()
            full = drafter.plan(context)  # the one-process plan: same window and candidates on every rank
            x0, cands, past = context[-1], full.info["candidates"], core.length
            mine = [g for g in range(len(cands)) if g % world == rank]
            q = local_query(drafter, x0, cands, columns[rank], mine)
            rows = sorted(set([0] + q["tops"] + q["cand_nodes"]))
            logits = core.forward(q["tokens"], q["parents"], q["depths"], rows)
            preds = logits.argmax(-1).tolist()
            v = greedy(q["tokens"], q["parents"], q["proposal"], preds)
            k = len(v.path) - 1
            g = q["owner"][q["cand_nodes"].index(v.path[-1])] if k else -1
            mail = [k, g] + [-1] * drafter.W
            for j, top in zip(columns[rank], q["tops"]):
                mail[2 + j] = preds[top]
            t1 = time.perf_counter()
            box = [torch.zeros(2 + drafter.W, dtype=torch.long, device=core.device) for _ in range(world)]
            dist.all_gather(box, torch.tensor(mail, dtype=torch.long, device=core.device))
            got = [b.tolist() for b in box]
            winner = max(range(world), key=lambda r: (got[r][0], -r))
            k = got[winner][0]
            row = [got[r][2 + j] for r in range(world) for j in columns[r]]
            acc = torch.tensor(v.tokens if rank == winner else [0] * (k + 1), device=core.device)
            kv = (_gather_rows(core, [past + i for i in v.path]) if rank == winner else
                  torch.empty(_kv_shape(core, k + 1), dtype=core.dtype, device=core.device))
            dist.broadcast(acc, winner)
            dist.broadcast(kv, winner)
            core.commit([0])
            _write_rows(core, past, kv)
            accepted = acc.tolist()
            t2 = time.perf_counter()
            step = Step(index, "decode", past, len(full.tokens), [], [])
            stop = _accept(out, context, accepted, step, max_new_tokens, eos, "candidate")
            harvested = drafter.advance(x0, row, context)
            if trace:
                step.tokens, step.parents, step.roles = full.tokens, full.parents, full.roles
                step.positions = [past + d for d in full.depths]
                step.slots = [list(s) for s in full.slots]
                step.kept = _full_path(full, accepted[:-1])
                step.info = {**full.info, "window_next": [list(lv) for lv in drafter.levels],
                             "harvested": harvested, "matched": [common_prefix(c, accepted) for c in cands],
                             "chosen": got[winner][1] if k else None, "pool_size": drafter.pool.size}
                if drafter.pool.log is not None:
                    step.info["pool_delta"], drafter.pool.log = drafter.pool.log, []
            step.info["lp"] = {"winner": winner, "accepted_by_rank": [r[0] for r in got],
                               "cells": q["cells"], "candidates": mine}
            if debug:
                step.info["lp"]["state_hash"] = _check_same(state_hash(core, drafter, context), index)
            step.wall_ms = (time.perf_counter() - t0) * 1e3
            times.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, len(q["tokens"])))
        tr.steps.append(step)
        if on_step:
            on_step(step, out)

    tr.wall_s = time.perf_counter() - t_run
    tr.output_ids = out
    tr.stop_reason = "eos" if out and out[-1] in eos else "max_new_tokens"
    _collect(tr, times, columns, world, backend, debug)
    return tr


def _collect(tr: Trace, times: list, columns: list, world: int, backend: str, debug: bool) -> None:
    """One gather at the end: every rank's per-step compute / communication times, query sizes and cells
    into rank 0's trace (the others keep their own)."""
    cells = [s.info.get("lp", {}).pop("cells", []) for s in tr.steps]
    everyone = [None] * world
    dist.all_gather_object(everyone, {"times": times, "cells": cells})
    for i, s in enumerate(tr.steps):
        lp = s.info.setdefault("lp", {})
        lp["compute_ms"] = [round(e["times"][i][0], 4) for e in everyone]
        lp["comm_ms"] = [round(e["times"][i][1], 4) for e in everyone]
        lp["query"] = [e["times"][i][2] for e in everyone]
        if s.kind == "decode":
            lp["cells"] = [e["cells"][i] for e in everyone]
    tr.config["distributed"] = {"mode": "lookahead_parallel", "world_size": world, "backend": backend,
                                "columns": columns, "debug_state_hash": debug,
                                "switched_off": {"static_cache": "lookahead parallelism exchanges K/V rows "
                                                 "through the DynamicCache's tensors; the static cache's fused "
                                                 "store and captured graphs are not wired for it"},
                                "comm_source": "time.perf_counter around the step's all-gather and broadcasts, "
                                               "on every rank"}


def _check_same(digest: str, index: int) -> str:
    """All ranks' state hashes must agree: a mismatch is a bug, raised on every rank."""
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, digest)
    if len(set(digests)) != 1:
        raise RuntimeError(f"lookahead parallelism: rank states differ after step {index}: "
                           + ", ".join(f"rank {r} {d[:12]}" for r, d in enumerate(digests)))
    return digest[:16]


def _full_path(full, accepted: list[int]) -> list[int]:
    """The accepted candidate tokens as query indices of the one-process plan (x0 first): the step's kept."""
    path, node = [0], 0
    for t in accepted:
        node = next(i for i in range(len(full.tokens)) if full.parents[i] == node and full.tokens[i] == t
                    and full.roles[i] == "candidate")
        path.append(node)
    return path
