"""Device presets are keyed by the weights (architecture, sizes, quantisation / kernel, device), not by the
model's name or path: the same weights under another folder name (a renamed GGUF's converted folder) get the
same preset; and on a CPU with no preset the CLI never defaults to a shape whose step costs two 1-row steps or
more (decoding/tuning/device_presets.py)."""
import json
import shutil

import pytest

from conftest import hf_greedy, save_tiny_dir
from decoding import load
from decoding.cli.main import main
from decoding.methods.registry import SPECS
from decoding.models import EMBEDDED_TARGET
from decoding.tuning import device_presets as dp

pytestmark = pytest.mark.usefixtures("no_cpu_kernel")


def test_renamed_embedded_weights_get_the_shipped_cpu_preset(tmp_path, capsys):
    """The embedded target copied to a folder of another name runs the preset shipped for it, as by its name."""
    renamed = tmp_path / "my-own-model"
    shutil.copytree(EMBEDDED_TARGET, renamed)
    out = tmp_path / "run.json"
    want = dp.SHIPPED_CPU["lookahead"]
    for name in (EMBEDDED_TARGET, str(renamed)):
        assert main(["generate", "--model", name, "--method", "lookahead", "--prompt", "def f(x):",
                     "--max-new-tokens", "4", "--json", str(out)]) == 0
        cfg, err = json.loads(out.read_text())["config"], capsys.readouterr().err
        assert {k: cfg[k] for k in want} == want, (name, err)
        assert f"[preset] lookahead W{want['window']} N{want['ngram']} G{want['guesses']}: measured on a 2-core CPU" \
            in err and "paper's defaults" not in err, err


def test_same_tiny_model_under_two_folder_names_gets_the_same_tuned_preset(tmp_path, monkeypatch):
    """A preset tuned for folder A (the app stores it by name) is found for the same weights in folder B; one
    stored by the weights' key (store_key) is found for both; another shape finds neither."""
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    a, b = save_tiny_dir(tmp_path / "a"), save_tiny_dir(tmp_path / "b-renamed")
    other = save_tiny_dir(tmp_path / "gpt2", "gpt2")
    (ma, _), (mb, _), (mo, _) = load(a), load(b), load(other)
    assert dp.weights_key(ma) == dp.weights_key(mb) != dp.weights_key(mo)
    shape = {"window": 2, "ngram": 3, "guesses": 3}
    dp.preset_file().parent.mkdir(parents=True, exist_ok=True)
    dp.preset_file().write_text(json.dumps({f"{a}|{dp.device_key(ma)}": {"lookahead": shape}}))
    assert dp.lookup(a, ma, "lookahead") == dp.lookup(b, mb, "lookahead") == {"params": shape,
                                                                           "source": "tuned on this device"}
    assert dp.lookup(other, mo, "lookahead") is None
    dp.preset_file().write_text(json.dumps({dp.store_key(ma): {"lookahead": shape}}))
    assert dp.lookup(a, ma, "lookahead")["params"] == dp.lookup(b, mb, "lookahead")["params"] == shape
    assert dp.lookup(other, mo, "lookahead") is None


def test_shape_of_fills_defaults_so_a_converted_config_matches():
    """A config.json without head_dim / KV heads (as a GGUF conversion may write) has the original's shape."""
    full = {**dp.DEFAULT_SHAPE, "architectures": ["LlamaForCausalLM"]}
    bare = {k: v for k, v in full.items() if k not in ("head_dim",)}
    assert dp.shape_of(full) == dp.shape_of(bare) == dp.DEFAULT_SHAPE


def test_cpu_never_defaults_to_a_shape_that_loses_by_half(tiny_dir, tmp_path, capsys, monkeypatch):
    """No preset on a CPU: when the default shape's step costs >= 2 1-row steps (here: said to, the measurement
    is step_cost_ratio's), the CLI runs the smallest shipped CPU shape and says why; the output is HF greedy's."""
    spec = SPECS["lookahead"]
    # a cache of its own: another test's tuning of a same-shaped tiny folder is a preset "tuned on this device"
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    assert dp.cpu_fallback(spec, load(tiny_dir)[0], ratio=1.3) is None
    monkeypatch.setattr(dp, "step_cost_ratio", lambda model, rows, **kw: 3.0)
    out = tmp_path / "run.json"
    assert main(["generate", "--model", tiny_dir, "--method", "lookahead", "--prompt", "a b c", "--max-new-tokens",
                 "6", "--json", str(out)]) == 0
    doc, err = json.loads(out.read_text()), capsys.readouterr().err
    small = min((p for k, p in spec.presets.items() if k.startswith("cpu")),
                key=lambda p: spec.query_tokens({**spec.defaults(), **p}))
    assert {k: doc["config"][k] for k in small} == small and "paper's defaults" not in err
    assert "costs 3.0 1-row steps" in err and "0.33x greedy's speed" in err
    from transformers import AutoModelForCausalLM
    assert doc["output_ids"] == hf_greedy(AutoModelForCausalLM.from_pretrained(tiny_dir), doc["prompt_ids"], 6)


def test_step_cost_ratio_measures_a_wide_step_against_one_row(tiny_dir):
    model = load(tiny_dir)[0]
    assert dp.step_cost_ratio(model, 8, reps=2) > 0
