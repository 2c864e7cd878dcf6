"""Capture safety, checked on any device (CPU CI included): run a bucket's step exactly as graphs.py
captures it (StaticKV._forward on the fixed buffers at the bucket's shapes, GraphReplay.bucket_args) under
a TorchDispatchMode that sees every aten op, and report what breaks or silently corrupts a CUDA graph:

  sync        a host read inside the region (aten.item / _local_scalar_dense / is_nonzero / equal, a
              Python .tolist() / .numpy() / int() / bool()): capture raises, or the graph replays a value
              read once at capture time
  dynamic     an op whose output shape depends on values (nonzero, masked_select, unique, boolean
              indexing, repeat_interleave without output_size, bincount): a sync, and a shape baked in
  host-data   a tensor made from Python data inside the region (torch.tensor -> aten.lift_fresh): its
              values are baked into the graph at capture
  host-tensor an op output on another device than the cache's (a CPU tensor on a CUDA path): a pageable
              copy inside capture (only visible where the cache is not on the CPU: on CUDA, or on the
              virtual CUDA device of decoding/testing/virtual_cuda.py in CI)
  rng         a random op: replay repeats the captured draws unless the generator is registered with
              the graph (the default CUDA generator is; an explicit one is not)
  foreign     a tensor read (or written) inside the region that is neither a fixed buffer (io, mask,
              KV storage), a model parameter / buffer, nor made inside the region: its address is baked
              into the graph, and the next step's new tensor is never seen by a replay
  output      a region output that is not a fixed buffer: it lives in the graph's memory pool and is
              overwritten by the next replay (fine when read and copied at once, as static_cache does)

Findings carry the op and the innermost caller outside torch (file:line). ALLOWED lists what is expected,
with the reason; `unexplained()` is the rest (tests/test_capture_safety.py expects none for every method).
On CUDA, check_bucket also runs the region under torch.cuda.set_sync_debug_mode("warn") and reports each
warning as a sync. What this cannot see: kernel-level hazards (stream ordering, allocator aliasing
across captures sharing a pool, a backend choosing another kernel inside capture) and Python side
effects of the region (attributes set while capturing are not set again by a replay).

Use: `with checking() as report: generate(...)` (every bucket a run uses is checked once per cache, the
first time it runs; the report maps bucket names to findings), or check_callable(fn, static, device).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import warnings

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

SYNC_OPS = {"item", "_local_scalar_dense", "is_nonzero", "equal", "allclose"}
DYNAMIC_OPS = {"nonzero", "nonzero_numpy", "argwhere", "masked_select", "unique", "_unique", "_unique2",
               "unique_dim", "unique_consecutive", "bincount", "masked_scatter_backward"}
RNG_OPS = {"bernoulli", "bernoulli_", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like",
           "randperm", "multinomial", "normal", "normal_", "uniform_", "exponential_", "random_", "native_dropout",
           "poisson", "geometric_", "log_normal_", "cauchy_", "_fused_dropout", "rrelu_with_noise"}
PY_READS = {"tolist", "numpy", "__array__", "__int__", "__float__", "__bool__", "__index__", "item"}
# (kind, op) -> why it is fine in this engine
ALLOWED = {
    ("output", "logits"): "graph output in the pool: static_cache._step copies it to a fresh float32 tensor "
                          "right after the replay, before any other replay",
    ("output", "hidden"): "graph output in the pool: StaticKV.step clones the rows it returns right after "
                          "the replay",
}
_TORCH = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.abspath(__file__)
_DEVICE = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "testing", "virtual_cuda.py")  # the CPU stand-in
# for CUDA (a test device, decoding/testing/): not a caller
_ACTIVE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("decodescope_capture_check", default=None)


def _where() -> str:
    """The innermost caller outside torch and this file: where the op came from."""
    f = sys._getframe(2)
    while f is not None and (f.f_code.co_filename.startswith(_TORCH)
                             or os.path.abspath(f.f_code.co_filename) in (_HERE, _DEVICE)
                             or "/torch/" in f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return "?"
    parts = f.f_code.co_filename.replace(os.sep, "/").split("/")
    return f"{'/'.join(parts[-2:])}:{f.f_lineno}"


def _key(t: torch.Tensor):
    try:
        return (t.device.type, t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None


class _Watch(TorchDispatchMode):
    def __init__(self, static: set, device: torch.device, findings: list):
        super().__init__()
        self.static, self.device, self.findings = static, torch.device(device), findings
        self.made: set = set()
        self.foreign: set = set()

    def add(self, kind: str, op: str, detail: str = "") -> None:
        f = {"kind": kind, "op": op, "where": _where(), "detail": detail}
        if not any(g["kind"] == kind and g["op"] == op and g["where"] == f["where"] for g in self.findings):
            self.findings.append(f)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        if name in SYNC_OPS:
            self.add("sync", name)
        if name in DYNAMIC_OPS or (name == "repeat_interleave" and kwargs.get("output_size") is None
                                   and any(isinstance(a, torch.Tensor) for a in flat[1:])):
            self.add("dynamic", name)
        if name in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
                t.dtype == torch.bool for t in tensors[1:]):
            self.add("dynamic", name, "boolean index")
        if name in RNG_OPS:
            self.add("rng", name, "explicit generator" if kwargs.get("generator") is not None else "default generator")
        if name in ("lift_fresh", "lift_fresh_copy"):
            self.add("host-data", name, "torch.tensor(...) of Python data inside the region")
        schema = func._schema
        for i, a in enumerate(schema.arguments):
            v = args[i] if i < len(args) else kwargs.get(a.name)
            ts = [v] if isinstance(v, torch.Tensor) else [x for x in (v or []) if isinstance(x, torch.Tensor)] \
                if isinstance(v, (list, tuple)) else []
            for t in ts:
                k = _key(t)
                if k is None or k in self.static or k in self.made or (t.dim() == 0 and t.device.type == "cpu"):
                    continue
                if k not in self.foreign:
                    self.foreign.add(k)
                    write = a.alias_info is not None and a.alias_info.is_write
                    self.add("foreign", name, f"{'writes' if write else 'reads'} a {tuple(t.shape)} "
                                              f"{str(t.dtype).replace('torch.', '')} tensor made outside")
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                k = _key(t)
                if k is not None and k not in self.static:
                    self.made.add(k)
                if t.device.type != self.device.type and not (t.dim() == 0 and t.device.type == "cpu"):
                    self.add("host-tensor", name, f"output on {t.device}, the path is on {self.device}")
        return out


class _PyReads(TorchFunctionMode):
    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in PY_READS:
            self.watch.add("sync", name, "Python read of a tensor value")
        return func(*args, **(kwargs or {}))


def check_callable(fn, static: list[torch.Tensor], device, outputs: dict[str, int] | None = None) -> tuple:
    """Run fn() as a capture would, under the checker. static: the tensors a graph may keep addresses of
    (fixed buffers, parameters). outputs names fn's tensor outputs by position (for the allow-list).
    Returns (fn's result, findings)."""
    findings: list[dict] = []
    keys = {k for k in map(_key, static) if k is not None}
    watch = _Watch(keys, device, findings)
    cuda = torch.device(device).type == "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with _PyReads(watch), watch:
                out = fn()
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    for w in caught:
        # set_sync_debug_mode's own first-call notice ("... is a prototype feature ...") names no operation
        if "synchroniz" in str(w.message) and "prototype feature" not in str(w.message):
            findings.append({"kind": "sync", "op": "cuda sync debug", "where": f"{w.filename}:{w.lineno}",
                             "detail": str(w.message).splitlines()[0][:120]})
    names = list((outputs or {}).items())
    flat = tree_flatten(out)[0]
    for i, t in enumerate(flat):
        if isinstance(t, torch.Tensor) and _key(t) not in keys:
            label = next((n for n, j in names if j == i), f"output {i}")
            findings.append({"kind": "output", "op": label, "where": "region result",
                             "detail": f"{tuple(t.shape)} allocated inside the region"})
    return out, findings


def static_tensors(kv) -> list[torch.Tensor]:
    """What a StaticKV's graphs may hold addresses of: KV storage, io and mask buffers, the model's
    parameters and buffers."""
    model = kv._model()
    ts = list(kv.tensors()) + [kv.io, kv.mask]
    if model is not None:
        ts += list(model.parameters()) + list(model.buffers())
    return ts


def check_bucket(kv, key: tuple, name: str | None = None) -> list[dict]:
    """Check one bucket of a StaticKV (once per cache while checking() is active): the region its graph
    captures, run on the fixed buffers. Findings go to the active report under "<bucket>"."""
    report = _ACTIVE.get()
    seen = report.setdefault("_seen", set()) if report is not None else set()
    if (id(kv), key) in seen:
        return []
    seen.add((id(kv), key))
    hid = key[2] if len(key) > 2 else None
    args = kv.bucket_args(key)  # made before the region, as _fixed makes them before a capture
    _, findings = check_callable(lambda: kv._forward(*args, None, hid), static_tensors(kv),
                                 kv.device, {"logits": 0, "hidden": 1})
    if report is not None:
        name = name or str(key)
        report.setdefault("buckets", {}).setdefault(name, []).extend(
            f for f in findings if f not in report["buckets"].get(name, []))
    return findings


def active() -> bool:
    return _ACTIVE.get() is not None


@contextlib.contextmanager
def checking():
    """Within the block every bucket a static cache runs on the fixed path is checked once per cache;
    yields the report: {"buckets": {name: [finding, ...]}}."""
    report: dict = {"buckets": {}}
    token = _ACTIVE.set(report)
    try:
        yield report
    finally:
        _ACTIVE.reset(token)
        report.pop("_seen", None)


def unexplained(findings: list[dict]) -> list[dict]:
    """Findings not in ALLOWED (kind, op)."""
    return [f for f in findings if (f["kind"], f["op"]) not in ALLOWED]


def summary(report: dict) -> dict:
    """Per bucket: counts of unexplained findings and the allowed ones, for reports."""
    out = {}
    for b, fs in sorted(report.get("buckets", {}).items()):
        bad = unexplained(fs)
        out[b] = {"unexplained": [f"{f['kind']} {f['op']} at {f['where']} {f['detail']}".strip() for f in bad],
                  "allowed": sorted({f"{f['kind']} {f['op']}" for f in fs if f not in bad})}
    return out
