"""The static-shape step (gpt-fast style): a preallocated KV cache, query sizes bucketed to powers of two,
inputs and the mask written into static buffers, and on CUDA each bucket's forward replayed as a CUDA graph.

Why: the engine is host-bound on GPUs (docs/engineering-notes.md, "GPU facts": ~30 ms of Python and kernel launches per
step on a 7B-shaped model against a 4.5 ms bandwidth floor; ~7,300 launches for one 48-token lookahead
run). A graph replays a whole forward with one launch, but only for fixed shapes and fixed addresses, so:
  - keys/values live in [1, H, capacity, D] buffers that never move (they grow, rarely, by reallocation,
    which drops the captured graphs); a step writes its rows at `slots` with index_copy_ (graph-safe);
  - on the fixed (graph) path a step of q tokens runs as a bucket of Qb = 1, 2, 4, ... 256 rows (256: the
    paper's GPU setting W15 N5 G15 is 165 query tokens with the default text span; eager steps run at
    their own size: padding a 5-token CPU step to 8 rows cost 11.8 vs 10.9 ms); the padded rows come
    FIRST, use token 0 at position 0, are written to the slots just after the real rows, see only
    themselves (finite values: no NaN leaks into real rows) and are never committed: the next step
    writes over them;
  - the LM head runs only for the rows the step reads: a graph per (Qb, Rb), Rb = the bucket of the
    rows read, their indices in a static buffer (a lookahead step reads x0, the top window level and
    the candidates, not the middle levels);
  - the mask is [Qb, capacity] in graph mode (columns past the step are masked) and the exact
    [Qb, past + Qb] in eager mode, where no fixed shape is needed (CPU, buckets above 256, prefill).
Logits are the same as the dynamic path's: masked columns get exp(finfo.min - max) = 0 exactly
(tests/test_static_core.py checks ids against HF greedy for every method with the static path on).
Capture and replay live in graphs.py (mixed into StaticKV): capture status per bucket (captured / failed
with the error / used by the current run) lands in the trace config (runner.py); a failed capture is
retried once, then that bucket runs eagerly for the cache's lifetime. Uploads go through pinned staging
(uploads.py).
Caches are pooled per model under one LRU policy with a budget (cache_pool.py).
Plugs into transformers through the public Cache / CacheLayerMixin API; nothing is patched.
"""
from __future__ import annotations

import weakref

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from ..models import cache_kwarg
from .graphs import GraphReplay, emulating
from .uploads import Uploads

GRAPH_MAX = 256   # largest bucket captured as a CUDA graph; larger steps (prefill) run eagerly
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


def size_class(n: int) -> int:
    """Capacities come in ROUND x 2^k sizes, so a pooled cache fits the next run of a similar length."""
    c = ROUND
    while c < n:
        c *= 2
    return c


class SlotLayer(CacheLayerMixin):
    """One layer's preallocated keys/values; update() writes the step's rows at the owner's slots.
    The owner is a weak reference: no StaticKV <-> layer cycle, so an evicted cache is freed at once."""
    is_compileable = True

    def __init__(self, owner: "StaticKV", idx: int):
        super().__init__()
        self._owner, self.idx = weakref.ref(owner), idx

    @property
    def owner(self) -> "StaticKV":
        return self._owner()

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.owner.allocate(self, key_states, value_states)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        owner = self.owner
        self.keys.index_copy_(2, owner.slots, key_states)
        self.values.index_copy_(2, owner.slots, value_states)
        n = owner.kv_len
        return self.keys[:, :, :n], self.values[:, :, :n]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.kv_len, 0

    def get_seq_length(self) -> int:
        return self.owner.kv_len

    def get_max_length(self) -> int:
        return self.owner.capacity


class StaticKV(Cache, GraphReplay):
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
        self.capacity = size_class(max(capacity, 1))
        self.graphs_on = (self.device.type == "cuda" or emulating()) if graphs is None else graphs
        # compiled: buckets run through torch.compile at the fixed [bucket, capacity] shapes (measured on
        # CPU by bench/kernels/bench_static.py; on CUDA the hand-captured graphs do what reduce-overhead would)
        self.compiled = compiled
        # fixed: the graph path's shapes and buffers (kv = capacity, all rows, static inputs), run eagerly:
        # what a CUDA graph replays, testable on CPU (tests/test_static_core.py)
        self.fixed = self.graphs_on or compiled or fixed
        if compiled and model not in _COMPILED:  # (experiment: the compiled module keeps the model alive)
            _COMPILED[model] = torch.compile(model, dynamic=False)
        self.uploads = Uploads(self.device)
        self.slots = torch.zeros(0, dtype=torch.long, device=self.device)
        self.kv_len = 0
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.tries: dict[tuple[int, int], int] = {}    # failed captures per bucket (this storage)
        self.failed: dict[tuple[int, int], str] = {}   # bucket -> the last capture error
        self.used: set[tuple[int, int]] = set()        # buckets run on the fixed path since acquire()
        self.pool = None
        self.ids_in: torch.Tensor | None = None  # the next step's token ids as a device tensor (draft levels)
        # the next step's bool visibility block [q, start - length + q] as a device tensor (a draft level whose
        # parents were chosen on the device, Core._run_rows): used instead of uploading `vis`
        self.vis_in: torch.Tensor | None = None
        self._alloc_buffers()

    def _alloc_buffers(self) -> None:
        """Static inputs of the graph path: ids / positions / slots / rows read, the [GRAPH_MAX, capacity]
        mask; new storage drops the captured graphs (their addresses are gone) and retries failed ones."""
        self.graphs.clear()
        self.tries.clear()
        self.pool = None
        if not self.fixed:
            return
        self.io = torch.zeros((4, GRAPH_MAX), dtype=torch.long, device=self.device)
        self.mask = torch.zeros((1, 1, GRAPH_MAX, self.capacity), dtype=self.dtype, device=self.device)

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

    def nbytes(self) -> int:
        """Device bytes of the cache's storage and static buffers (what the pool budget counts)."""
        ts = self.tensors() + ([self.io, self.mask] if self.fixed and self.capacity else [])
        return sum(t.numel() * t.element_size() for t in ts)

    def free(self) -> None:
        """Drop the storage, the static buffers and the graphs with their memory pool (pool eviction)."""
        self.graphs.clear()
        self.pool, self.store, self.capacity = None, None, 0
        for layer in self.layers:
            layer.keys = layer.values = None
            layer.is_initialized = False
        self.io = self.mask = None

    def ensure(self, need: int) -> None:
        """Room for `need` cache entries; growing reallocates and drops the captured graphs."""
        if need <= self.capacity:
            return
        old = self.capacity
        self.capacity = size_class(max(need, 2 * self.capacity))
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

        vis: bool [q, start - length + q], what each new token sees above the committed prefix `length`
        (None when `vis_in` holds it on the device).
        rows: logits to return: None = all q, an int k = the last k, a list = those rows (others zero).
        Returns float32 logits [q or k, vocab], always a fresh tensor (graph outputs get overwritten);
        with `hidden` (rows) also the hidden states of `layers` at those rows, [len(layers), len(hidden), h]
        (graph mode: the bucket's graph, keyed by the layers too, writes them to its static output)."""
        if hidden is None:
            return self._step(tokens, depths, vis, length, start, rows, None)
        logits, feats = self._step(tokens, depths, vis, length, start, rows, tuple(layers))
        pad = feats.shape[1] - len(tokens)
        return logits, feats[:, pad:][:, hidden].clone()

    def _step(self, tokens, depths, vis, length: int, start: int, rows, hid: tuple | None):
        """step() for logits, or (logits, hidden states of layers `hid` for every bucket row) with hid."""
        q = len(tokens)
        qb = bucket(q) if self.fixed else q  # eager steps need no fixed shape: no padded rows to compute
        self.ensure(start + qb)
        pad = qb - q
        want = None if rows is None else list(range(q - rows, q)) if isinstance(rows, int) else list(rows)
        rb = qb if want is None else min(qb, bucket(len(want)))
        read = [r + pad for r in want] + [qb - 1] * (rb - len(want)) if rb < qb else [0] * qb
        host = torch.tensor([[0] * pad + list(tokens), [0] * pad + [length + d for d in depths],
                             list(range(start + q, start + qb)) + list(range(start, start + q)),
                             read + [0] * (qb - len(read))], dtype=torch.long)
        vis_t = self.vis_in if self.vis_in is not None else torch.from_numpy(np.array(vis, dtype=bool))
        if not (self.fixed and qb <= GRAPH_MAX):
            return self._eager(host, vis_t, length, start, q, rows, want, hid)
        self.uploads.upload(host, self.io[:, :qb])
        if self.ids_in is not None:  # token ids already on the device: a device-to-device copy, no host read
            self.io[0, pad:qb].copy_(self.ids_in)
        self._fill_mask(self.mask[:, :, :qb], vis_t, length, start, q)
        out, feats = self._fixed((qb, rb) if hid is None else (qb, rb, hid))
        logits = out[0]
        if rb < qb:  # the rows read, in order, then the bucket's repeats
            logits = logits[:len(want)]
            if isinstance(rows, int):
                logits = logits.to(torch.float32, copy=True)
            else:
                full = torch.zeros((q, logits.shape[-1]), dtype=torch.float32, device=self.device)
                logits = full.index_copy_(0, self.uploads.longs(want), logits.float())
        else:
            logits = logits[pad:]
            if isinstance(rows, int):
                logits = logits[q - rows:]
            logits = logits.to(torch.float32, copy=True)
        return logits if hid is None else (logits, feats)

    def _eager(self, host, vis_t, length: int, start: int, q: int, rows, want, hid: tuple | None = None):
        """A step at its own size (CPU default, prefill, buckets above GRAPH_MAX): exact [qb, kv] mask."""
        qb = host.shape[1]
        pad = qb - q
        kv = start + qb if self.device.type != "cuda" else min(self.capacity, _round_up(start + qb, 16))
        io = self.uploads.upload(host[:3])
        if self.ids_in is not None:
            io = io.clone() if io.data_ptr() == host.data_ptr() else io
            io[0, pad:].copy_(self.ids_in)
        mask = torch.empty((1, 1, qb, kv), dtype=self.dtype, device=self.device)
        self._fill_mask(mask, vis_t, length, start, q)
        keep = q if rows is None else rows if isinstance(rows, int) else self.uploads.longs(want) + pad
        out, feats = self._forward(io, mask, kv, keep, None, hid)
        logits = out[0]
        if rows is None or isinstance(rows, int):
            logits = logits.float()
        else:
            full = torch.zeros((q, logits.shape[-1]), dtype=torch.float32, device=self.device)
            full[keep - pad] = logits.float()
            logits = full
        return logits if hid is None else (logits, feats)

    def _fill_mask(self, mask: torch.Tensor, vis: torch.Tensor, length: int, start: int, q: int) -> None:
        """Additive mask in place, on the device (only the bool tree block is uploaded): padded rows
        (first) see only their own slot; real rows see the prefix and the region per `vis`."""
        pad = mask.shape[2] - q
        mask.fill_(torch.finfo(self.dtype).min)
        mask[0, 0, pad:, :length] = 0
        on = vis if vis.device == mask.device else self.uploads.upload(vis)  # vis_in: already there
        mask[0, 0, pad:, length:start + q].masked_fill_(on, 0)
        if pad:
            mask[0, 0, :pad, start + q:start + q + pad].diagonal().fill_(0)

    def _bucket_fn(self):
        """What runs a bucket without graphs: the torch.compile'd model (the experiment), or None = the model."""
        return _COMPILED[self._model()] if self.compiled else None

    def _forward(self, io: torch.Tensor, mask: torch.Tensor, kv: int, keep, fn=None, hid: tuple | None = None):
        """(logits, hidden states of layers `hid` [len(hid), qb, h] or None) of one bucket."""
        qb = io.shape[1]
        self.slots, self.kv_len = io[2, :qb], kv
        base = self._model()
        model = base if fn is None else fn
        kw = {cache_kwarg(base): self}  # `cache` where transformers renamed past_key_values
        out = model(input_ids=io[0:1, :qb], position_ids=io[1:2, :qb], attention_mask=mask, **kw, use_cache=True,
                    logits_to_keep=keep, output_hidden_states=hid is not None)
        return out.logits, None if hid is None else torch.stack([out.hidden_states[k][0] for k in hid])


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m
