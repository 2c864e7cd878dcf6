"""The project installs as a package (pyproject metadata): the wheel holds every package, the embedded
models and the viewer scripts, imports from outside the repo, and `decodescope` dispatches to the CLIs. It
installs no generic top-level `app` or `assets` (a user's own app.py would collide): they live under
decodescope/."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from decodescope.cli import main as decodescope

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "build", "dist", "*.egg-info", "runs", "out",
                              ".ckpt", "tests", "bench", "docs", "scripts", "*.safetensors")


def test_wheel_builds_installs_and_imports_outside_the_repo(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    for model in ("target", "draft"):  # small stand-ins for the weights: compressing 25 MB took 30 s on CI
        for f in (ROOT / "assets" / model).glob("*.safetensors"):
            (src / "assets" / model / f.name).write_bytes(b"weights")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    r = subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("decodescope-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for need in ("decoding/api.py", "decoding/__main__.py", "viz/report.py", "viz/stepper.js", "profiling/__main__.py",
                 "appkit/handlers.py", "decodescope/gradio_app/app.py", "decodescope/cli.py",
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
    assert '"decodescope" / "assets"' in (site / "decoding" / "models.py").read_text()
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
