"""The loop shared by every method: plan → one target forward → verify → commit → observe → record.

The KV cache holds the accepted text except the last token x0, which is the root of the next step's tree.
"""
from __future__ import annotations

import contextlib
import time
import weakref
from typing import Callable, ContextManager, Iterable

import numpy as np
import torch
from transformers import PreTrainedModel

from ..fast import cache_pool

from . import verify
from .core import Core, attention_backends, core_options
from .drafter import Drafter, Greedy, Plan
from .masks import chain_parents
from .sampling import Sampling, make_generator, sample, warp
from ..fast.graphs import capture_summary
from ..fast.static_cache import GRAPH_MAX
from ..trace import Step, Trace

StepContext = Callable[[int, str], ContextManager]
STATIC_DEFAULT = {"cuda": True, "cpu": False}  # device type -> static path by default (measured: default_static)


def generate(model: PreTrainedModel, prompt_ids: list[int], drafter: Drafter | None = None, *,
             max_new_tokens: int = 64, eos_token_id: int | Iterable[int] | None = None,
             sampling: Sampling = Sampling(), trace: bool = True,
             step_context: StepContext | None = None,
             on_step: Callable[[Step, list[int]], None] | None = None, static: bool | None = None,
             make_core: Callable[[PreTrainedModel], Core] = Core) -> Trace:
    """Decode up to max_new_tokens new tokens (fewer only at EOS) with `drafter` (greedy if None).

    step_context(index, kind) wraps each step (the profiler puts a record_function range there);
    on_step(step, output_so_far) is called after each step (the app streams from it);
    static: the static-shape path (static_cache.py) for the target and any draft Core; None = the
    device default (default_static).
    make_core: what runs the target's prefill, forward and commit (the loop's one seam to the model):
    Core, or an object with Core's length / prefill / forward / commit, such as lookahead parallelism's
    LPCore (decoding/parallel/lookahead_parallel.py), whose forward and commit exchange with other ranks."""
    drafter = drafter or Greedy()
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    if max_new_tokens <= 0:
        raise ValueError("max_new_tokens must be positive")
    eos = _eos_set(eos_token_id)
    ctx_mgr = step_context or (lambda i, kind: contextlib.nullcontext())
    gen = None if sampling.greedy else make_generator(sampling)
    ab = drafter.abilities  # what the drafter needs, as data (engine/drafter contract)
    if ab.wants_tracing:  # trace-only quantities (host transfers) only when tracing
        drafter.tracing = trace
    if ab.binds_target:  # it needs the target (a draft checked against it, the vocabulary, row costs) and sampling
        drafter.bind(model, sampling)
    static = default_static(model) if static is None else bool(static)
    # room for the whole run plus one bucket, so the static cache never regrows (and keeps its graphs)
    caches: list = []  # (role, StaticKV) of this run's static Cores: their capture status goes in the trace
    with core_options(static=static, capacity=len(prompt_ids) + max_new_tokens + GRAPH_MAX, caches=caches):
        core = make_core(model)
        tr = Trace(method=drafter.name, config={**drafter.config(), "max_new_tokens": max_new_tokens,
                                                "sampling": sampling.to_dict(), "static": static},
                   prompt_ids=list(prompt_ids))
        try:
            _decode(core, drafter, tr, prompt_ids, max_new_tokens, eos, sampling, gen, trace, ctx_mgr, on_step)
        finally:  # also for a run stopped mid-way (the app's Stop raises from on_step)
            tr.config["graphs"] = capture_summary(caches) if static else None
    return tr


def default_static(model: PreTrainedModel) -> bool:
    """The static path by default where it pays: on CUDA (graph replay removes the host overhead that
    dominates a step); off on CPU, where bench/results/cpu-static.md measured it no faster (greedy
    1.02x, lookahead 0.91x when eager steps were padded to buckets; 1.00x / 1.02x without the padding)."""
    if len(set((getattr(model, "hf_device_map", None) or {}).values())) > 1:
        return False  # sharded over devices (load's device_map="auto"): one graph cannot span them
    return STATIC_DEFAULT.get(model.get_input_embeddings().weight.device.type, False)


def _decode(core: Core, drafter: Drafter, tr: Trace, prompt_ids: list[int], max_new_tokens: int, eos: set[int],
            sampling: Sampling, gen, trace: bool, ctx_mgr, on_step) -> None:
    out: list[int] = []
    context = list(prompt_ids)
    t_run = time.perf_counter()
    ups = getattr(core, "uploads", None)  # the target's pinned, non-blocking uploads (sampled verification)
    upload = None if ups is None else ups.upload

    with ctx_mgr(0, "prefill"):
        t0 = time.perf_counter()
        layers = drafter.abilities.hidden_layers  # heads read the prompt's features too
        if not layers:
            logits = core.prefill(context)
        else:
            logits, feats = core.prefill(context, list(range(len(context))), layers)
        core.commit(list(range(len(context))))
        first = int(logits[-1].argmax()) if gen is None else sample(warp(logits[-1], sampling), gen)
        drafter.start(list(prompt_ids))
        if layers:
            drafter.prefill_features(feats)
        if drafter.abilities.prefill_logits:
            drafter.prefill_logits(logits)
        step = Step(0, "prefill", 0, len(context), [], [])
        if trace:
            step.tokens, step.positions = list(context), list(range(len(context)))
            step.parents, step.roles = chain_parents(len(context)), ["prompt"] * len(context)
            step.slots = [[i, 0] for i in range(len(context))]
        step.wall_ms = (time.perf_counter() - t0) * 1e3
    stop = _accept(out, context, [first], step, max_new_tokens, eos)
    tr.steps.append(step)
    if on_step:
        on_step(step, out)

    depth = drafter.max_depth()  # what the caller sized the model's positions by (decoding.run's window check)
    while not stop:
        index = len(tr.steps)
        with ctx_mgr(index, "decode"):
            t0 = time.perf_counter()
            plan = drafter.plan(context)
            if max(plan.depths) >= depth and max(plan.depths) >= drafter.max_depth():  # (asked again: it may grow)
                raise RuntimeError(too_deep(drafter, plan, drafter.max_depth()))
            kv_len = core.length
            hidden = None
            if plan.hidden_rows is None:
                logits = core.forward(plan.tokens, plan.parents, plan.depths, plan.rows)
            else:  # the same forward hands back the features the drafter asked for (observe reads them)
                logits, hidden = core.forward(plan.tokens, plan.parents, plan.depths, plan.rows,
                                              plan.hidden_rows, drafter.abilities.hidden_layers)
            if gen is None:
                preds = logits.argmax(-1).tolist()  # the one host sync of the step
                v = verify.greedy(plan.tokens, plan.parents, plan.proposal, preds)
            elif plan.q is not None or drafter.abilities.acceptance != "typical":
                # exact: speculative sampling with the draft's q (drafts sampled from a draft model), else the
                # point-mass rule; walked on the device, read once with the argmax (the step's one sync)
                preds, v = verify.walk(plan.tokens, plan.parents, plan.proposal, logits, plan.q, sampling, gen,
                                       upload)
            else:  # typical acceptance: opted in, labelled not exact (trace config)
                preds = logits.argmax(-1).tolist()
                v = verify.typical(plan.tokens, plan.parents, plan.proposal, logits, sampling, gen)
            core.commit(v.path)
            step = Step(index, "decode", kv_len, len(plan.tokens), [], [])
            origin = plan.origin if plan.origins is None else [plan.origins[i] for i in v.path[1:]]
            stop = _accept(out, context, v.tokens, step, max_new_tokens, eos, origin)
            v.logits, v.hidden = logits, hidden  # the target's answer, for the drafter to learn from
            drafter.observe(plan, preds, v, context)
            if trace:
                step.tokens, step.parents, step.roles = plan.tokens, plan.parents, plan.roles
                step.positions = [kv_len + d for d in plan.depths]
                step.slots = [list(s) for s in plan.slots]
                step.kept, step.info = v.path, _tree_info(plan.info)
            step.wall_ms = (time.perf_counter() - t0) * 1e3
        tr.steps.append(step)
        if on_step:
            on_step(step, out)

    tr.wall_s = time.perf_counter() - t_run
    tr.output_ids = out
    tr.stop_reason = "eos" if out and out[-1] in eos else "max_new_tokens"


def too_deep(drafter: Drafter, plan: Plan, depth: int) -> str:
    """The one sentence for a plan deeper than the drafter's max_depth(): the run's positions (and a draft
    model's window) were checked against max_depth(), so a deeper node could run past them unnoticed."""
    return (f"{drafter.name} planned a node {max(plan.depths)} tokens past x0, too deep for its max_depth() of "
            f"{depth}: max_depth() counts the deepest node plus the target's next token, and the run's positions "
            "are checked against it")


def _accept(out: list[int], context: list[int], tokens: list[int], step: Step, limit: int,
            eos: set[int], origin: str | list[str] = "target") -> bool:
    """Append accepted tokens up to the limit or the first EOS; True when decoding must stop."""
    for k, t in enumerate(tokens):
        out.append(t)
        context.append(t)
        step.accepted.append(t)
        step.origins.append("target" if k == len(tokens) - 1 else origin if isinstance(origin, str) else origin[k])
        if t in eos or len(out) >= limit:
            return True
    return False


def _tree_info(info: dict) -> dict:
    """A drafted tree's left-out candidates belong in its tree record (info["tree"]["pruned"], drawn by
    the tree view); empty lists when nothing was pruned or the step drafted nothing."""
    if "tree" in info:
        info["tree"]["pruned"] = info.pop("pruned", None) or {"parents": [], "tokens": [], "draft_prob": []}
    return info


def _eos_set(eos_token_id: int | Iterable[int] | None) -> set[int]:
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {eos_token_id}
    return {int(t) for t in eos_token_id}


def precapture(model, capacity: int = 1024, max_bucket: int = GRAPH_MAX) -> dict | None:
    """Capture the common buckets at model load (every (Qb, Rb) up to max_bucket) into a pooled cache of
    `capacity`, so a visitor's first run does not pay capture. CUDA and the static default only (the
    app calls it for every model it loads); returns the cache's status, None where nothing was done."""
    from ..fast.graphs import emulating

    device = model.get_input_embeddings().weight.device
    if not emulating() and (device.type != "cuda" or not default_static(model)):
        return None  # CPU CI exercises it through the emulated graphs (DECODESCOPE_EMULATE_GRAPHS=1)
    kv = cache_pool.acquire(model, capacity)
    try:
        with torch.inference_mode(), attention_backends(device):
            qb = 1
            while qb <= min(max_bucket, GRAPH_MAX):
                vis = np.tril(np.ones((qb, qb), dtype=bool))
                rb = 1
                while rb <= qb:
                    kv.step([0] * qb, list(range(qb)), vis, 0, 0, None if rb == qb else rb)
                    rb *= 2
                qb *= 2
        status = kv.status()
    finally:
        cache_pool.release(weakref.ref(model), kv)
    return status
