"""A skinny-GEMM kernel for fp32 CPU decoding steps (the "packed" weight layout, layout.py).

Why: speculative and lookahead decoding pay off when verifying k rows costs about what one row costs, as on
a GPU, where a decoding step is bound by reading the weights. On CPU, MKL's GEMM for 2-16 rows is neither
bandwidth- nor compute-bound: on the 2-core AMD EPYC dev box (1 thread, the embedded 10M model's 43
linears, 40 MB, weights cold as in a real step) 8 rows cost 2.1 single-row passes. decoding/fast/cpu_gemm.cpp
streams each weight once, from panels packed at load time, and keeps the rows' sums in registers: 2.5 /
2.7 / 3.5 ms for 1 / 4 / 8 rows against MKL's 2.7 / 4.9 / 5.6 on the column layout; with 2 threads 1.5 /
1.7 / 2.1 against 2.6 / 4.7 / 5.0 (bench/results/cpu-gemm.md, `python bench/kernels/bench_cpu_gemm.py
[--threads 2]`). Calls with more rows than ROWS_MAX (long prefills) stay with MKL.

The kernel is built from source once (torch.utils.cpp_extension: a C++ compiler and ninja; ~30 s): ahead of
time by `python -m decoding.fast.cpu_gemm` or the app's start (build_in_background), else on first use. The
build is cached under a name made from a hash of everything that changes the binary or may not share it —
the source, the flags, torch's version, the compiler, the Python ABI and the interpreter's prefix (a venv):
build_name() — so an installed copy and a checkout of the same source in one environment share one build,
and another venv never waits on this one's. A build holds an OS lock (released by the kernel when its
process dies, however it dies): whoever holds it knows that a torch `lock` file left in the folder is stale
(a build killed half-way) and removes it, and a second process waits for a live build at most
DECODESCOPE_KERNEL_WAIT_S seconds (default 300), saying whom it waits for. On a machine without AVX2+FMA,
without a compiler, or with DECODESCOPE_CPU_GEMM=0, `kernel()` is None and load() keeps the column layout. Values: a different summation order from MKL's (relative
difference ~5e-7, like MKL's own between row counts); every output is one FMA chain over k, so a row's
result is bitwise the same whatever other rows share the call.

Block storage: a weight that is exactly de-quantised ggml blocks (blocks.py: Q4_1 as "q4_1"; Q8_0, Q4_0, Q5_0 as
"q8_0"; the K-quants and Q5_1 as "k8"; the default model, converted from a GGUF file, is all blocks) is packed as
those blocks and de-quantised in registers: bitwise the same weights and the same FMA chains, so block_linear's
results equal packed_linear's bit for bit, while a step reads ~96 MB instead of 538 MB for SmolLM2-135M
(docs/cpu-kernel.md: a 1-row step 2-3x cheaper on the AVX-512 Intel box). DECODESCOPE_CPU_BLOCKS=0 keeps fp32 panels. AVX2+FMA+F16C is the baseline; where torch
reports AVX-512 the kernel runs its AVX-512 variant (select_isa; measured faster there at every row count).

The int8 kernel (cpu_int8.cpp; `kernel="int8"`, DECODESCOPE_CPU_KERNEL=int8, the CLI's --kernel int8): block
weights packed in the int8 kernel's order (pack_blocks_i8), each row's activations quantised per 32-block to
int8 and the block dot products taken in int32 (VNNI, else AVX2), combined in one fixed order: a row's output is
bitwise independent of the row count and the instruction set, so every method returns exactly this mode's greedy
tokens, but that greedy is not HF's fp32 greedy (the activations are rounded). fp32-panel weights keep the fp32
kernel in either mode (each output one FMA chain: batch-invariant too); coverage() says how many matrices and
bytes each kernel streams, and an int8 run whose int8 kernel would stream under INT8_WARN_SHARE of the bytes says
so on stderr. KERNEL_EXACT says what "exact" means in each mode.

Fused siblings: the Linears a decoder layer calls on one tensor (q/k/v, gate/up) run as one fused_linear call
on their concatenated panels (FusedLinears): one dispatch instead of 3 / 2, each output bitwise its own call's.
DECODESCOPE_CPU_FUSE=0 keeps one call per Linear.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import math
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from . import blocks

NAME = "decodescope_cpu_gemm"  # the stem of the extension's name (and its build folder under torch_extensions)
SOURCE = Path(__file__).with_suffix(".cpp")
SOURCES = (SOURCE, SOURCE.with_name("cpu_step.cpp"), SOURCE.with_name("cpu_int8.cpp"))  # one extension: the Linears, the
# whole step (cpu_step.py), the int8 kernel
CFLAGS = ("-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp")
LDFLAGS = ("-fopenmp",)  # OpenMP: parallel_for
# Said on every stream when a build starts (a first run was silent for ~73 s on a busy machine): what is
# compiled and that it happens once per machine; a terminal also sees the seconds go by (building()).
BUILDING = ("compiling the CPU kernel (decoding/fast/cpu_gemm.cpp, C++ for this CPU) once per machine and Python "
            "environment, 30-90 s; later runs load it")
ROWS_MAX = 256  # rows per call up to which the kernel was measured faster than MKL (1-2 threads); more: MKL
MEMORY_SHARE = 0.25  # pack only while the panels (a second copy of the linear weights) fit in this share of RAM
OWNER = "decodescope.owner"  # in the build folder: flock'd by the process building, which writes its pid there
WAIT_S = 300.0  # the longest a process waits for another's build (DECODESCOPE_KERNEL_WAIT_S) before using MKL
SAY_AFTER_S = 2.0  # a wait longer than this says whom it waits for
INT8_KINDS = ("q4_1", "q8_0", "k8")  # the block storages the int8 kernel runs (all: float32 panels stay fp32)
INT8_WARN_SHARE = 0.5  # an int8 run whose int8 kernel streams less than this share of the weight bytes says so
KERNELS = ("fp32", "int8")  # what the block weights are multiplied with (DECODESCOPE_CPU_KERNEL, default fp32)
KERNEL_EXACT = {  # what a run's "exact" means under each kernel (trace config, CLI, bench)
    "fp32": "every method returns HF's float32 greedy tokens (fp32 FMAs on the exact de-quantised weights)",
    "int8": "every method returns this int8 mode's own greedy tokens, bitwise (int8 activations, int32 block "
            "sums, one combining order for any row count); that greedy may differ from HF's float32 greedy",
}


@functools.lru_cache(maxsize=1)
def compiler_id() -> str:
    """The C++ compiler torch builds with ($CXX or c++): its resolved path and its --version line, so a new
    compiler gets a new build. '' where it cannot be run (the build will fail and say why)."""
    from torch.utils.cpp_extension import get_cxx_compiler
    cxx = get_cxx_compiler()
    path = shutil.which(cxx) or cxx
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return path
    return f"{os.path.realpath(path)} {out.strip().splitlines()[0] if out.strip() else ''}"


def python_abi() -> str:
    """What a compiled module is tied to on the Python side: implementation, version, ABI flags, machine."""
    return f"{sys.implementation.cache_tag}{getattr(sys, 'abiflags', '')}-{platform.machine()}"


def build_name(source: bytes | str | Path | tuple = SOURCES, torch_version: str | None = None, *,
               compiler: str | None = None, abi: str | None = None, prefix: str | None = None) -> str:
    """NAME + a hash of everything that changes the binary or who may share it: the source text, the compiler
    flags, torch's version, the compiler, the Python ABI and the interpreter's prefix (each venv builds its
    own, since the build folder is per user, not per environment). The same source from any path (an
    installed copy, a checkout) in one environment gives the same name, so one build serves both; an edit,
    a new torch or compiler gives a new name (a new build) instead of rebuilding the old one back and forth."""
    h = hashlib.sha256()
    for part in source if isinstance(source, tuple) else (source,):
        h.update(part if isinstance(part, bytes) else Path(part).read_bytes() if isinstance(part, Path)
                 else part.encode())
    h.update(f"|{' '.join(CFLAGS)}|{' '.join(LDFLAGS)}|torch={torch_version or torch.__version__}".encode())
    h.update(f"|cxx={compiler if compiler is not None else compiler_id()}".encode())
    h.update(f"|abi={abi or python_abi()}|prefix={prefix or os.path.realpath(sys.prefix)}".encode())
    return f"{NAME}_{h.hexdigest()[:16]}"


def build_root() -> Path:
    """Where builds go: $TORCH_EXTENSIONS_DIR, else torch's per-user cache folder."""
    from torch.utils.cpp_extension import get_default_build_root
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())


def built(name: str, root: Path) -> bool:
    return any((root / name).glob(f"{name}*.so"))


def _say(text: str) -> None:
    print(f"decodescope: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def building(first: bool, every_s: float = 1.0):
    """Around a compile: BUILDING once (first: nothing built yet; loading a built kernel says nothing), and
    on a terminal the seconds so far, rewritten in place until it ends."""
    if not first:
        yield
        return
    tty = sys.stderr.isatty()
    print(f"decodescope: {BUILDING}" + ("" if tty else "..."), file=sys.stderr, end="" if tty else "\n", flush=True)
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not done.wait(every_s):
            print(f"\rdecodescope: {BUILDING}... {time.monotonic() - start:.0f} s", file=sys.stderr, end="", flush=True)
    ticker = threading.Thread(target=tick, daemon=True) if tty else None
    if ticker:
        ticker.start()
    try:
        yield
    finally:
        done.set()
        if ticker:
            ticker.join()
            print(f"\rdecodescope: {BUILDING}: done in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def build_lock(folder: Path, wait_s: float | None = None):
    """Hold the build folder's OS lock (flock: the kernel drops it when the holder dies, however it dies).
    Yields True once held, after removing a torch `lock` file found there: only a holder of this lock runs a
    build, so such a file is left by a build that was killed half-way, and torch would wait on it forever.
    Yields False after waiting wait_s (DECODESCOPE_KERNEL_WAIT_S, default WAIT_S) for a live holder, having
    said on stderr whom it waits for."""
    if wait_s is None:
        wait_s = float(os.environ.get("DECODESCOPE_KERNEL_WAIT_S") or WAIT_S)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / OWNER, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        start, said = time.monotonic(), False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited >= wait_s:
                    _WAITED.append(f"waited {waited:.0f} s for {_owner(fd)}, which is building it in {folder}")
                    yield False
                    return
                if not said and waited >= min(SAY_AFTER_S, wait_s / 2):
                    _say(f"waiting for {_owner(fd)}, which is building the CPU kernel in {folder} "
                         f"(at most {wait_s:.0f} s more; DECODESCOPE_KERNEL_WAIT_S)...")
                    said = True
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        stale = folder / "lock"
        if stale.exists():
            stale.unlink(missing_ok=True)
            _say(f"removed {stale}, left by a build of the CPU kernel that was stopped half-way; building again")
        yield True
    finally:
        os.close(fd)  # closing the descriptor drops the flock


def _owner(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process"


_KERNEL_LOCK = threading.Lock()  # one build per process (the app's background build and a first run)


def kernel():
    """torch.ops.decodescope (pack_panels, packed_linear) once built and loaded, or None where it cannot run
    here (why_not() says why)."""
    with _KERNEL_LOCK:
        if os.environ.get("DECODESCOPE_CPU_GEMM", "1") == "0":  # read each call: _kernel's answer is cached
            return None                                         # for the process, the switch is not
        return _kernel()


def staged_sources(folder: Path) -> list[str]:
    """The sources as copies inside the build folder, rewritten only when their bytes differ. torch's
    build.ninja names its sources by path: two checkouts of the same source (a clone, a copy, the repository)
    loading from their own paths would each rebuild the shared build in turn, minutes each while holding its
    lock; from one path, a second load is ninja's no-op."""
    out = []
    for src in SOURCES:
        dst = folder / "src" / src.name
        data = src.read_bytes()
        if not dst.is_file() or dst.read_bytes() != data:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
        out.append(str(dst))
    return out


@functools.lru_cache(maxsize=1)
def _kernel():
    if why_not():
        return None
    from torch.utils.cpp_extension import load
    name = build_name()
    folder = build_root() / name
    try:
        with build_lock(folder) as held:
            if not held:
                _FAILED.append(_WAITED[-1])
                _say(f"CPU GEMM kernel unavailable: {_FAILED[-1]}")
                return None
            with building(not built(name, folder.parent)):
                load(name, staged_sources(folder), extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS),
                     build_directory=str(folder), is_python_module=False, verbose=False)
    except Exception as e:  # noqa: BLE001 - no compiler, no ninja, a failed build, no writable folder: "use MKL"
        first = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        _FAILED.append(f"its build failed ({type(e).__name__}: {first})")
        _say(f"CPU GEMM kernel unavailable: {_FAILED[-1]}")
        return None
    ops = torch.ops.decodescope
    ISA[:] = [ops.select_isa(isa_wanted())]
    if not _REGISTERED:
        for op in ("packed_linear", "block_linear"):
            torch.library.register_fake(f"decodescope::{op}")(
                lambda x, panels, n, bias=None: x.new_empty(*x.shape[:-1], n))
            register_flop_formula(getattr(ops, op))(lambda x, panels, n, *a, **k: 2 * math.prod(x) * n)
        _REGISTERED.append(True)
    return ops


kernel.cache_clear = _kernel.cache_clear  # type: ignore[attr-defined]
kernel.__wrapped__ = _kernel.__wrapped__  # type: ignore[attr-defined]  # tests: one more try, uncached


def build_in_background() -> threading.Thread:
    """Start building (or loading) the kernel now, so that the first run does not wait for it (the app's start)."""
    t = threading.Thread(target=kernel, name="build-cpu-kernel", daemon=True)
    t.start()
    return t


_REGISTERED: list[bool] = []
_WAITED: list[str] = []
_FAILED: list[str] = []
ISA: list[str] = []  # the instruction set the kernel runs with, once loaded ("AVX512" or "AVX2")


def isa_wanted() -> str:
    """AVX-512 where torch finds it usable (CPU and OS; ATEN_CPU_CAPABILITY=avx2 lowers it), measured faster
    here for the block kernel (docs/cpu-kernel.md); else AVX2. The kernel checks the CPU once more itself."""
    return "AVX512" if torch.backends.cpu.get_cpu_capability() == "AVX512" else "AVX2"


def why_not() -> str | None:
    """Why the kernel cannot be used on this machine, or None."""
    if os.environ.get("DECODESCOPE_CPU_GEMM", "1") == "0":
        return "switched off (DECODESCOPE_CPU_GEMM=0)"
    if platform.machine().lower() not in ("x86_64", "amd64") or sys.platform != "linux":
        return f"built for Linux x86-64 only (this is {sys.platform} {platform.machine()})"
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return "this CPU has no AVX2/FMA"
    return _FAILED[0] if _FAILED else None


def kernel_wanted(kernel_name: str | None = None) -> str:
    """The block kernel asked for: kernel_name, else DECODESCOPE_CPU_KERNEL, else fp32; ValueError otherwise."""
    name = kernel_name if kernel_name is not None else os.environ.get("DECODESCOPE_CPU_KERNEL") or "fp32"
    if name not in KERNELS:
        raise ValueError(f"the CPU kernel is one of {', '.join(KERNELS)}, got {name!r}")
    return name


def int8_isa() -> str:
    """The instruction set the int8 kernel runs with here ("AVX512-VNNI" or "AVX2"); needs kernel()."""
    return kernel().int8_isa()


def model_kernel(model: torch.nn.Module) -> str:
    """The kernel a model's Linears run: "int8" where some packed weight is on the int8 kernel (block weights
    packed with kernel int8), else "fp32" (any other model, or int8 asked for a model without block weights)."""
    if getattr(model, "cpu_kernel_", "fp32") != "int8":
        return "fp32"
    return "int8" if any(isinstance(m, PackedLinear) and m.panels.dtype == torch.int8 for m in model.modules()) \
        else "fp32"


def kernel_config(model: torch.nn.Module) -> dict | None:
    """What a trace records about the CPU kernel of a packed model: which one ran (and which was asked for, where
    no weight could take the int8 kernel), on which instruction set, and what "exact" means there; None for a
    model that is not packed."""
    if not any(isinstance(m, PackedLinear) for m in model.modules()):
        return None
    name, asked = model_kernel(model), getattr(model, "cpu_kernel_", "fp32")
    return {"kernel": name, "isa": int8_isa() if name == "int8" else (ISA[0] if ISA else ""),
            "exact": KERNEL_EXACT[name], "streams": coverage(model),
            **({"asked": asked, "why": "no weight is exactly ggml blocks: the int8 kernel runs block weights only"}
               if asked != name else {})}


class PackedLinear(torch.nn.Linear):
    """nn.Linear with the same Parameters (tied weights stay tied) whose fp32 CPU forward of up to ROWS_MAX
    rows runs the packed kernel; anything else (autograd, other dtypes, long prefills) runs F.linear.
    A weight that is exactly de-quantised ggml blocks (blocks.py) is packed as those blocks (`storage` says
    "q4_1" / "q8_0" / "k8", else "fp32"): bitwise the same weights, 5 / 8.5 / 12 bits each to read instead of 32.
    kernel "int8" packs block weights for the int8 kernel instead (cpu_int8.cpp; None: kernel_wanted())."""

    def __init__(self, linear: torch.nn.Linear, use_blocks: bool | None = None, kernel_name: str | None = None):
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self._max_numel = ROWS_MAX * self.in_features
        # False: fp32 panels whatever the weight (the benches' "before"); None: DECODESCOPE_CPU_BLOCKS (default on)
        self._use_blocks = os.environ.get("DECODESCOPE_CPU_BLOCKS", "1") != "0" if use_blocks is None else use_blocks
        self._group: FusedLinears | None = None  # set by fuse_linears: one kernel call for it and its siblings
        self.kernel = kernel_wanted(kernel_name)  # "int8": block weights run the int8 kernel
        self._repack()

    def _repack(self) -> None:
        w = self.weight.detach()
        b = blocks.recover(w) if self._use_blocks else None
        if b is None:
            self.storage, panels, op = "fp32", kernel().pack_panels(w), kernel().packed_linear
        else:
            int8 = self.kernel == "int8" and b.kind in INT8_KINDS
            pack = kernel().pack_blocks_i8 if int8 else kernel().pack_blocks
            self.storage, panels, op = b.kind, pack(b.q, b.d, b.m), kernel().block_linear
        self._op = op.default  # the overload itself: the cheapest call from Python
        self.register_buffer("panels", panels, persistent=False)
        self._packed_at = self.weight._version  # an in-place weight update re-packs (load_state_dict, copy_)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.dtype != torch.float32 or not x.is_cpu or x.numel() > self._max_numel
                or torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
            return F.linear(x, self.weight, self.bias)
        if self._group is not None:
            return self._group.output(self, x)
        if self.weight._version != self._packed_at:
            self._repack()
        return self._op(x, self.panels, self.out_features, self.bias)


def packable(mod: torch.nn.Module) -> bool:
    w = getattr(mod, "weight", None)
    return (type(mod) is torch.nn.Linear and type(w) is torch.nn.Parameter and w.dtype == torch.float32
            and w.device.type == "cpu" and w.dim() == 2)


def panel_bytes(model: torch.nn.Module) -> int:
    seen = {id(m.weight): m.weight.shape for m in model.modules() if packable(m)}
    return sum(-(-n // 16) * 16 * k * 4 for n, k in seen.values())


def fits_in_memory(model: torch.nn.Module) -> bool:
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return False
    return panel_bytes(model) <= MEMORY_SHARE * ram


STORAGES = ("q4_1", "q8_0", "k8", "fp32")


def storage_counts(model: torch.nn.Module) -> dict[str, int]:
    """How many packed weights (each shared module once) are stored as q4_1 / q8_0 / k8 blocks or fp32 panels."""
    counts = dict.fromkeys(STORAGES, 0)
    for m in {id(m): m for m in model.modules() if isinstance(m, PackedLinear)}.values():
        counts[m.storage] += 1
    return counts


def coverage(model: torch.nn.Module) -> dict[str, dict[str, int]]:
    """What each kernel streams per forward: {"int8": ..., "fp32_blocks": ..., "fp32_panels": ...}, each
    {"matrices": n, "bytes": b} (each shared weight once; bytes as packed: blocks at their record size)."""
    out = {k: {"matrices": 0, "bytes": 0} for k in ("int8", "fp32_blocks", "fp32_panels")}
    for m in {id(m): m for m in model.modules() if isinstance(m, PackedLinear)}.values():
        key = "int8" if m.panels.dtype == torch.int8 else "fp32_panels" if m.storage == "fp32" else "fp32_blocks"
        out[key]["matrices"] += 1
        out[key]["bytes"] += m.panels.numel() * m.panels.element_size()
    return out


def coverage_line(model: torch.nn.Module) -> str:
    """e.g. "int8 kernel 91 matrices 95.2 MB; fp32 kernel 36 as blocks 30.1 MB, 0 as float32 0.0 MB"."""
    c = coverage(model)
    fp32 = (f"fp32 kernel {c['fp32_blocks']['matrices']} as blocks {c['fp32_blocks']['bytes'] / 1e6:.1f} MB, "
            f"{c['fp32_panels']['matrices']} as float32 {c['fp32_panels']['bytes'] / 1e6:.1f} MB")
    if getattr(model, "cpu_kernel_", "fp32") != "int8":
        return fp32
    return f"int8 kernel {c['int8']['matrices']} matrices {c['int8']['bytes'] / 1e6:.1f} MB; {fp32}"


def int8_share(model: torch.nn.Module) -> float:
    """The share of the packed weight bytes the int8 kernel streams (0 where it runs none)."""
    c = coverage(model)
    total = sum(v["bytes"] for v in c.values())
    return c["int8"]["bytes"] / total if total else 0.0


def storage_report(model: torch.nn.Module) -> str:
    """e.g. "q4_1 210, q8_0 1, k8 0, fp32 0; fp32 kernel 211 as blocks 96.1 MB, 0 as float32 0.0 MB": what the
    packed layout stored and what each kernel streams, for the CLI and the benches."""
    return ", ".join(f"{k} {v}" for k, v in storage_counts(model).items()) + "; " + coverage_line(model)


def block_linear_bytes(model: torch.nn.Module) -> int | None:
    """Bytes the Linears read per forward (each weight once; block-packed ones as their blocks), where some
    weights are block-packed, so that a roofline counts what the kernel streams; None otherwise (every
    weight is read at its dtype's size, which the analytic model already counts)."""
    mods = {id(m.weight): m for m in model.modules() if isinstance(m, torch.nn.Linear)}
    if not any(getattr(m, "storage", "fp32") != "fp32" for m in mods.values()):
        return None
    return sum(m.panels.numel() * m.panels.element_size() if getattr(m, "storage", "fp32") != "fp32"
               else m.weight.numel() * m.weight.element_size() for m in mods.values())


def bytes_read(model: torch.nn.Module) -> int:
    """The weight bytes one forward pass reads, as gpt-fast counts them (every parameter once), but with each
    packed weight counted as the panels the kernel streams (blocks: ~5 / 8.5 bits a weight, not 32)."""
    packed = {id(m.weight): m.panels for m in model.modules() if isinstance(m, PackedLinear)}
    return (sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in packed)
            + sum(t.numel() * t.element_size() for t in packed.values()))


@torch.no_grad()
def pack_linears(model: torch.nn.Module, use_blocks: bool | None = None, fuse: bool | None = None,
                 kernel_name: str | None = None) -> int:
    """Replace every plain fp32 CPU nn.Linear of `model` by a PackedLinear (one per shared module), then fuse
    the siblings that read one input (fuse_linears; fuse None: DECODESCOPE_CPU_FUSE, default on); returns how
    many were replaced. kernel_name: "fp32" or "int8" for the block weights (None: kernel_wanted()), kept as
    model.cpu_kernel_. Needs kernel()."""
    name_ = kernel_wanted(kernel_name)
    done: dict[int, PackedLinear] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if packable(child):
                if id(child) not in done:
                    done[id(child)] = PackedLinear(child, use_blocks, name_)
                setattr(parent, name, done[id(child)])
    model.cpu_kernel_ = name_
    if os.environ.get("DECODESCOPE_CPU_FUSE", "1") != "0" if fuse is None else fuse:
        fuse_linears(model)
    if name_ == "int8" and done and int8_share(model) < INT8_WARN_SHARE:
        _say(f"--kernel int8 covers little of this model: {coverage_line(model)} (the int8 kernel runs exact ggml "
             "blocks only; float32 weights run the fp32 kernel, so int8 speeds up only its share)")
    return len(done)


# Sibling Linears that transformers' decoder layers call one after another on the very same tensor (attention's
# q/k/v, the gated MLP's gate/up), under their usual names: fused, they are one kernel call a step, not 3 / 2.
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


@functools.lru_cache(maxsize=1)
def fused_op():
    """decodescope::fused_linear's overload, with the fake kernel and FLOP formula that the profiler's FLOP
    counts and torch.compile need (its FLOPs: those of the separate Linears)."""
    ops = kernel()
    torch.library.register_fake("decodescope::fused_linear")(
        lambda x, panels, ns, biases: [x.new_empty(*x.shape[:-1], n) for n in ns])
    register_flop_formula(ops.fused_linear)(lambda x, panels, ns, *a, **k: 2 * math.prod(x) * sum(ns))
    return ops.fused_linear.default


class FusedLinears:
    """PackedLinears of one input width and storage whose panels are concatenated into one tensor, so that
    one decodescope::fused_linear call computes all their outputs: the first member called on a tensor x
    computes every member's output and keeps the others' until they are called on that same x (same object,
    unchanged since); a member called on anything else runs its own panels. Each member's `panels` is a view
    of its slice of the fused panels (no second copy), and every output is the FMA chain of the member's own
    call, bit for bit (tests/test_cpu_fused.py)."""

    def __init__(self, members: list[PackedLinear]):
        self.members = members
        self._kept: tuple[torch.Tensor, int, dict[PackedLinear, torch.Tensor]] | None = None  # x, version, outputs
        self._build()

    def _build(self) -> None:
        self.panels = torch.cat([m.panels for m in self.members])
        at = 0
        for m in self.members:
            n = m.panels.shape[0]
            m.panels = self.panels.narrow(0, at, n)  # a view: the buffer keeps its name, the storage is shared
            at += n
        self.ns = [m.out_features for m in self.members]
        self._kept = None

    def output(self, member: PackedLinear, x: torch.Tensor) -> torch.Tensor:
        kept = self._kept
        if kept is not None and kept[0] is x and kept[1] == _version(x):
            out = kept[2].pop(member, None)
            if out is not None:
                return out
        if any(m.weight._version != m._packed_at for m in self.members):
            self._update()
            if member._group is None:
                return member(x)
        outs = fused_op()(x, self.panels, self.ns, [m.bias for m in self.members])  # biases as they are now
        self._kept = (x, _version(x), {m: o for m, o in zip(self.members, outs) if m is not member})
        return outs[self.members.index(member)]

    def _update(self) -> None:
        """A member's weight changed in place: re-pack it, and fuse again if the storages still agree."""
        for m in self.members:
            if m.weight._version != m._packed_at:
                m._repack()
        if len({m.storage for m in self.members}) == 1:
            self._build()
        else:
            for m in self.members:
                m._group = None
                m.register_buffer("panels", m.panels.clone(), persistent=False)  # its own, not a view


def _version(x: torch.Tensor) -> int:
    """x's in-place update count; an inference tensor counts none (transformers' layers call the siblings on
    the same tensor with nothing in between, so the identity check is what matters there)."""
    return -1 if x.is_inference() else x._version


def fuse_linears(model: torch.nn.Module) -> int:
    """Group the SIBLINGS of every module into FusedLinears where they are distinct PackedLinears used only
    there (no tied or shared weight), of one input width and storage; returns how many groups were made."""
    uses: dict[int, int] = {}
    for _, m in model.named_modules(remove_duplicate=False):  # a shared module counts each time
        if isinstance(m, PackedLinear):
            uses[id(m.weight)] = uses.get(id(m.weight), 0) + 1
    made = 0
    for parent in model.modules():
        for names in SIBLINGS:
            mods = [getattr(parent, n, None) for n in names]
            if (all(isinstance(m, PackedLinear) and m._group is None and uses[id(m.weight)] == 1 for m in mods)
                    and len({id(m) for m in mods}) == len(mods) and len({m.in_features for m in mods}) == 1
                    and len({m.storage for m in mods}) == 1):
                group = FusedLinears(mods)
                for m in mods:
                    m._group = group
                made += 1
    return made


def main() -> int:
    """`python -m decoding.fast.cpu_gemm`: build the kernel now (after installing), so no run waits for it."""
    ops = kernel()
    if ops is None:
        print(f"decodescope: the CPU kernel is not used here: {why_not()}", file=sys.stderr)
        return 1
    print(f"decodescope: CPU kernel ready ({ISA[0]}) in {build_root() / build_name()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
