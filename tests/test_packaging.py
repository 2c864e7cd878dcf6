"""The project installs as a package (pyproject metadata): the wheel holds every package, the embedded
models and the viewer scripts, imports from outside the repo, and `decodescope` dispatches to the CLIs. It
installs no generic top-level `app` or `assets` (a user's own app.py would collide): they live under
decodescope/."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from decodescope.cli import main as decodescope
from installed_wheel import PIP, in_venv

ROOT = Path(__file__).resolve().parent.parent
def test_every_package_folder_is_in_the_wheel(wheel):
    """Each folder with an __init__.py under the packages' roots is installed (a new subpackage listed
    nowhere would import in a checkout and fail after pip install)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for top in ("decoding", "viz", "profiling", "appkit", "decodescope"):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.relative_to(ROOT).as_posix()
            assert "__pycache__" in rel or rel in names, f"{rel} is not in the wheel (pyproject.toml packages)"


def test_every_runtime_asset_is_in_the_wheel(wheel):
    """Every data file under assets/ that the runtime reads installs under decodescope/assets: models,
    heads (both models'), the self-speculative adapter, the REST datastore, traces. The scripts that built
    them stay in the checkout only."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (ROOT / "assets").rglob("*"):
        rel = f.relative_to(ROOT / "assets")
        if not f.is_file() or f.suffix in (".py", ".pyc") or rel.parts[0] == "results":
            continue
        assert f"decodescope/assets/{rel.as_posix()}" in names, rel


def test_wheel_builds_installs_and_imports_outside_the_repo(wheel, tmp_path):
    pip = PIP
    names = set(zipfile.ZipFile(wheel).namelist())
    for need in ("decoding/api.py", "decoding/__main__.py", "decoding/cli/main.py", "viz/summaries/report.py", "viz/page/stepper.js", "profiling/__main__.py",
                 "appkit/run/handlers.py", "decodescope/gradio_app/app.py", "decodescope/cli.py",
                 "decodescope/assets/target/config.json", "decoding/fast/cpu_gemm.cpp",
                 "decodescope/assets/heads/eagle/heads.json", "decodescope/assets/heads/medusa/heads.json",
                 "decodescope/assets/target/tokenizer.json", "decodescope/assets/draft/config.json",
                 "decodescope/assets/traces/prompt_lookup.json",
                 *(f"decodescope/assets/{m}/{f.name}" for m in ("target", "draft")
                   for f in (ROOT / "assets" / m).glob("*.safetensors"))):
        assert need in names, need
    top = {n.split("/")[0] for n in names}
    assert not top & {"app.py", "app", "assets"}, top  # nothing generic at the top of site-packages
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "decodescope = decodescope.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    site = tmp_path / "site"
    r = subprocess.run(pip + ["install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # resolved from the install, not the repo; no torch import here (30 s on a busy CI machine): the
    # in-process test below runs the commands
    code = ("import json, importlib.util as u, decodescope.cli\n"
            "print(json.dumps([u.find_spec(m).origin for m in ('decoding', 'viz', 'profiling', 'appkit',\n"
            "                                                    'decodescope.gradio_app.app')]\n"
            "                 + [u.find_spec(m) is None for m in ('app', 'assets')]))")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    *origins, no_app, no_assets = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(o.startswith(str(site)) for o in origins) and no_app and no_assets, origins
    # decoding.models (ASSETS) finds the embedded models inside the installed package: decodescope/assets
    assets = Path(origins[0]).parent.parent / "decodescope" / "assets"
    for model in ("target", "draft"):
        assert (assets / model / "config.json").is_file()
    assert (assets / "traces" / "prompt_lookup.json").is_file() and (assets / "README.md").is_file()
    assert '"decodescope" / "assets"' in (site / "decoding" / "models" / "__init__.py").read_text()
    assert (site / "bin" / "decodescope").exists()


def test_console_command_dispatches(tiny_dir, tmp_path, capsys):
    fixture = ROOT / "tests" / "fixtures" / "lookahead.json"
    assert decodescope(["report", str(fixture), "-o", str(tmp_path / "r.html")]) == 0
    assert "ds-stepper" in (tmp_path / "r.html").read_text()
    out = tmp_path / "g.json"
    assert decodescope(["generate", "--model", tiny_dir, "--prompt", "def x ( y ) :", "--method", "greedy",
                        "--max-new-tokens", "3", "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())["output_ids"]) == 3
    capsys.readouterr()
    assert decodescope(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert decodescope(["profile", "--model", tiny_dir, "--window", "0", "--out", str(tmp_path / "p")]) == 2
    assert decodescope(["--help"]) == 0 and "generate" in capsys.readouterr().out


# Runs inside the fresh venv, from its install: every method on the default model through the console
# command's main(), one interpreter for all nine (each start costs a torch import). Prints one JSON line.
IN_VENV = r"""
import contextlib, io, json, sys
import decoding, decodescope.cli
from decoding.api import METHODS
from decoding.models import ASSETS
import hashlib
from decoding.fast import cpu_gemm
out = {"decoding": decoding.__file__, "assets": str(ASSETS), "methods": {},
       "kernel_sources": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in cpu_gemm.SOURCES}}
extra = {"speculative": ["--draft", sys.argv[1]]}  # the default model drafts for itself: same tokenizer
for m in METHODS:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = decodescope.cli.main(["generate", "--method", m, "--prompt", "the the a the", "--max-new-tokens", "4",
                                   "--check-exact", "--json", f"{m}.json", *extra.get(m, [])])
    out["methods"][m] = {"rc": rc, "err": err.getvalue()}
print(json.dumps(out))
"""


def test_installed_package_runs_every_method_on_the_default_model(venv):
    """From the install: the package and its assets resolve inside the venv, and each of the nine methods
    runs on the default model with --check-exact. Medusa, EAGLE and self-speculative drafting need files
    trained for SmolLM2 (the shipped ones are installed); the fake default model is not SmolLM2, so they
    must refuse with the installed files' base model named (read from the install), in one line."""
    r = in_venv(venv, str(venv["py"]), "-c", IN_VENV, str(venv["model"]))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    site = str(venv["root"] / "env")
    assert got["decoding"].startswith(site) and got["assets"].startswith(site), got
    assert Path(got["assets"], "heads", "smollm2", "eagle", "heads.json").is_file()
    assert Path(got["assets"], "heads", "smollm2-self_speculative", "adapter.json").is_file()
    assert Path(got["assets"], "datastore", "smollm2", "datastore.json").is_file()
    trained = {"medusa", "eagle", "self_speculative"}
    for m, res in got["methods"].items():
        if m in trained:
            assert res["rc"] == 2 and res["err"].strip().count("\n") == 0, (m, res)
            assert "SmolLM2" in res["err"] or "smollm2" in res["err"], (m, res)
            continue
        assert res["rc"] == 0, (m, res["err"][-2000:])
        doc = json.loads((venv["work"] / f"{m}.json").read_text())
        assert len(doc["output_ids"]) == 4 and doc["model"]["name"] == str(venv["model"]), m
    from decoding.methods.registry import METHODS
    assert set(got["methods"]) == set(METHODS)  # every registered method ran from the installed package
    # the CPU kernel a user's first run compiles from the install: the very sources this checkout builds and tests
    import hashlib
    from decoding.fast import cpu_gemm
    assert got["kernel_sources"] == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in cpu_gemm.SOURCES}


def test_installed_console_command_builds_a_datastore_and_retrieves_from_it(venv):
    """`decodescope build-datastore` (the console script of the install; pydivsufsort is a declared
    dependency) writes a datastore that `decodescope generate --method retrieval --datastore` reads."""
    from importlib.metadata import Distribution
    dist = next(Distribution.discover(name="decodescope", path=[str(p) for p in
                                                               (venv["root"] / "env" / "lib").glob("python*/site-packages")]))
    assert any(req.startswith("pydivsufsort") for req in dist.requires), dist.requires
    text = venv["work"] / "corpus"
    text.mkdir()
    (text / "a.txt").write_text("the the a the a the the a " * 20)
    exe = str(venv["bin"] / "decodescope")
    r = in_venv(venv, exe, "build-datastore", "--from", str(text), "--out", str(venv["work"] / "ds"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (venv["work"] / "ds" / "datastore.json").is_file()
    r = in_venv(venv, exe, "generate", "--method", "retrieval", "--datastore", str(venv["work"] / "ds"),
                "--prompt", "the the a", "--max-new-tokens", "4", "--check-exact", "--json", "ret.json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(json.loads((venv["work"] / "ret.json").read_text())["output_ids"]) == 4


def test_installed_package_runs_under_torchrun(venv):
    """A 2-process torchrun (gloo) of the installed package: tensor-parallel greedy on the default model."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = in_venv(venv, str(venv["py"]), "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                "127.0.0.1", "--master-port", str(port), "-m", "decoding", "generate", "--tp-plan", "auto",
                "--method", "greedy", "--prompt", "the the a", "--max-new-tokens", "4", "--json", "tp.json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((venv["work"] / "tp.json").read_text())
    assert len(doc["output_ids"]) == 4 and doc["config"]["distributed"]["world_size"] == 2, doc["config"]


def test_every_command_on_the_pages_parses_from_the_installed_wheel(venv):
    """The pages' commands of the installed CLIs (python -m ..., decodescope), run the way a reader who did
    `pip install` runs them: the package from the wheel's install in a fresh venv, the current directory an
    empty folder outside the checkout. Scripts (python app.py, bench/*.py) are the checkout's own files and
    are checked above only."""
    from test_docs_commands import FROM_THE_WHEEL
    r = in_venv(venv, str(venv["py"]), "-c", FROM_THE_WHEEL, str(Path(__file__).parent))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["decoding"].startswith(str(venv["root"] / "env")), got["decoding"]
    assert not got["failed"], "\n".join(got["failed"])
