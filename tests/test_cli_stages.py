"""No silent minutes: the stages of a model big enough that they take over a second (reading the weights,
packing them, tuning, a reference load) say what they do as they start, flushed (every model's with
DECODESCOPE_SAY_STAGES=1), and cheap refusals come before the load: --chat on a model folder without a chat
template is refused from its tokenizer files."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decoding.cli import args as cli_args
from decoding.cli import method_flags
from decoding.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "def x ( y ) : return y + 1"


def test_chat_without_a_template_is_refused_before_the_weights_load(tiny_dir, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "no-template"
    shutil.copytree(tiny_dir, folder)
    loads = []
    monkeypatch.setattr(method_flags, "load", lambda *a, **k: loads.append(a) or pytest.fail("weights loaded"))
    t0 = time.perf_counter()
    assert main(["generate", "--model", str(folder), "--prompt", PROMPT, "--chat"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no chat template" in err[0] and not loads, err
    assert time.perf_counter() - t0 < 5


def test_chat_with_a_template_still_passes_the_check(tiny_dir, tmp_path):
    from transformers import AutoTokenizer
    folder = tmp_path / "chat"
    shutil.copytree(tiny_dir, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(folder)
    from decoding.cli.habits import check_chat_template
    check_chat_template(str(folder))  # no refusal


def test_a_big_models_stages_are_said_and_a_small_ones_are_not(capsys, monkeypatch):
    monkeypatch.delenv(cli_args.SAY_ENV, raising=False)
    with cli_args.stage("[load] small", 20):
        pass
    with cli_args.stage("[load] unknown size"):
        pass
    with cli_args.stage("[load] big", cli_args.SAY_MB):
        pass
    monkeypatch.setenv(cli_args.SAY_ENV, "1")
    with cli_args.stage("[load] any", 1):
        pass
    assert capsys.readouterr().err.splitlines() == ["[load] big", "[load] any"]


def test_generate_says_it_is_loading_before_the_model_is_ready(tiny_dir):
    """Read as a person reads it: stderr line by line from a real process. The [load] line arrives first, on
    its own, before the run's summary (not all at once at the end)."""
    env = {**os.environ, cli_args.SAY_ENV: "1", "DECODESCOPE_CPU_GEMM": "0", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONUNBUFFERED", None)
    proc = subprocess.Popen([sys.executable, "-m", "decoding", "generate", "--model", tiny_dir, "--method", "greedy",
                             "--prompt", PROMPT, "--max-new-tokens", "4"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append((time.perf_counter(), line.rstrip("\n")))
    assert proc.wait(timeout=120) == 0, seen
    lines = [text for _, text in seen]
    load = next(i for i, text in enumerate(lines) if text.startswith("[load] reading the weights of"))
    done = next(i for i, text in enumerate(lines) if text.startswith("[greedy] 4 tokens"))
    assert load < done and seen[load][0] < seen[done][0], seen
    assert any(text.startswith("[load] preparing the weights' layout") for text in lines[load:done]), lines


def test_setup_notes_come_as_the_run_starts_not_after_it(tiny_dir, tmp_path):
    """What setup chose ([threads] ...) is said once the first step has run, before the streamed text, not
    with the rest at the end of the run (stdout and stderr read as one stream, as a terminal shows them)."""
    env = {**os.environ, "DECODESCOPE_CPU_GEMM": "0", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "decoding", "generate", "--model", tiny_dir, "--method", "greedy",
                           "--prompt", PROMPT, "--max-new-tokens", "4", "--stream", "--json", str(out)], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    import json
    text = json.loads(out.read_text())["text"]
    lines = proc.stdout.splitlines()
    threads = next(i for i, line in enumerate(lines) if line.startswith("[threads]"))
    streamed = next(i for i, line in enumerate(lines) if line.strip() == text.strip())
    assert threads < streamed, lines


@pytest.mark.parametrize("extra", [["--method", "no_such_method"], ["--method", "greedy", "--window", "3"],
                                   ["--repeats", "2"], ["--max-new-tokens", "0"]])
def test_bad_options_are_refused_before_the_load(tiny_dir, capsys, monkeypatch, extra):
    monkeypatch.setattr(method_flags, "load", lambda *a, **k: pytest.fail("weights loaded"))
    assert main(["generate", "--model", tiny_dir, "--prompt", PROMPT, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err


def test_every_cpu_run_says_what_each_kernel_streams(capsys):
    """A GGUF's matrices may stream as blocks or as float32 panels (K-quants, Q5_0 ... on the block kernels; others
    de-quantised): the run says which, per kernel, so an int8 run that covers little is visible on every run."""
    from decoding.models import EMBEDDED_TARGET
    assert main(["generate", "--model", EMBEDDED_TARGET, "--prompt", "def f(x):", "--max-new-tokens", "3",
                 "--device", "cpu"]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[weights]")]
    assert len(lines) == 1 and "fp32 kernel" in lines[0] and "as float32" in lines[0], lines
