"""Models loaded on demand and kept: one cache shared by every session (the weights are read-only).

Loading goes through decoding.load (never trust_remote_code). The cache is keyed by what is loaded (name,
device, the torch dtype: "auto" and "fp32" on a CPU are one entry, not two copies; on a CPU the block kernel,
fp32 or int8, whose packed weights differ) and bounded by count and by
the weights' bytes (DECODESCOPE_MODEL_CACHE_MB), least recently used first; the page's default models
(`pinned`) go last, so a visitor cycling models or dtypes does not make every other visitor pay a reload. A
lock per key means two sessions asking for the same model load it once.
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict

import torch

from decoding import load
from decoding.engine.runner import precapture
from decoding.fast.cpu_gemm import kernel_wanted, model_kernel
from decoding.models import ModelError, pick_device, pick_dtype

log = logging.getLogger("decodescope.models")


def _tensors(obj, depth: int = 1):
    """The tensors an object keeps as attributes (a FusedLinears' concatenated panels), one level down."""
    for v in vars(obj).values():
        if isinstance(v, torch.Tensor):
            yield v
        elif depth and hasattr(v, "__dict__") and not isinstance(v, (torch.nn.Module, type)):
            yield from _tensors(v, depth - 1)


def held_bytes(*models, seen: dict | None = None) -> int:
    """Bytes of every tensor the models keep: parameters, buffers (the CPU kernel's packed panels are buffers:
    the default model's 92 MiB of blocks beside its 513 MiB of weights) and tensors kept as plain attributes
    (fused panels), each storage once however many views, modules or models share it (a layers-only draft
    shares its target's embedding). `seen` carries the storages already counted across calls."""
    seen = {} if seen is None else seen
    for model in models:
        if model is None or not isinstance(model, torch.nn.Module):
            continue
        for m in model.modules():
            for t in [*m._parameters.values(), *m._buffers.values(), *_tensors(m)]:
                if t is None or t.device.type == "meta":
                    continue
                st = t.untyped_storage()
                seen[(st.device, st.data_ptr())] = st.nbytes()
    return sum(seen.values())


_bytes = held_bytes


class ModelCache:
    def __init__(self, capacity: int = 3, loader=load, max_bytes: int | None = None):
        self.capacity, self.loader = capacity, loader
        mb = os.environ.get("DECODESCOPE_MODEL_CACHE_MB")
        self.max_bytes = max_bytes if max_bytes is not None else (int(mb) * 2**20 if mb else None)
        self.pinned: set[str] = set()  # names evicted last (the page's default models)
        self._aliases: dict[tuple, tuple] = {}  # an "auto" key on a GPU -> the key of what it loaded
        self._models: OrderedDict[tuple, tuple] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._drafts: dict[str, tuple] = {}  # layers-only draft folder -> (its target, weakly; (draft, tok))

    @staticmethod
    def key(name: str, device: str | None, dtype: str | None, kernel: str | None = None) -> tuple:
        """(name, device, torch dtype, CPU kernel) of what a request loads; "auto" stays "auto" only on a GPU,
        where it depends on the model's size (then the loaded model's dtype is its alias, `get`). The kernel is
        the CPU's block kernel (None: the process's, DECODESCOPE_CPU_KERNEL); on a GPU it is None (no copies)."""
        device = pick_device(None if device in (None, "", "auto") else device)
        d = dtype if dtype not in (None, "") else "auto"
        if d != "auto" or not device.startswith("cuda"):
            d = str(pick_dtype(d, device)).replace("torch.", "")
        try:
            k = None if device.startswith("cuda") else kernel_wanted(kernel or None)
        except ValueError as e:
            raise ModelError(str(e)) from None
        return (name, device, d, k)

    def cached(self, name: str, device: str | None = None, dtype: str | None = None,
               kernel: str | None = None) -> bool:
        try:
            key = self.key(name, device, dtype, kernel)
        except ModelError:  # an unknown dtype or kernel is loaded by nothing
            return False
        return self._aliases.get(key, key) in self._models

    def _evict(self) -> None:
        """Least recently used first, pinned names last, until count and bytes are within the bounds."""
        def over() -> bool:
            total = self.nbytes()
            return len(self._models) > self.capacity or (self.max_bytes is not None and total > self.max_bytes
                                                           and len(self._models) > 1)
        while over():
            order = [k for k in self._models if k[0] not in self.pinned] or list(self._models)
            self._models.pop(order[0])
        self._aliases = {a: k for a, k in self._aliases.items() if k in self._models}

    def nbytes(self) -> int:
        """What the cache holds: every tensor of every model and of the drafts built on them, shared storage
        once (held_bytes). The server's memory after loading follows this figure (tests/test_model_cache_bounds.py)."""
        seen: dict = {}
        for m, _ in self._models.values():
            held_bytes(m, seen=seen)
        for ref, pair in self._drafts.values():
            if ref() is not None:
                held_bytes(pair[0], seen=seen)
        return sum(seen.values())

    def get(self, name: str, device: str | None = None, dtype: str | None = None, kernel: str | None = None):
        """(model, tokenizer), loading on first use; ModelError with one line when it cannot load."""
        key = self.key(name, device, dtype, kernel)
        if key[1].startswith("cuda"):
            import torch
            if not torch.cuda.is_available():
                raise ModelError("device cuda was chosen but no CUDA GPU is available here; choose cpu or auto")
        with self._lock:
            key = self._aliases.get(key, key)
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            klock = self._key_locks.setdefault(key, threading.Lock())
        with klock:
            with self._lock:
                if key in self._models:
                    return self._models[key]
            try:
                pair = self.loader(name, device=key[1], dtype=None if key[2] == "auto" else key[2],
                                   **({"kernel": key[3]} if key[3] is not None else {}))
            except ModelError:
                raise
            except Exception as e:  # noqa: BLE001 - any loader failure is "cannot load" for the user
                raise ModelError(f"cannot load model {name!r}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None
            precapture_graphs(pair[0])
            loaded = (name, key[1], str(next(pair[0].parameters()).dtype).replace("torch.", ""), key[3])
            with self._lock:
                if loaded != key:  # "auto" on a GPU: keyed by what it loaded, one copy per dtype
                    self._aliases[key] = loaded
                    if loaded in self._models:
                        return self._models[loaded]
                self._models[loaded] = pair
                self._evict()
            return pair


    def draft(self, name: str, model, tok, device: str | None = None, dtype: str | None = None):
        """(draft, tokenizer) for a speculative run on `model`: a layers-only draft folder (draft.json: the
        one shipped for the default model) is built on the loaded target, sharing its embedding, LM head and
        tokenizer, and kept while the target is; any other draft loads like a model (get)."""
        from .drafts import layers_only
        if not layers_only(name):
            return self.get(name, device, dtype)
        with self._lock:
            ref, pair = self._drafts.get(name, (None, None))
            if ref is not None and ref() is model:
                return pair
        from decoding.api import load_draft
        try:
            pair = (load_draft(model, name)[0], tok)
        except ValueError as e:
            raise ModelError(str(e).strip().splitlines()[0]) from None
        with self._lock:  # one per draft folder: a run on another target replaces it
            self._drafts[name] = (weakref.ref(model), pair)
        return pair


def precapture_graphs(model) -> None:
    """Capture the common CUDA graph buckets at load, so a visitor's first run does not pay capture
    (decoding.engine.runner.precapture: CUDA and the static default only; not in ZeroGPU's main process,
    which has no GPU until a @spaces.GPU call). A failure is logged; runs still capture on first use."""
    if os.environ.get("SPACES_ZERO_GPU") or not hasattr(model, "get_input_embeddings"):
        return
    try:
        precapture(model)
    except Exception as e:  # noqa: BLE001 - pre-capture is an optimisation: never fail a load for it
        log.warning("CUDA graph pre-capture failed: %s", e)


def describe(model, tok) -> dict:
    """What the model picker shows: parameters, device, dtype, vocabulary, context length."""
    p = next(model.parameters())
    cfg = model.config
    return {"name": getattr(model, "name_or_path_", ""), "type": cfg.model_type,
            "params": sum(x.numel() for x in model.parameters()), "device": str(p.device),
            "dtype": str(p.dtype).replace("torch.", ""), "vocab": len(tok) if tok is not None else None,
            "positions": getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None),
            "layout": getattr(model, "weight_layout_", "stock"), "kernel": model_kernel(model)}


def human(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def model_line(role: str, model, tok) -> str:
    """One loaded model in a line of the Model accordion (never a server path)."""
    from ..page.tables import display_name
    d = describe(model, tok)
    return (f"**{role}**: `{display_name(d['name'])}` · {d['type']} · {human(d['params'])} parameters · device "
            f"**{d['device']}** · dtype **{d['dtype']}** · {d['layout']} weight layout"
            + (f" · **{d['kernel']}** CPU kernel" if d["layout"] == "packed" else "") + f" · vocabulary {d['vocab']} · "
            f"{d['positions']:,} positions (prompt + output)")
