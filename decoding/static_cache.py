"""The static-shape step (gpt-fast style): a preallocated KV cache, query sizes bucketed to powers of two,
inputs and the mask written into static buffers, and on CUDA each bucket's forward replayed as a CUDA graph.

Why: the engine is host-bound on GPUs (REFERENCE.md "GPU facts": ~30 ms of Python and kernel launches per
step on a 7B-shaped model against a 4.5 ms bandwidth floor; ~7,300 launches for one 48-token lookahead
run). A graph replays a whole forward with one launch, but only for fixed shapes and fixed addresses, so:
  - keys/values live in [1, H, capacity, D] buffers that never move (they grow, rarely, by reallocation,
    which drops the captured graphs); a step writes its rows at `slots` with index_copy_ (graph-safe);
  - a step of q tokens runs as a bucket of Qb = 1, 2, 4, ... 128 rows; the padded rows come FIRST (so
    logits_to_keep=q keeps exactly the real rows), use token 0 at position 0, are written to the slots
    just after the real rows, see only themselves (finite values: no NaN leaks into real rows) and are
    never committed: the next step writes over them;
  - the mask is [Qb, capacity] in graph mode (columns past the step are masked) and the exact
    [Qb, past + Qb] in eager mode, where no fixed shape is needed (CPU, buckets above 128, prefill).
Logits are the same as the dynamic path's: masked columns get exp(finfo.min - max) = 0 exactly
(tests/test_static_core.py checks ids against HF greedy for every method with the static path on).
Plugs into transformers through the public Cache / CacheLayerMixin API; nothing is patched.
"""
from __future__ import annotations

import warnings
import weakref

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

GRAPH_MAX = 128   # largest bucket captured as a CUDA graph; larger steps (prefill) run eagerly
ROUND = 256       # capacity granularity (a multiple of 16 keeps the mask aligned for SDPA kernels)
_COMPILED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> torch.compile'd model


def bucket(q: int) -> int:
    """Smallest power of two >= q up to GRAPH_MAX; larger steps run at their own size."""
    if q > GRAPH_MAX:
        return q
    b = 1
    while b < q:
        b *= 2
    return b


class SlotLayer(CacheLayerMixin):
    """One layer's preallocated keys/values; update() writes the step's rows at the owner's slots."""
    is_compileable = True

    def __init__(self, owner: "StaticKV", idx: int):
        super().__init__()
        self.owner, self.idx = owner, idx

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.owner.allocate(self, key_states, value_states)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys.index_copy_(2, self.owner.slots, key_states)
        self.values.index_copy_(2, self.owner.slots, value_states)
        n = self.owner.kv_len
        return self.keys[:, :, :n], self.values[:, :, :n]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.kv_len, 0

    def get_seq_length(self) -> int:
        return self.owner.kv_len

    def get_max_length(self) -> int:
        return self.owner.capacity


class StaticKV(Cache):
    """The preallocated cache plus the static step buffers and, on CUDA, one captured graph per bucket."""

    def __init__(self, model, capacity: int = 0, graphs: bool | None = None, compiled: bool = False,
                 fixed: bool = False):
        n_layers = model.config.get_text_config().num_hidden_layers
        super().__init__(layers=[SlotLayer(self, i) for i in range(n_layers)])
        self.store: torch.Tensor | None = None  # [layers, 2, B, H, capacity, D]: every layer's keys and values
        self.fused = True                       # all layers are views of `store` (same head shapes)
        emb = model.get_input_embeddings().weight
        self._model = weakref.ref(model)  # weak: a pooled cache must not keep an unloaded model alive
        self.device, self.dtype = emb.device, emb.dtype
        self.capacity = _round_up(max(capacity, 1), ROUND)
        self.graphs_on = self.device.type == "cuda" if graphs is None else graphs
        # compiled: buckets run through torch.compile at the fixed [bucket, capacity] shapes (measured on
        # CPU by bench/bench_static.py; on CUDA the hand-captured graphs do what reduce-overhead would)
        self.compiled = compiled
        # fixed: the graph path's shapes and buffers (kv = capacity, all rows, static inputs), run eagerly:
        # what a CUDA graph replays, testable on CPU (tests/test_static_core.py)
        self.fixed = self.graphs_on or compiled or fixed
        if compiled and model not in _COMPILED:  # (experiment: the compiled module keeps the model alive)
            _COMPILED[model] = torch.compile(model, dynamic=False)
        self.slots = torch.zeros(0, dtype=torch.long, device=self.device)
        self.kv_len = 0
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor] | None] = {}
        self.graph_error: str | None = None
        self._alloc_buffers()

    def _alloc_buffers(self) -> None:
        """Static inputs of the graph path: ids / positions / slots rows, and the [GRAPH_MAX, capacity] mask."""
        if not self.fixed:
            return
        self.io = torch.zeros((3, GRAPH_MAX), dtype=torch.long, device=self.device)
        self.mask = torch.zeros((1, 1, GRAPH_MAX, self.capacity), dtype=self.dtype, device=self.device)
        self.pool = torch.cuda.graph_pool_handle() if self.graphs_on else None
        self.graphs.clear()

    def allocate(self, layer: SlotLayer, k: torch.Tensor, v: torch.Tensor) -> None:
        """Layer storage: a view of one tensor for all layers (compaction is then one gather for the whole
        cache, not two per layer), or the layer's own pair when head shapes differ between layers."""
        shape = (k.shape[0], k.shape[1], self.capacity, k.shape[-1])
        if self.store is None and layer.idx == 0 and v.shape[-1] == k.shape[-1]:
            self.store = k.new_zeros((len(self.layers), 2, *shape))
        if (self.store is not None and tuple(self.store.shape[2:]) == shape and v.shape[-1] == k.shape[-1]
                and self.store.device == k.device):  # a model sharded over GPUs keeps per-layer storage
            layer.keys, layer.values = self.store[layer.idx, 0], self.store[layer.idx, 1]
        else:
            self.fused = False
            layer.keys = k.new_zeros(shape)
            layer.values = v.new_zeros((*shape[:3], v.shape[-1]))

    def tensors(self) -> list[torch.Tensor]:
        """The cache's tensors with the sequence axis at -2 (what a KV compaction moves)."""
        if self.fused and self.store is not None:
            return [self.store]
        return [t for layer in self.layers if layer.is_initialized for t in (layer.keys, layer.values)]

    def ensure(self, need: int) -> None:
        """Room for `need` cache entries; growing reallocates and drops the captured graphs."""
        if need <= self.capacity:
            return
        old = self.capacity
        self.capacity = _round_up(max(need, 2 * self.capacity), ROUND)
        if self.store is not None:
            store = self.store.new_zeros((*self.store.shape[:4], self.capacity, self.store.shape[-1]))
            store[..., :old, :] = self.store
            self.store = store
        for layer in self.layers:
            if not layer.is_initialized:
                continue
            if self.store is not None and layer.keys.shape[-1] == store.shape[-1] and self.fused:
                layer.keys, layer.values = store[layer.idx, 0], store[layer.idx, 1]
            else:
                for name in ("keys", "values"):
                    t = getattr(layer, name)
                    new = t.new_zeros((*t.shape[:2], self.capacity, t.shape[-1]))
                    new[:, :, :old] = t
                    setattr(layer, name, new)
        self._alloc_buffers()

    def step(self, tokens: list[int], depths: list[int], vis: np.ndarray, length: int, start: int,
             rows: int | list[int] | None, hidden: list[int] | None = None, layers: tuple = (-1,)):
        """One forward of q new tokens written at cache slots start.. (start = length + region so far).

        vis: bool [q, start - length + q], what each new token sees above the committed prefix `length`.
        rows: logits to return: None = all q, an int k = the last k, a list = those rows (others zero).
        Returns float32 logits [q or k, vocab], always a fresh tensor (graph outputs get overwritten);
        with `hidden` (rows) also the hidden states of `layers` at those rows, [len(layers), len(hidden), h]
        (graph mode: the bucket's graph, keyed by the layers, writes them to its own static output)."""
        q = len(tokens)
        qb = bucket(q)
        self.ensure(start + qb)
        pad = qb - q
        hid = None if hidden is None else tuple(layers)
        key = qb if hid is None else (qb, hid)
        host = torch.tensor([[0] * pad + list(tokens), [0] * pad + [length + d for d in depths],
                             list(range(start + q, start + qb)) + list(range(start, start + q))], dtype=torch.long)
        vis_t = torch.from_numpy(np.array(vis, dtype=bool))
        if self.fixed and qb <= GRAPH_MAX and self.graphs.get(key, 0) is not None:
            self.io[:, :qb].copy_(host)
            self._fill_mask(self.mask[:, :, :qb], vis_t, length, start, q)
            if self.graphs_on:
                logits, feats = self._replay(qb, hid)
            else:
                fn = _COMPILED[self._model()] if self.compiled else None
                logits, feats = self._forward(self.io[:, :qb], self.mask[:, :, :qb], self.capacity, 0, fn, hid)
            logits = logits[0, pad:]
            if isinstance(rows, int):
                logits = logits[q - rows:]
            logits = logits.to(torch.float32, copy=True)
        else:
            kv = start + qb if self.device.type != "cuda" else min(self.capacity, _round_up(start + qb, 16))
            io = host.to(self.device)
            mask = torch.empty((1, 1, qb, kv), dtype=self.dtype, device=self.device)
            self._fill_mask(mask, vis_t, length, start, q)
            keep = _keep_arg(rows, pad, q, self.device)
            logits, feats = self._forward(io, mask, kv, keep, None, hid)
            logits = logits[0]
            if rows is None or isinstance(rows, int):
                logits = logits.float()
            else:
                full = torch.zeros((q, logits.shape[-1]), dtype=torch.float32, device=self.device)
                full[keep - pad] = logits.float()
                logits = full
        if hid is None:
            return logits
        return logits, feats[:, pad:][:, hidden].clone()

    def _fill_mask(self, mask: torch.Tensor, vis: torch.Tensor, length: int, start: int, q: int) -> None:
        """Additive mask in place: padded rows (first) see only their own slot; real rows see the prefix
        and the region per `vis`."""
        pad = mask.shape[2] - q
        mask.fill_(torch.finfo(self.dtype).min)
        mask[0, 0, pad:, :length] = 0
        mask[0, 0, pad:, length:start + q].masked_fill_(vis.to(self.device, non_blocking=True), 0)
        if pad:
            mask[0, 0, :pad, start + q:start + q + pad].diagonal().fill_(0)

    def _forward(self, io: torch.Tensor, mask: torch.Tensor, kv: int, keep, fn=None, hid: tuple | None = None):
        """(logits, hidden states of layers `hid` [len(hid), qb, h] or None) of one bucket."""
        qb = io.shape[1]
        self.slots, self.kv_len = io[2, :qb], kv
        model = self._model() if fn is None else fn
        out = model(input_ids=io[0:1, :qb], position_ids=io[1:2, :qb], attention_mask=mask,
                    past_key_values=self, use_cache=True, logits_to_keep=keep, output_hidden_states=hid is not None)
        return out.logits, None if hid is None else torch.stack([out.hidden_states[k][0] for k in hid])

    def _replay(self, qb: int, hid: tuple | None = None):
        """Replay bucket qb's graph (one per set of hidden layers read, `hid`), capturing it first
        (warm-up on a side stream, as CUDA graphs need); returns its static (logits, hidden) outputs."""
        key = qb if hid is None else (qb, hid)
        entry = self.graphs.get(key)
        if entry is None:
            args = (self.io[:, :qb], self.mask[:, :, :qb], self.capacity, 0, None, hid)
            try:
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    self._forward(*args)  # warm-up: the real step (it is idempotent: same rows, same slots)
                torch.cuda.current_stream(self.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                    out = self._forward(*args)
                entry = self.graphs[key] = (graph, out)
            except Exception as e:  # noqa: BLE001 - a model that cannot be captured still decodes eagerly
                self.graphs[key] = None
                self.graph_error = f"{type(e).__name__}: {e}"
                warnings.warn(f"CUDA graph capture failed for {qb}-token steps, running them eagerly: {e}")
                return self._forward(*args)
        entry[0].replay()
        return entry[1]


def acquire(model, capacity: int, compiled: bool = False) -> StaticKV:
    """A static cache for `model` with room for `capacity` tokens: a pooled one from an earlier run when
    one fits (its CUDA graphs are then already captured: a run after the first pays no capture), else new.
    At most twice the room needed: in graph mode attention reads the whole capacity."""
    need = _round_up(max(capacity, 1), ROUND)
    pool = _pool(model)
    for kv in sorted(pool, key=lambda c: c.capacity):
        if need <= kv.capacity <= 2 * need and kv.compiled == compiled:
            pool.remove(kv)
            return kv
    return StaticKV(model, capacity, compiled=compiled)


def release(model_ref: "weakref.ref", kv: StaticKV, keep: int = 2) -> None:
    """Return a cache to its model's pool (called when its Core is collected); keep the `keep` largest."""
    model = model_ref()
    if model is None:
        return
    pool = _pool(model)
    pool.append(kv)
    while len(pool) > keep:
        pool.remove(min(pool, key=lambda c: c.capacity))


def _pool(model) -> list[StaticKV]:
    pool = model.__dict__.get("_decodescope_static_pool")
    if pool is None:
        pool = model.__dict__["_decodescope_static_pool"] = []
    return pool


def _keep_arg(rows, pad: int, q: int, device: torch.device):
    """logits_to_keep for the bucket: padded rows come first, so an int keeps only real rows."""
    if rows is None:
        return q
    if isinstance(rows, int):
        return rows
    return torch.tensor(rows, dtype=torch.long, device=device) + pad


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m
