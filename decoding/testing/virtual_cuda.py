"""A virtual CUDA device on a CPU-only machine: tensors that say `cuda:0`, hold real CPU values, and obey
CUDA's device rules, so the CUDA path (static cache, graph buckets, pinned uploads, CUDA events) runs to
the end in CI and stays exact, and every place it would mix devices or block the host is named.

Why: no GPU is at hand for most sessions, and the CPU-only tests cannot see a host tensor on a CUDA path
(a CPU index gathering CUDA probabilities crashed speculative decoding on an H100 once while every CPU
test passed). FakeTensorMode sees devices but carries no values, so the engine's one host read per step
could not answer; here values are real.

    with virtual_cuda() as vc:
        model = model.to("cuda")            # parameters become virtual-CUDA tensors
        generate(model, ids, drafter)       # runs the path a CUDA user gets
    vc.syncs                                 # every host read: (kind, op, "dir/file.py:line")

What it does, within the block:
- factories with device="cuda" (torch.zeros(..., device="cuda"), torch.tensor(..., device=dev)),
  .to("cuda") / .cuda() / model.to("cuda") give VirtualCudaTensor: a wrapper (device cuda:0) around a
  real CPU tensor; every aten op on them runs on the wrapped tensors and wraps its results;
- every op checks that its tensor inputs share a device, with CUDA's exceptions (a 0-dim CPU tensor is a
  scalar; copies move data; index / index_put take CPU indices): a mismatch raises DeviceMismatch naming
  the op, the caller's file:line and, for a host tensor made by a factory inside the block, where it was
  made (a mask built on the host is then named where it was built, not where transformers used it);
- host reads of a virtual-CUDA tensor (.item(), int(), float(), bool(), .tolist(), .cpu(), .to("cpu"),
  copy_ into a host tensor, and the ops whose output shape depends on values: nonzero, masked_select,
  unique, boolean indexing, repeat_interleave without output_size) are recorded as syncs with the
  caller's file:line; .numpy() raises as on CUDA; torch.cuda.synchronize() is a sync too;
- uploads (a host tensor copied to the device) are counted, pinned or pageable; one that is not a
  non_blocking copy from pinned memory waits for the stream to drain on CUDA, and is recorded as a sync;
- torch.cuda answers as one device would (is_available, device_count, get_device_name, Event, Stream,
  current_stream, synchronize, memory stats, set_sync_debug_mode: "warn" warns on every sync, as the real
  one does, so capture_check's CUDA branch runs too). Graph capture is decoding.fast.graphs' emulated
  backend (emulated_graphs()), which runs the region under the capture checker.

Threads started inside the block (the app's run worker) get the device's modes too (torch keeps mode
stacks per thread). Inference only: virtual-CUDA tensors never require grad (autograd's CUDA metadata
needs a real device).

What it cannot see: kernel-level behaviour (timing, stream ordering, allocator aliasing, the SDPA kernel
CUDA would pick: the CPU kernels compute the values), and CUDA-only numerics (bf16 rounding of CUDA's
kernels). The torch.cuda functions are swapped in for the block and restored after it; nothing of
transformers is touched.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("cuda", 0)
NAME = "Virtual CUDA (CPU values)"
_TORCH = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.abspath(__file__)
_SKIP = {_HERE, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "fast", "capture_check.py")}
# ops whose output shape depends on values: CUDA reads the size back to the host
DYNAMIC = {"nonzero", "nonzero_static", "argwhere", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
           "unique_consecutive", "bincount", "nonzero_numpy"}
READS = {"_local_scalar_dense": "item", "equal": "equal", "is_nonzero": "item"}
# ops CUDA runs with inputs on several devices (fake_tensor's list, plus what CUDA accepts)
MIXED = {"copy_", "copy", "_to_copy", "to", "slice_scatter", "diagonal_scatter", "_foreach_copy", "_foreach_copy_",
         "lift_fresh", "lift_fresh_copy", "_copy_from", "_copy_from_and_resize", "set_"}
CPU_INDICES = {"index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"}
SCALARS = {"item": lambda x: x, "__float__": float, "__int__": int, "__bool__": bool, "__index__": int,
           "__complex__": complex}
CASTS = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16,
         "long": torch.int64, "int": torch.int32, "short": torch.int16, "char": torch.int8, "byte": torch.uint8,
         "bool": torch.bool}
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "eye", "rand", "randn", "randint",
             "randperm", "linspace", "logspace", "empty_strided", "tril_indices", "triu_indices", "from_numpy",
             "scalar_tensor", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
             "randint_like", "frombuffer"}


class DeviceMismatch(RuntimeError):
    """An op got tensors on two devices where CUDA refuses them."""


def _where() -> str:
    """The innermost caller outside torch and this device (and the capture checker): "dir/file.py:line"."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(_TORCH) or "/torch/" in f.f_code.co_filename
                             or os.path.abspath(f.f_code.co_filename) in _SKIP
                             or f.f_code.co_filename.endswith(("contextlib.py", "/weakref.py"))):
        f = f.f_back
    if f is None:
        return "?"
    parts = f.f_code.co_filename.replace(os.sep, "/").split("/")
    return f"{'/'.join(parts[-2:])}:{f.f_lineno}"


@dataclass
class Sync:
    """One host read of a device value (or a device-wide synchronize)."""
    kind: str   # read | dynamic | copy | upload | synchronize
    op: str
    where: str

    def __str__(self) -> str:
        return f"{self.kind} {self.op} at {self.where}"


@dataclass
class VirtualCuda:
    """What a virtual_cuda() block saw: syncs (host reads), uploads, and the capture-debug setting."""
    syncs: list[Sync] = field(default_factory=list)
    uploads: dict = field(default_factory=lambda: {"pinned": 0, "pageable": 0})
    strict: bool = True
    debug_mode: int = 0
    origins: dict = field(default_factory=dict)  # id(host tensor) -> (weakref, where it was made)

    def mark(self) -> int:
        return len(self.syncs)

    def since(self, mark: int) -> list[Sync]:
        return self.syncs[mark:]

    def sync(self, kind: str, op: str) -> None:
        s = Sync(kind, op, _where())
        self.syncs.append(s)
        if self.debug_mode:
            warnings.warn(f"called a synchronizing CUDA operation: {s}", UserWarning, stacklevel=2)
            if self.debug_mode == 2:
                raise RuntimeError(f"called a synchronizing CUDA operation: {s}")

    def upload(self, pinned: bool, non_blocking: bool) -> None:
        """A host tensor copied to the device. Only a non_blocking copy from pinned memory is queued like a
        kernel; any other waits for the stream to drain first (torch's memcpy_and_sync, CUDA's pageable
        staging), a sync as a read is: recorded with its caller."""
        self.uploads["pinned" if pinned else "pageable"] += 1
        if not (pinned and non_blocking):
            self.sync("upload", "blocking upload" if pinned else "pageable upload")

    def made_at(self, t: torch.Tensor) -> str | None:
        entry = self.origins.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        return None

    def remember(self, t: torch.Tensor, where: str) -> None:
        key = id(t)
        try:
            ref = weakref.ref(t, lambda _r, k=key, o=self.origins: o.pop(k, None))
        except TypeError:
            return
        self.origins[key] = (ref, where)


_STATE: list[VirtualCuda | None] = [None]


class _Pinned:
    """Host memory made with pin_memory=True (a CPU build has none): storages by address, so a view of a
    pinned staging buffer counts as pinned too."""

    def __init__(self):
        self.ptrs: set[int] = set()

    def add(self, t: torch.Tensor) -> None:
        self.ptrs.add(t.untyped_storage().data_ptr())

    def __contains__(self, t) -> bool:
        return isinstance(t, torch.Tensor) and not _is_v(t) and t.untyped_storage().data_ptr() in self.ptrs


_PINNED = _Pinned()


class VirtualCudaTensor(torch.Tensor):
    """A tensor on the virtual device: metadata says cuda:0, `elem` holds the real CPU values."""
    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        r = torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(),
                                                storage_offset=elem.storage_offset(), dtype=elem.dtype,
                                                layout=elem.layout, device=DEVICE, requires_grad=False)
        r.elem = elem
        return r

    def __repr__(self, **kwargs) -> str:  # printing is not a sync worth counting
        return f"VirtualCudaTensor({self.elem!r}, device='{DEVICE}')"

    def __tensor_flatten__(self):  # a traceable wrapper: Module.to("cuda") swaps parameters in place
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return VirtualCudaTensor(inner["elem"])

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if args and isinstance(args[0], VirtualCudaTensor):
            out = _special(getattr(func, "__name__", ""), args, kwargs)
            if out is not _NOTHING:
                return out
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


_NOTHING = object()


def _aten(name: str, *args, **kwargs):
    """An aten op straight to the dispatcher (no torch-function layer: no recursion into _special)."""
    with torch._C.DisableTorchFunction():
        return getattr(torch.ops.aten, name).default(*args, **kwargs)


def _special(name: str, args, kwargs):
    """Tensor methods of a virtual-CUDA tensor whose C++ binding would touch a real CUDA device (a device
    guard, autograd metadata, the numpy bridge): answered here; _NOTHING for every other method."""
    self = args[0]
    if name in ("data_ptr", "untyped_storage", "_typed_storage", "storage", "_cdata_ptr"):
        return getattr(self.elem, name)(*args[1:], **kwargs)
    if name == "is_pinned":
        return False
    if name == "requires_grad_":  # inference only: autograd's CUDA metadata needs a real device
        return self
    if name in ("numpy", "__array__"):
        raise TypeError(f"can't convert {DEVICE} device type tensor to numpy. Use Tensor.cpu() to copy "
                        f"the tensor to host memory first.")
    if name == "tolist":  # one device-to-host copy (counted there), then the host list
        return _aten("_to_copy", self, device=torch.device("cpu")).tolist()
    if name == "__repr__":
        return self.__repr__()
    if name in SCALARS:  # read through the dispatcher (counted there)
        return SCALARS[name](_aten("_local_scalar_dense", self))
    if name == "copy_":
        nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
        return _aten("copy_", self, args[1], non_blocking=nb)
    if name == "contiguous":
        fmt = kwargs.get("memory_format", args[1] if len(args) > 1 else torch.contiguous_format)
        return self if self.elem.is_contiguous(memory_format=fmt) else _aten("clone", self, memory_format=fmt)
    if name in CASTS:
        return self if self.dtype == CASTS[name] else _aten("_to_copy", self, dtype=CASTS[name])
    if name == "cpu":
        return _aten("_to_copy", self, device=torch.device("cpu"))
    if name == "new_tensor":
        kw = dict(kwargs)
        kw.setdefault("dtype", self.dtype)
        kw["device"] = DEVICE
        return torch.tensor(args[1], **kw)
    if name == "nonzero":
        out = _aten("nonzero", self)
        return out.unbind(1) if kwargs.get("as_tuple") or (len(args) > 1 and args[1]) else out
    if name in ("__getitem__", "__setitem__"):  # their C++ binding takes a CUDA device guard
        return _item(self, name, args[1], args[2] if len(args) > 2 else None)
    return _NOTHING


def _item(self: "VirtualCudaTensor", name: str, idx, value):
    """Indexing (x[idx], x[idx] = value) on the CPU values, with CUDA's rules: host index tensors are
    allowed (copied up), a device boolean mask is a sync (its nonzero count), values assigned through
    advanced indexing must be on the device or 0-dim."""
    state = _STATE[0]
    parts = idx if isinstance(idx, tuple) else (idx,)
    tensors = [t for t in tree_flatten(list(parts))[0] if isinstance(t, torch.Tensor)]
    if state is not None and any(_is_v(t) and t.dtype in (torch.bool, torch.uint8) for t in tensors):
        state.sync("dynamic", f"{'index' if name == '__getitem__' else 'index_put_'} (boolean mask)")
    uidx = tuple(_unwrap(p) if isinstance(p, torch.Tensor) else p for p in parts)
    uidx = uidx if isinstance(idx, tuple) else uidx[0]
    if name == "__getitem__":
        with _disable_current_modes():  # below the capture checker's view: it is told of the result
            out = VirtualCudaTensor(self.elem[uidx])
        _made(out)
        return out
    if isinstance(value, torch.Tensor) and not _is_v(value) and value.dim() > 0 and tensors:
        _mismatch(state, "index_put_", value)
    if state is not None and isinstance(value, torch.Tensor) and not _is_v(value) and value.dim() > 0:
        state.upload(value in _PINNED, False)
    with _disable_current_modes():
        self.elem[uidx] = _unwrap(value)
    return None


def _made(t: torch.Tensor) -> None:
    """Tell an active capture checker that an indexing result was made inside its region (the checker
    only sees aten ops, and indexing runs below it here)."""
    from decoding.fast.capture_check import _Watch, _key
    for mode in _get_current_dispatch_mode_stack():
        if isinstance(mode, _Watch):
            k = _key(t)
            if k is not None and k not in mode.static:
                mode.made.add(k)


def _is_v(x) -> bool:
    return isinstance(x, VirtualCudaTensor)


def _unwrap(x):
    return x.elem if isinstance(x, VirtualCudaTensor) else x


def _cuda(dev) -> bool:
    if dev is None:
        return False
    try:
        return torch.device(dev).type == "cuda"
    except (RuntimeError, TypeError):
        return False


def _wrap(out, by_id: dict):
    """Wrap op results: an in-place result is its input's wrapper again (identity kept)."""
    def w(x):
        if isinstance(x, torch.Tensor) and not _is_v(x):
            same = by_id.get(id(x))
            return same if same is not None else VirtualCudaTensor(x)
        return x
    return tree_map(w, out)


def _mismatch(state: VirtualCuda | None, op: str, host: torch.Tensor) -> None:
    made = state.made_at(host) if state is not None else None
    raise DeviceMismatch(
        f"Expected all tensors to be on the same device, but found at least two devices, {DEVICE} and cpu! "
        f"(op aten.{op}, a {tuple(host.shape)} {str(host.dtype).replace('torch.', '')} host tensor) at {_where()}"
        + (f"; the host tensor was made at {made}" if made else ""))


def _check(state: VirtualCuda | None, op: str, func, args, kwargs) -> None:
    """CUDA's device rule: every tensor input on the device, except 0-dim host tensors (scalars), copies,
    and host index tensors of index / index_put."""
    if op in MIXED:
        return
    schema = func._schema
    for i, a in enumerate(schema.arguments):
        v = args[i] if i < len(args) else kwargs.get(a.name)
        ts = [v] if isinstance(v, torch.Tensor) else [x for x in v if isinstance(x, torch.Tensor)] \
            if isinstance(v, (list, tuple)) else []
        for t in ts:
            if _is_v(t) or t.dim() == 0:
                continue
            if op in CPU_INDICES and a.name == "indices":
                continue
            _mismatch(state, op, t)


def _dispatch(func, args, kwargs):
    """Run one aten op on the virtual device: check devices, count host reads, run on the CPU values."""
    state = _STATE[0]
    op = func.__name__.split(".")[0]
    flat = tree_flatten((args, kwargs))[0]
    has_v = any(_is_v(a) for a in flat)
    to_dev = kwargs.get("device")
    kwargs = dict(kwargs)
    if "device" in kwargs and _cuda(to_dev):
        kwargs["device"] = torch.device("cpu")
    if kwargs.get("pin_memory"):
        kwargs["pin_memory"] = False
    if has_v and state is not None and any(isinstance(a, torch.Tensor) and not _is_v(a) and a.dim() > 0
                                           for a in flat):  # a host tensor among the inputs: is it allowed?
        _check(state, op, func, args, kwargs)
    # host reads
    if has_v and state is not None:
        if op in READS:
            state.sync("read", READS[op])
        elif op in DYNAMIC or (op == "repeat_interleave" and kwargs.get("output_size") is None
                               and any(isinstance(a, torch.Tensor) for a in flat[1:])):
            state.sync("dynamic", op)
        elif op in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
                isinstance(t, torch.Tensor) and t.dtype == torch.bool and t.dim() > 0
                for t in tree_flatten(args[1])[0]):
            state.sync("dynamic", op + " (boolean mask)")
        elif op == "_to_copy" and _is_v(args[0]) and "device" in kwargs and not _cuda(to_dev) \
                and to_dev is not None:
            state.sync("copy", "to host")
        elif op in ("copy_", "copy") and not _is_v(args[0]) and _is_v(args[1]):
            state.sync("copy", "copy_ to host")
    if state is not None and op in ("copy_", "copy") and _is_v(args[0]) and not _is_v(args[1]) \
            and args[1].dim() > 0:
        state.upload(args[1] in _PINNED, bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False)))
    if state is not None and op == "_to_copy" and not _is_v(args[0]) and _cuda(to_dev):
        state.upload(args[0] in _PINNED, bool(kwargs.get("non_blocking", False)))
    by_id = {id(a.elem): a for a in flat if _is_v(a)}
    out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
    if op == "_to_copy":
        return _wrap(out, by_id) if (_cuda(to_dev) or (to_dev is None and _is_v(args[0]))) else out
    if op in ("copy_", "copy"):
        return args[0] if op == "copy_" else (_wrap(out, by_id) if _is_v(args[0]) else out)
    if has_v or _cuda(to_dev):
        return _wrap(out, by_id)
    return out


class _Dispatch(TorchDispatchMode):
    """Factories with a cuda device that a composite op makes (below the Python API), and ops between host
    tensors (run as they are)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _cuda(kwargs.get("device")) or any(_is_v(a) for a in tree_flatten((args, kwargs))[0]):
            return _dispatch(func, args, kwargs)
        return func(*args, **kwargs)


def _parse_to(args, kwargs):
    """(device, dtype, non_blocking, copy) of a Tensor.to call."""
    copy = kwargs.get("copy", False)
    kw = {k: v for k, v in kwargs.items() if k != "copy"}
    rest = list(args[1:])
    if len(rest) >= 4 and not isinstance(rest[0], torch.dtype):
        copy, rest = rest[3], rest[:3]  # to(device, dtype, non_blocking, copy)
    elif len(rest) >= 2 and isinstance(rest[0], torch.dtype) and len(rest) >= 3:
        copy, rest = rest[2], rest[:2]  # to(dtype, non_blocking, copy)
    device, dtype, non_blocking, _ = torch._C._nn._parse_to(*rest, **kw)
    return device, dtype, non_blocking, copy


class _Function(TorchFunctionMode):
    """The Python API: factories and .to() / .cuda() with a cuda device, pinned memory on a CPU build."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        state = _STATE[0]
        src = args[0] if args else None
        if _is_v(src):
            out = _special(name, args, kwargs)
            if out is not _NOTHING:
                return out
        if name in ("to", "cuda") and isinstance(src, torch.Tensor):
            if name == "cuda":
                device, dtype, non_blocking, copy = DEVICE, None, kwargs.get("non_blocking", False), False
            else:
                device, dtype, non_blocking, copy = _parse_to(args, kwargs)
            if _cuda(device) and not _is_v(src):
                if state is not None:
                    state.upload(src in _PINNED, bool(non_blocking))
                return VirtualCudaTensor(src.to(dtype=dtype or src.dtype, copy=True))
            if _cuda(device) and _is_v(src):
                return src if (dtype is None or dtype == src.dtype) and not copy else \
                    src.to(dtype=dtype or src.dtype, copy=copy)
        if name == "pin_memory" and isinstance(src, torch.Tensor) and not _is_v(src):
            out = src.clone()
            _PINNED.add(out)
            return out
        if name == "is_pinned" and isinstance(src, torch.Tensor) and not _is_v(src):
            return src in _PINNED
        dev = kwargs.get("device") if name != "_parse_to" else None  # Module.to parses its device here
        pinned = bool(kwargs.get("pin_memory"))
        if _cuda(dev) or pinned:
            kwargs = dict(kwargs)
            if _cuda(dev):
                kwargs["device"] = "cpu"
            kwargs.pop("pin_memory", None)
            out = func(*args, **kwargs)
            if pinned:
                _PINNED.add(out)
            if _cuda(dev):
                if state is not None and name in ("tensor", "as_tensor"):
                    state.upload(False, False)  # Python data copied to the device: a blocking upload
                return tree_map(lambda x: VirtualCudaTensor(x) if isinstance(x, torch.Tensor) and not _is_v(x)
                                else x, out)
            return out
        out = func(*args, **kwargs)
        if state is not None and name in FACTORIES and isinstance(out, torch.Tensor) and not _is_v(out):
            state.remember(out, _where())
        return out


class _Event:
    """torch.cuda.Event on the virtual device: a host timestamp at record()."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.t: float | None = None

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:  # waits for one event, not a stream drain (no read of device data)
        pass

    def query(self) -> bool:
        return True

    def wait(self, stream=None) -> None:
        pass

    def elapsed_time(self, end: "_Event") -> float:
        return ((end.t or 0.0) - (self.t or 0.0)) * 1e3


class _Stream:
    def __init__(self, device=None, priority: int = 0):
        self.device = torch.device(DEVICE if device is None else device)

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def synchronize(self) -> None:
        _sync_all()

    def query(self) -> bool:
        return True

    def record_event(self, event=None):
        event = event or _Event()
        event.record(self)
        return event


def _sync_all(device=None) -> None:
    if _STATE[0] is not None:
        _STATE[0].sync("synchronize", "torch.cuda.synchronize")


def _set_debug(mode) -> None:
    if _STATE[0] is not None:
        _STATE[0].debug_mode = {"default": 0, "warn": 1, "error": 2}.get(mode, mode) if isinstance(mode, str) \
            else int(mode)


_STREAM = _Stream()


def _runtime() -> dict:
    """The torch.cuda functions the engine, the profiler and the capture checker call, for one device."""
    return {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "get_device_name": lambda device=None: NAME, "get_device_capability": lambda device=None: (9, 0),
        "synchronize": _sync_all, "Event": _Event, "Stream": _Stream,
        "current_stream": lambda device=None: _STREAM, "default_stream": lambda device=None: _STREAM,
        "stream": lambda s=None: contextlib.nullcontext(s), "device": lambda d=None: contextlib.nullcontext(d),
        "set_device": lambda d=None: None, "is_initialized": lambda: True, "init": lambda: None,
        "reset_peak_memory_stats": lambda device=None: None, "max_memory_allocated": lambda device=None: 0,
        "memory_allocated": lambda device=None: 0, "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0, "empty_cache": lambda: None,
        "set_sync_debug_mode": _set_debug,
        "get_sync_debug_mode": lambda: _STATE[0].debug_mode if _STATE[0] is not None else 0,
    }


def _in_new_thread(frame, event, arg) -> None:
    """First event of a thread started inside virtual_cuda(): the device's modes for that thread's life
    (torch keeps mode stacks per thread)."""
    sys.setprofile(None)
    if _STATE[0] is not None:
        _Function().__enter__()
        _Dispatch().__enter__()


def active() -> VirtualCuda | None:
    """The running virtual device's record, or None outside virtual_cuda()."""
    return _STATE[0]


@contextlib.contextmanager
def virtual_cuda(graphs: bool = True):
    """Within the block "cuda" is the virtual device (see the module docstring); yields its VirtualCuda
    record (syncs, uploads). graphs: static caches capture with the emulated CUDA graph (graphs.py; a
    real CUDAGraph needs a real device). Not re-entrant; torch.cuda is restored afterwards."""
    from decoding.fast.graphs import emulated_graphs
    if torch.cuda.is_available() and _STATE[0] is None and not getattr(torch.cuda, "_virtual", False):
        raise RuntimeError("a real CUDA device is present: run on it instead of the virtual one")
    if _STATE[0] is not None:
        raise RuntimeError("virtual_cuda() is already active")
    state = VirtualCuda()
    saved = {k: getattr(torch.cuda, k, None) for k in _runtime()}
    _STATE[0] = state
    torch._C._ensureCUDADeviceGuardSet()  # a no-op CUDA device guard on a CPU build (as FakeTensorMode does)
    try:
        for k, v in _runtime().items():
            setattr(torch.cuda, k, v)
        torch.cuda._virtual = True
        threading.setprofile(_in_new_thread)  # threads started in the block (the app's run worker) see it too
        with _Function(), _Dispatch(), (emulated_graphs() if graphs else contextlib.nullcontext()):
            yield state
    finally:
        threading.setprofile(None)
        for k, v in saved.items():
            if v is None:
                delattr(torch.cuda, k)
            else:
                setattr(torch.cuda, k, v)
        torch.cuda._virtual = False
        _STATE[0] = None


def to_host(x):
    """The CPU values of a (possibly nested) virtual-CUDA result, without counting a sync (for tests)."""
    return tree_map(lambda t: t.elem if _is_v(t) else t, x)
