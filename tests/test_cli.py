"""The CLI on a real saved model directory: a good run writes the JSON; bad input gives one line, exit 2."""
import json
import subprocess
import sys

import pytest

from conftest import hf_greedy
from decoding.cli.main import main
from decoding.trace import SCHEMA, Trace


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "decoding", "generate", *args], capture_output=True, text=True,
                          timeout=120, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def test_generate_writes_json_equal_to_hf_greedy(tiny_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    prompt = "def x ( y ) : return y + 1"
    out = tmp_path / "run.json"
    r = cli("--model", tiny_dir, "--method", "lookahead", "--prompt", prompt, "--max-new-tokens", "24",
            "--window", "4", "--ngram", "3", "--guesses", "4", "--json", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    for key in ("schema", "output_ids", "text", "steps", "stats", "method", "config", "prompt_ids", "vocab"):
        assert key in doc
    assert doc["schema"] == SCHEMA and doc["stats"]["steps"] == len(doc["steps"])
    tok, model = AutoTokenizer.from_pretrained(tiny_dir), AutoModelForCausalLM.from_pretrained(tiny_dir)
    ids = tok(prompt)["input_ids"]
    assert doc["output_ids"] == hf_greedy(model, ids, 24)
    assert doc["prompt_ids"] == ids and doc["method"] == "lookahead"
    assert doc["text"] in r.stdout


@pytest.mark.parametrize("extra", [["--attn", "eager", "--layout", "stock"],
                                   ["--text-span", "2", "--layout", "column"],
                                   ["--static", "on", "--method", "lookahead", "--layout", "column"]])
def test_engine_options_keep_output_exact(tiny_dir, tmp_path, extra, capsys):
    """Through main() in this process (the real process is test_generate_writes_json_equal_to_hf_greedy's: a
    fresh interpreter per option costs ~20 s of imports on 2 cores and checks nothing more)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    prompt = "def x ( y ) : return y + 1 def x ( y ) :"
    out = tmp_path / "run.json"
    code = main(["generate", "--model", tiny_dir, "--prompt", prompt, "--max-new-tokens", "16", "--json", str(out),
                 *extra])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    tok, model = AutoTokenizer.from_pretrained(tiny_dir), AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert doc["output_ids"] == hf_greedy(model, tok(prompt)["input_ids"], 16)
    assert doc["model"]["weight_layout"] == extra[-1]
    assert doc["config"]["static"] == ("--static" in extra)  # CPU default: the dynamic path
    if "--text-span" in extra:
        assert doc["config"]["text_span"] == 3  # never below N-1 (default N=4)


@pytest.mark.parametrize("args,needle", [
    (["--prompt", "   "], "empty"),
    (["--prompt", "x", "--max-new-tokens", "0"], "max-new-tokens"),
    (["--prompt", "x", "--max-new-tokens", "100000"], "max-new-tokens"),
    (["--prompt", "x", "--window", "0"], "window"),
    (["--prompt", "x", "--ngram", "1"], "ngram"),
    (["--prompt", "x", "--guesses", "-1"], "guesses"),
    (["--prompt", "x", "--top-p", "0"], "top-p"),
    (["--prompt", "x", "--model", "/no/such/dir"], "does not exist"),
    (["--prompt", "x", "--model", "no-such-org/no-such-model"], "cannot load"),
    (["--prompt", "x " * 600, "--max-new-tokens", "8"], "positions"),
    (["--prompt", "x", "--auto", "--window", "3"], "--auto"),
    (["--prompt", "x", "--auto", "--method", "greedy"], "--auto"),
])
def test_bad_input_one_line_exit_2(tiny_dir, args, needle, capsys):
    """In-process (main() is what the entry point runs) to keep the suite fast."""
    if "--model" not in args:
        args = ["--model", tiny_dir] + args
    assert main(["generate", *args]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err


def test_bad_input_in_a_real_process(tiny_dir):
    r = cli("--model", tiny_dir, "--prompt", "x", "--window", "0")
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and "Traceback" not in r.stderr


def test_auto_picks_a_lookahead_config_and_stays_exact(tiny_dir, tmp_path, capsys):
    out = tmp_path / "auto.json"
    assert main(["generate", "--model", tiny_dir, "--prompt", "def x ( y ) : return y + 1", "--auto",
                 "--max-new-tokens", "12", "--json", str(out)]) == 0
    assert "[auto] window" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["method"] == "lookahead" and len(doc["output_ids"]) == 12


def test_exactness_line_fp32_by_construction_and_measured_in_bf16(tiny_dir, tmp_path, capsys):
    """fp32 says identical by construction; bf16 (and --check-exact) runs HF greedy and reports it."""
    prompt = "def x ( y ) : return y + 1 def x ( y ) :"
    base = ["generate", "--model", tiny_dir, "--prompt", prompt, "--max-new-tokens", "12"]
    assert main(base) == 0
    assert "identical to HF greedy by construction" in capsys.readouterr().err
    out = tmp_path / "exact.json"
    assert main(base + ["--check-exact", "--json", str(out)]) == 0
    assert "[exactness] float32 vs HF greedy: identical" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["agreement"]["identical"] and Trace.load(out).agreement == doc["agreement"]
    out = tmp_path / "bf16.json"
    assert main(base + ["--dtype", "bf16", "--json", str(out)]) == 0
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[exactness]")]
    a = json.loads(out.read_text())["agreement"]
    assert a["dtype"] == "bfloat16" and a["compared"] == 12
    assert len(line) == 1 and a["text"] in line[0] and a["text"] in ("identical", f"first divergence at token "
                                                                                 f"{a['first_divergence']}")
    assert main(base + ["--check-exact", "--temperature", "0.7"]) == 2
    assert "--check-exact" in capsys.readouterr().err


def test_lookahead_without_wng_runs_the_devices_preset_and_says_which(tiny_dir, tmp_path, capsys, monkeypatch):
    """--method lookahead without W/N/G runs the preset the app runs (decoding/tuning/device_presets.py): shipped for the
    embedded model on a CPU, tuned on this device when the cache holds one, else the paper's W5 N4 G5; one
    line names it. Explicit W/N/G win. The output stays HF greedy's."""
    from decoding.models import EMBEDDED_TARGET
    from decoding.tuning.device_presets import SHIPPED_CPU, device_key, preset_file
    out = tmp_path / "run.json"
    assert main(["generate", "--model", EMBEDDED_TARGET, "--prompt", "def f(x):", "--max-new-tokens", "6",
                 "--check-exact", "--json", str(out)]) == 0
    cfg, err = json.loads(out.read_text())["config"], capsys.readouterr().err
    want = SHIPPED_CPU["lookahead"]
    assert {k: cfg[k] for k in want} == want and "W5" not in err
    assert f"[preset] lookahead W{want['window']} N{want['ngram']} G{want['guesses']}: measured on a 2-core CPU" in err
    assert "identical" in err
    # a preset tuned on this device (the app's cache file) is used for any model, and said so
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    from decoding import load
    model, _ = load(tiny_dir)
    preset_file().parent.mkdir(parents=True)
    preset_file().write_text(json.dumps({f"{tiny_dir}|{device_key(model)}": {"lookahead": {"window": 2, "ngram": 3,
                                                                                          "guesses": 3}}}))
    assert main(["generate", "--model", tiny_dir, "--prompt", "a b c", "--max-new-tokens", "6", "--json", str(out)]) == 0
    cfg, err = json.loads(out.read_text())["config"], capsys.readouterr().err
    assert (cfg["window"], cfg["ngram"], cfg["guesses"]) == (2, 3, 3) and "W2 N3 G3: tuned on this device" in err
    preset_file().unlink()
    # no preset: the paper's shape where this machine's row cost does not say it loses by half (the CPU fallback
    # when it does is tests/test_presets_by_weights.py's)
    monkeypatch.setattr("decoding.tuning.device_presets.step_cost_ratio", lambda model, rows, **kw: 1.0)
    assert main(["generate", "--model", tiny_dir, "--prompt", "a b c", "--max-new-tokens", "6", "--json", str(out)]) == 0
    cfg, err = json.loads(out.read_text())["config"], capsys.readouterr().err
    assert (cfg["window"], cfg["ngram"], cfg["guesses"]) == (5, 4, 5) and "W5 N4 G5: the paper's defaults" in err
    assert main(["generate", "--model", EMBEDDED_TARGET, "--prompt", "def f(x):", "--max-new-tokens", "4",
                 "--window", "3", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["window"] == 3 and "[preset]" not in capsys.readouterr().err
