"""The pool of static caches per model: one least-recently-used policy with a stated budget.

Why: a cache's storage (GBs for a long run on a 7B model) and its captured CUDA graphs are worth keeping
between runs (a run after the first pays no capture), but a long-lived server must not keep every size
it ever saw. Policy: capacities come in size classes (static_cache.size_class), a run takes the most
recently used idle cache of its class or the next one, and when a run ends its cache goes back to the
front; the least recently used idle caches are evicted (storage and graph pool freed) while the pool
holds more than POOL_CACHES caches or POOL_BYTES bytes. One lock: Gradio worker threads and Core
finalizers both touch the pool.
"""
from __future__ import annotations

import os
import threading
import weakref

from .graphs import emulating
from .static_cache import StaticKV, size_class

POOL_CACHES = 2   # idle caches kept per model
POOL_BYTES = int(os.environ.get("DECODESCOPE_POOL_BYTES", str(4 << 30)))  # their bytes per model
_POOL_LOCK = threading.RLock()  # reentrant: a Core finalizer may release during a collection inside acquire


def acquire(model, capacity: int, compiled: bool = False, graphs: bool | None = None,
            fixed: bool = False) -> StaticKV:
    """A static cache for `model` with room for `capacity` tokens: the most recently used pooled one that
    fits (its CUDA graphs are then already captured: a run after the first pays no capture), else new.
    At most twice the room needed: in graph mode attention reads the whole capacity."""
    need = size_class(max(capacity, 1))
    w = model.get_input_embeddings().weight
    if graphs is None:  # the default a new cache would take: on CUDA, or where graphs are emulated
        graphs = w.device.type == "cuda" or emulating()
    with _POOL_LOCK:
        pool = _pool(model)
        for kv in pool:  # most recently used first
            # a model moved (.to("cuda"), .to(bfloat16)) or copied since: its old caches do not fit it
            if (need <= kv.capacity <= 2 * need and kv.compiled == compiled and kv.fixed >= fixed
                    and kv.graphs_on == graphs and kv._model() is model and kv.device == w.device
                    and kv.dtype == w.dtype):
                pool.remove(kv)
                kv.used = set()
                return kv
    return StaticKV(model, capacity, graphs=graphs, compiled=compiled, fixed=fixed)


def release(model_ref: "weakref.ref", kv: StaticKV) -> None:
    """Return a cache to its model's pool (called when its Core is collected). The policy: most recently
    used first; the least recently used are evicted (storage and graph pool freed) while the pool holds
    more than POOL_CACHES caches or POOL_BYTES bytes."""
    model = model_ref()
    if model is None or kv.capacity == 0:
        return
    with _POOL_LOCK:
        pool = _pool(model)
        pool.insert(0, kv)
        while pool and (len(pool) > POOL_CACHES or sum(c.nbytes() for c in pool) > POOL_BYTES):
            pool.pop().free()


def pool_status(model) -> dict:
    """What the pool holds for `model`: caches (capacity, bytes, buckets captured) and the budget."""
    with _POOL_LOCK:
        pool = list(_pool(model))
    return {"budget": {"caches": POOL_CACHES, "bytes": POOL_BYTES},
            "caches": [{"capacity": c.capacity, "bytes": c.nbytes(), "captured": c.status()["captured"]} for c in pool]}


def _pool(model) -> list[StaticKV]:
    with _POOL_LOCK:
        pool = model.__dict__.get("_decodescope_static_pool")
        if pool is None:
            pool = model.__dict__["_decodescope_static_pool"] = []
        return pool


