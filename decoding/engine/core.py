"""The one place that runs a model: packed new tokens + position ids + 4D float mask against a KV cache.

Every method (greedy, lookahead, prompt lookup, speculative target and draft) runs a tree of new tokens
and then keeps the nodes whose keys/values belong to the accepted text. Above the accepted prefix
(`length` tokens) the cache holds a *region* of uncommitted nodes: the last forward's, or, for a draft
model, several forwards' worth of tree nodes (draft_core.DraftCore). A node attends to the prefix, its
region ancestors and itself, at position length + depth. `commit(keep)` moves the kept region nodes down
onto the prefix and drops the rest: the one KV-compaction routine, for target and draft alike.

Two caches behind the same API: transformers' DynamicCache (grows by concatenation), or the static path
(decoding/fast/static_cache.py: preallocated, bucketed, CUDA-graph replay on GPUs).
"""
from __future__ import annotations

import contextlib
import contextvars
import weakref

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel

from .masks import chain_parents, step_mask, tree_visibility
from ..fast.cache_pool import acquire, release
from ..models import cache_kwarg, check_architecture, sliding_window
from ..fast.uploads import Uploads
from ..fast.static_cache import StaticKV
from ..fast.cpu_step import CpuKV, cpu_kv

# Defaults for Cores built while runner.generate runs, so that a drafter's own Core (the speculative
# draft) follows the run's static setting without the drafter knowing about it.
_OPTIONS: contextvars.ContextVar[dict] = contextvars.ContextVar("decodescope_core", default={})


@contextlib.contextmanager
def core_options(**options):
    """Within the block, Core(model) takes these defaults (static: bool, capacity: int; fused: bool, the one-call
    CPU step where the model allows it (fast/cpu_step.py; default on); compiled: bool,
    torch.compile of the static buckets, an experiment measured by bench/kernels/bench_static.py; graphs: bool,
    CUDA graphs on/off for new static caches (None = on CUDA); fixed: the graph path's data path run
    eagerly (CPU tests); caches: a list every static Core of the
    block appends (role, cache) to, so the runner can report capture status)."""
    token = _OPTIONS.set({**_OPTIONS.get(), **options})
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def attention_backends(device: torch.device) -> contextlib.AbstractContextManager:
    """SDPA kernels for decoding, chosen on purpose. On CUDA: no cuDNN attention, which builds an
    execution plan per new (query, cache) shape (a decoder meets a new shape every step: 28 instead of
    7 ms per greedy step on the first run, docs/engineering-notes.md, "GPU facts"); memory-efficient attention takes
    the additive tree mask, math is the fallback. CPU kernels are left as they are."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])


def _kv_tensors(cache) -> list[torch.Tensor]:
    """Every tensor of a cache with the sequence axis at -2: one for the static cache's fused store,
    keys and values per layer for a DynamicCache."""
    if isinstance(cache, (StaticKV, CpuKV)):
        return cache.tensors()
    return [t for layer in cache.layers if layer.is_initialized for t in (layer.keys, layer.values)]


class Core:
    """A model plus its KV cache; `length` is the number of cached (accepted) tokens."""
    role = "target"

    def __init__(self, model: PreTrainedModel, static: bool | None = None, capacity: int | None = None,
                 fused: bool | None = None):
        check_architecture(model.config)  # model objects given directly (target or draft) skip load()'s check
        opts = _OPTIONS.get()
        self.model = model
        self.device = model.get_input_embeddings().weight.device
        self.dtype = model.get_input_embeddings().weight.dtype
        self.static = bool(opts.get("static", False) if static is None else static)
        cap = capacity if capacity is not None else opts.get("capacity", 512)
        if self.static:  # a pooled cache (and its captured graphs) goes back to the model when this Core dies
            self.cache = acquire(model, cap, compiled=opts.get("compiled", False), graphs=opts.get("graphs"),
                                 fixed=opts.get("fixed", False))
            weakref.finalize(self, release, weakref.ref(model), self.cache)
            if opts.get("caches") is not None:
                opts["caches"].append((self.role, self.cache))
        elif (fused if fused is not None else opts.get("fused", True)) and (kv := cpu_kv(model)) is not None:
            self.cache = kv  # the whole step in one kernel call (CPU, Llama-shaped, packed layout)
        else:
            # full-attention layers everywhere: a sliding-window layer would drop KV entries the commit
            # still indexes; runs are only allowed where the window covers all of them (models.check_window)
            self.cache = DynamicCache() if sliding_window(model.config) else DynamicCache(config=model.config)
        self.cache_kw = cache_kwarg(model)  # `cache` where transformers renamed past_key_values (5.2x)
        self.length = 0
        self.spec_parents: list[int] = []  # region nodes above `length`: parent within the region (-1 = x0 side)
        self.spec_depths: list[int] = []
        self.uploads = self.cache.uploads if self.static else Uploads(self.device)  # non-blocking uploads
        # bool [n, n] on the device: which region nodes each region node sees, kept once a forward took its
        # parents from the device (_run_rows); the host's spec_parents then hold placeholders (-2)
        self.region_vis: torch.Tensor | None = None

    def forward(self, tokens: list[int], parents: list[int], depths: list[int] | None = None,
                rows: list[int] | None = None, hidden: list[int] | None = None,
                layers: tuple[int, ...] = (-1,)):
        """Run the model on a tree of new tokens; returns float logits [q, vocab].

        rows: the only nodes whose logits the caller reads; the LM head (a quarter of a small model's
        FLOPs per token) skips the others, whose rows come back as zeros (or as real values).
        hidden: nodes whose hidden states a self-drafting head reads (Medusa, EAGLE): then returns
        (logits, feats [len(layers), len(hidden), h]) from the SAME forward; layers index transformers'
        hidden_states (-1 = the last, normed feature the LM head reads; k = after decoder layer k)."""
        if self.spec_parents:
            raise RuntimeError("commit() the previous step before the next forward()")
        return self._run(tokens, parents, depths, rows, hidden, tuple(layers))

    def prefill(self, tokens: list[int], hidden: list[int] | None = None, layers: tuple[int, ...] = (-1,)):
        """Causal forward of the prompt (or any chain); the caller commits what it keeps."""
        return self.forward(tokens, chain_parents(len(tokens)), hidden=hidden, layers=layers)

    @torch.inference_mode()
    def _run(self, tokens: list[int], parents: list[int], depths: list[int] | None = None,
             rows: list[int] | int | None = None, hidden: list[int] | None = None, layers: tuple = (-1,)):
        """Append nodes to the region (parents index the region: earlier nodes or this batch).
        rows: None = logits of every new node, int k = of the last k, list = of those (others zero)."""
        n0, q, past = len(self.spec_parents), len(tokens), self.length
        if self.region_vis is not None:
            raise RuntimeError("the region holds nodes with device-side parents: commit() before a host-tree forward")
        allp = self.spec_parents + list(parents)
        if depths is None or n0:
            depths = list(self.spec_depths)
            for i, p in enumerate(parents):
                if not -1 <= p < n0 + i:
                    raise ValueError(f"node {n0 + i} has parent {p}: parents must come first")
                depths.append(0 if p < 0 else depths[p] + 1)
            new_depths = depths[n0:]
        else:
            new_depths, depths = list(depths), list(depths)
        with attention_backends(self.device):
            if self.static:  # a chain (prefill) skips the cached builder: one entry per prompt length
                chain = n0 == 0 and allp == chain_parents(q)
                vis = np.tril(np.ones((q, q), dtype=bool)) if chain else tree_visibility(allp)[n0:]
                out = self.cache.step(tokens, new_depths, vis, past, past + n0, rows, hidden, layers)
            else:
                out = self._dynamic(tokens, allp, new_depths, n0, rows, hidden, layers)
        self.spec_parents, self.spec_depths = allp, depths
        return out

    @torch.inference_mode()
    def _run_rows(self, anc: torch.Tensor, depth: int, rows: int | None = None) -> torch.Tensor:
        """_run for q = len(anc) nodes whose parents are region rows `anc` chosen ON THE DEVICE (a draft
        level picked by device-side scores): no host read. Each node sees its parent's region row of
        `region_vis` plus itself, so the tree mask is built on the device and reaches the forward as `vis`
        (static cache: StaticKV.vis_in). All nodes sit at region depth `depth`; the token ids come from the
        caller's device tensor (DraftCore.grow_rows), the host passes placeholders."""
        q, n0, past = anc.shape[0], len(self.spec_parents), self.length
        if self.region_vis is None:  # the region so far has host parents (a catch-up chain): one upload
            host = torch.from_numpy(np.array(tree_visibility(self.spec_parents), dtype=bool).reshape(n0, n0))
            self.region_vis = self.uploads.upload(host)
        eye = torch.eye(q, dtype=torch.bool, device=self.device)
        vis = torch.cat([self.region_vis.index_select(0, anc), eye], 1)  # [q, n0 + q]
        depths = [depth] * q
        with attention_backends(self.device):
            if self.static:
                self.cache.vis_in = vis
                try:
                    out = self.cache.step([0] * q, depths, None, past, past + n0, rows)
                finally:
                    self.cache.vis_in = None
            else:
                out = self._dynamic([0] * q, None, depths, n0, rows, vis=vis)
        grown = torch.zeros((n0 + q, n0 + q), dtype=torch.bool, device=self.device)
        grown[:n0, :n0] = self.region_vis
        grown[n0:] = vis
        self.region_vis = grown
        self.spec_parents = self.spec_parents + [-2] * q
        self.spec_depths = self.spec_depths + depths
        return out

    def _dynamic(self, tokens: list[int], allp: list[int] | None, depths: list[int], n0: int, rows,
                 hidden: list[int] | None = None, layers: tuple = (-1,), vis: torch.Tensor | None = None):
        q, past = len(tokens), self.length
        io = self.uploads.longs([tokens, depths])
        ids, pos = io[0:1], io[1:2] + past
        if vis is None:
            mask = step_mask(allp, past, self.dtype, self.device, first=n0, upload=self.uploads.upload)
        else:  # device-side region visibility (_run_rows): the same additive mask, built without the host
            mask = torch.full((1, 1, q, past + vis.shape[1]), torch.finfo(self.dtype).min, dtype=self.dtype,
                              device=self.device)
            mask[0, 0, :, :past] = 0
            mask[0, 0, :, past:].masked_fill_(vis, 0)
        if rows is None or isinstance(rows, int):
            keep = 0 if rows is None else rows
        else:
            keep = self.uploads.longs(rows)
        if isinstance(self.cache, CpuKV):
            rows_out, states = self.cache.run(ids, pos, mask, keep, list(layers) if hidden is not None else [])
        else:
            out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, **{self.cache_kw: self.cache},
                             use_cache=True, logits_to_keep=keep, output_hidden_states=hidden is not None)
            rows_out = out.logits[0]
            states = [out.hidden_states[k][0] for k in layers] if hidden is not None else []
        if not torch.is_tensor(keep):
            logits = rows_out.float()
        else:
            logits = torch.zeros((q, rows_out.shape[-1]), dtype=torch.float32, device=self.device)
            logits[keep] = rows_out.float()
        if hidden is None:
            return logits
        return logits, torch.stack([s[hidden] for s in states])

    @torch.inference_mode()
    def commit(self, keep: list[int]) -> None:
        """Keep region nodes `keep` (ascending; a root-first path) as accepted text, drop the rest."""
        past, n, k = self.length, len(self.spec_parents), len(keep)
        if keep != list(range(k)):  # not a prefix of the region: move the kept rows down
            idx = self.uploads.longs(keep) + past  # pinned, non_blocking: no host sync
            for t in _kv_tensors(self.cache):
                t[..., past:past + k, :] = t.index_select(-2, idx)
        if k < n and isinstance(self.cache, DynamicCache):
            self.cache.crop(-(n - k))  # transformers 5: a negative count removes tokens
        self.length = past + k
        self.spec_parents, self.spec_depths, self.region_vis = [], [], None
