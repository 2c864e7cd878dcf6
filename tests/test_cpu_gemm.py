"""The packed CPU GEMM kernel (decoding/fast/cpu_gemm.py): F.linear's values, rows independent of each other,
tied weights kept, re-packing after in-place updates, and the engine still returns HF greedy's tokens.

The dev and CI machines are x86-64 with AVX2 and a compiler: the kernel must build there (a failed build
fails these tests rather than skipping them)."""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.fast.cpu_gemm import ROWS_MAX, PackedLinear, kernel, pack_linears, why_not
from decoding.fast import cpu_gemm
from decoding.fast.layout import apply_layout


def test_kernel_builds_here():
    assert why_not() is None and kernel() is not None


@pytest.mark.parametrize("n,k", [(1, 1), (15, 7), (16, 8), (17, 33), (40, 320), (100, 64)])
def test_matches_f_linear_for_every_row_count(n, k):
    torch.manual_seed(n * 100 + k)
    lin = torch.nn.Linear(k, n, bias=n % 2 == 0)
    packed = PackedLinear(lin)
    for m in list(range(1, 14)) + [31, ROWS_MAX, ROWS_MAX + 1]:
        x = torch.randn(m, k)
        with torch.no_grad():
            torch.testing.assert_close(packed(x), lin(x), rtol=1e-5, atol=1e-5 * k ** 0.5)


def test_rows_do_not_depend_on_the_other_rows_of_the_call():
    """Bitwise: a verify step's row equals the one-row step's (each output is one FMA chain over k)."""
    torch.manual_seed(0)
    packed = PackedLinear(torch.nn.Linear(96, 50))
    x = torch.randn(13, 96)
    with torch.no_grad():
        full = packed(x)
        for i in range(13):
            assert torch.equal(full[i], packed(x[i:i + 1])[0])
        assert torch.equal(full[3:10], packed(x[3:10]))


def test_shapes_autograd_and_in_place_updates():
    torch.manual_seed(1)
    lin = torch.nn.Linear(24, 20)
    packed = PackedLinear(lin)
    x = torch.randn(2, 3, 24)
    with torch.no_grad():
        torch.testing.assert_close(packed(x), lin(x))
        lin.weight.mul_(2)  # the same Parameter: the panels follow
        torch.testing.assert_close(packed(x), F.linear(x, lin.weight, lin.bias))
    y = packed(x.requires_grad_())  # training falls back to F.linear, with gradients
    y.sum().backward()
    assert x.grad is not None and lin.weight.grad is not None


def test_flop_counter_sees_the_kernel():
    packed = PackedLinear(torch.nn.Linear(32, 48, bias=False))
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        packed(torch.randn(5, 32))
    assert fc.get_total_flops() == 2 * 5 * 32 * 48


def test_pack_linears_keeps_tied_weights_and_counts_each_once():
    model = tiny("gpt2")  # tied LM head
    assert model.lm_head.weight is model.transformer.wte.weight
    n_linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert pack_linears(model) == n_linears
    assert isinstance(model.lm_head, PackedLinear) and model.lm_head.weight is model.transformer.wte.weight
    assert not any(type(m) is torch.nn.Linear for m in model.modules())


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("method,params", [("greedy", {}), ("lookahead", dict(window=3, ngram=3, guesses=3)),
                                           ("jacobi", dict(block=4)), ("prompt_lookup", dict(num_tokens=4))])
def test_packed_model_decodes_hf_greedy_of_the_stock_model(arch, method, params):
    stock = tiny(arch, seed=2)
    packed = copy.deepcopy(stock)
    assert apply_layout(packed, "packed") == "packed"
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7]
    for static in (False, True):
        tr = generate(packed, prompt, make_drafter(method, **params), max_new_tokens=40, static=static)
        assert tr.output_ids == hf_greedy(stock, prompt, 40), (method, static)


def test_packed_speculative_with_a_packed_draft():
    target, draft = tiny("llama", seed=2), tiny("llama", seed=3)
    ref = hf_greedy(target, [1, 2, 3, 4], 40)
    for m in (target, draft):
        apply_layout(m, "packed")
    for kw in (dict(draft_tokens=3), dict(tree=[2, 2, 1])):
        tr = generate(target, [1, 2, 3, 4], make_drafter("speculative", draft_model=draft, **kw), max_new_tokens=40)
        assert tr.output_ids == ref


def test_build_name_is_a_hash_of_the_source_not_its_path(tmp_path):
    """An installed copy and a checkout of the same source share one build; an edit or a new torch gets its own."""
    src = tuple(p.read_bytes() for p in cpu_gemm.SOURCES)
    copies = {}
    for where in ("a", "b"):
        (tmp_path / where).mkdir()
        copies[where] = tuple(tmp_path / where / p.name for p in cpu_gemm.SOURCES)
        for p, text in zip(copies[where], src):
            p.write_bytes(text)
    assert (cpu_gemm.build_name(copies["a"]) == cpu_gemm.build_name(copies["b"]) == cpu_gemm.build_name()
            == cpu_gemm.build_name(src))
    assert cpu_gemm.build_name((src[0] + b"\n// edited", src[1])) != cpu_gemm.build_name(src)
    assert cpu_gemm.build_name((src[0], src[1] + b"\n// edited")) != cpu_gemm.build_name(src)
    assert cpu_gemm.build_name(src, "9.9.9") != cpu_gemm.build_name(src)
    assert cpu_gemm.build_name().startswith(cpu_gemm.NAME + "_")


def test_kernel_builds_under_the_hashed_name_and_says_so_once(monkeypatch, tmp_path, capsys):
    import torch.utils.cpp_extension as ext
    calls = []

    class Tty:
        def __init__(self, real):
            self.real = real

        def isatty(self):
            return True

        def __getattr__(self, k):
            return getattr(self.real, k)

    def fake_load(name, sources, **kw):
        calls.append((name, sources))
        raise RuntimeError("not really building in a test")

    monkeypatch.setattr(ext, "load", fake_load)
    monkeypatch.setattr(ext, "get_default_build_root", lambda: str(tmp_path))
    monkeypatch.setattr(sys, "stderr", Tty(sys.stderr))
    monkeypatch.setattr(cpu_gemm, "_FAILED", [])
    monkeypatch.setattr(cpu_gemm, "why_not", lambda: None)
    assert cpu_gemm.kernel.__wrapped__() is None
    name = cpu_gemm.build_name()  # built from copies in its folder: one path for every checkout of the source
    assert calls == [(name, [str(tmp_path / name / "src" / p.name) for p in cpu_gemm.SOURCES])]
    assert [(tmp_path / name / "src" / p.name).read_bytes() for p in cpu_gemm.SOURCES] == \
        [p.read_bytes() for p in cpu_gemm.SOURCES]
    assert cpu_gemm.BUILDING in capsys.readouterr().err
    (tmp_path / calls[0][0]).mkdir(exist_ok=True)
    (tmp_path / calls[0][0] / f"{calls[0][0]}.so").write_bytes(b"")
    cpu_gemm.kernel.__wrapped__()
    assert cpu_gemm.BUILDING not in capsys.readouterr().err  # built already: no note


def test_a_first_build_says_so_on_a_piped_stderr_too(monkeypatch, tmp_path, capsys):
    """A first CLI run with its stderr piped (a log, CI) was silent for the whole compile: one line says
    what is compiled and that it happens once per machine; loading a built kernel says nothing."""
    import torch.utils.cpp_extension as ext
    monkeypatch.setattr(ext, "load", lambda name, sources, **kw: None)
    monkeypatch.setattr(ext, "get_default_build_root", lambda: str(tmp_path))
    monkeypatch.setattr(cpu_gemm, "why_not", lambda: None)
    monkeypatch.setattr(cpu_gemm, "_REGISTERED", [True])
    monkeypatch.setattr(cpu_gemm, "ISA", [])
    monkeypatch.setattr(torch.ops, "decodescope", type("Ops", (), {"select_isa": staticmethod(lambda isa: isa)})(),
                        raising=False)
    cpu_gemm.kernel.__wrapped__()
    err = capsys.readouterr().err
    assert err.count(cpu_gemm.BUILDING) == 1 and "once per machine" in err and err.count("\n") == 1, err
    name = cpu_gemm.build_name()
    (tmp_path / name).mkdir(exist_ok=True)
    (tmp_path / name / f"{name}.so").write_bytes(b"")
    cpu_gemm.kernel.__wrapped__()
    assert capsys.readouterr().err == ""


def test_running_the_build_module_gives_no_runpy_warning():
    """`python -m decoding.fast.cpu_gemm` (build the kernel ahead of time): importing the package must not
    import the module itself, or runpy warns that it was found in sys.modules before running it."""
    import subprocess
    env = {**os.environ, "DECODESCOPE_CPU_GEMM": "0"}  # says why it is not used, and exits: no build here
    r = subprocess.run([sys.executable, "-m", "decoding.fast.cpu_gemm"], capture_output=True, text=True,
                       timeout=300, env=env, cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 1 and "RuntimeWarning" not in r.stderr and "not used here" in r.stderr, r.stderr


def test_build_name_keys_the_compiler_the_python_abi_and_the_environment():
    """Each venv (prefix) builds its own; a new compiler or Python ABI gets a new build, never another's binary."""
    src = cpu_gemm.SOURCE.read_bytes()
    base = dict(compiler="g++ 12.2.0", abi="cpython-311-x86_64", prefix="/venvs/a")
    name = cpu_gemm.build_name(src, **base)
    assert cpu_gemm.build_name(src, **base) == name
    for k, other in (("compiler", "clang++ 17"), ("abi", "cpython-312-x86_64"), ("prefix", "/venvs/b")):
        assert cpu_gemm.build_name(src, **{**base, k: other}) != name, k
    import os
    assert cpu_gemm.build_name() == cpu_gemm.build_name(prefix=os.path.realpath(sys.prefix),
                                                         compiler=cpu_gemm.compiler_id(), abi=cpu_gemm.python_abi())


def _torch_like_load(waits: list):
    """A stand-in for cpp_extension.load that takes its build folder's `lock` the way torch does, but gives up
    after 3 s where torch would wait forever (a test must fail, not hang)."""
    import os
    import time
    from torch.utils.cpp_extension import _get_build_directory

    def load(name, sources, build_directory=None, **kw):
        lock = os.path.join(build_directory or _get_build_directory(name, False), "lock")
        start = time.monotonic()
        while os.path.exists(lock):
            if time.monotonic() - start > 3:
                raise TimeoutError(f"{lock} is there: torch would wait for it forever")
            time.sleep(0.1)
        waits.append(name)
    return load


def _in_thread(fn, timeout: float = 60):
    import threading
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the kernel's load still waits"
    return out[0]


def test_a_stale_lock_left_by_a_killed_build_is_removed_not_waited_on(monkeypatch, tmp_path, capsys):
    import torch.utils.cpp_extension as ext
    assert kernel() is not None  # the real kernel, loaded in this process (its ops are what a load returns)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_gemm, "_FAILED", [])
    loads: list = []
    monkeypatch.setattr(ext, "load", _torch_like_load(loads))
    folder = tmp_path / cpu_gemm.build_name()
    folder.mkdir()
    (folder / "lock").write_bytes(b"")  # what a build killed half-way (Ctrl-C, kill -9) leaves behind
    assert _in_thread(cpu_gemm.kernel.__wrapped__) is not None
    assert loads == [cpu_gemm.build_name()] and not (folder / "lock").exists()
    assert "stopped half-way" in capsys.readouterr().err


def test_a_live_build_elsewhere_is_waited_for_within_a_bound_saying_for_whom(monkeypatch, tmp_path, capsys):
    import subprocess
    import torch.utils.cpp_extension as ext
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("DECODESCOPE_KERNEL_WAIT_S", "2")
    monkeypatch.setattr(cpu_gemm, "_FAILED", [])
    monkeypatch.setattr(ext, "load", _torch_like_load([]))
    folder = tmp_path / cpu_gemm.build_name()
    holder = subprocess.Popen(  # another process in the middle of its build: it holds the lock and torch's file
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from decoding.fast.cpu_gemm import "
         "build_lock\nwith build_lock(Path(sys.argv[1])) as held:\n    assert held\n    (Path(sys.argv[1]) / 'lock')"
         ".write_bytes(b'')\n    print('ready', flush=True)\n    time.sleep(120)", str(folder)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert _in_thread(cpu_gemm.kernel.__wrapped__) is None  # gave up after the bound: MKL
        err = capsys.readouterr().err
        assert f"waiting for process {holder.pid}" in err and str(folder) in err and "unavailable" in err
        assert (folder / "lock").exists()  # a live build's file is left alone
        assert "waited" in cpu_gemm.why_not()
    finally:
        holder.kill()
        holder.wait()


def test_the_kernel_can_be_built_ahead_of_time():
    import subprocess
    r = subprocess.run([sys.executable, "-m", "decoding.fast.cpu_gemm"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "CPU kernel ready" in r.stdout, r.stderr


def test_a_build_folder_that_cannot_be_written_means_mkl_not_a_crash(monkeypatch, tmp_path):
    import os
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):  # root ignores the mode: make the folder's parent a file instead
        ro = tmp_path / "a_file"
        ro.write_text("")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ro))
    monkeypatch.setattr(cpu_gemm, "_FAILED", [])
    assert cpu_gemm.kernel.__wrapped__() is None and "build failed" in cpu_gemm.why_not()
