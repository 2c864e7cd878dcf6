"""Bad input an engineer meets from the terminal or a script: each ends with one clear line (CLI exit 2)
or a ValueError naming the problem; models with few positions are never probed past their limit."""
import json
import shutil

import pytest
import torch

from conftest import hf_greedy, save_tiny_dir
from decoding import load, run
from decoding.cli.main import main as generate_main
from decoding.models import ModelError
from profiling.__main__ import main as profile_main


def one_error_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    for n in needles:
        assert n in err[0], err[0]
    return err[0]


@pytest.fixture(scope="module")
def short_dir(tmp_path_factory):
    """A GPT-2 whose position table really has 128 rows (an index past it is an IndexError, not a warning)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    d = save_tiny_dir(tmp_path_factory.mktemp("p128"), "gpt2")
    cfg = GPT2Config.from_pretrained(d)
    cfg.n_positions = 128
    torch.manual_seed(0)
    GPT2LMHeadModel(cfg).save_pretrained(d)
    return d


@pytest.mark.parametrize("device", ["cuda:99"] + ([] if torch.cuda.is_available() else ["cuda"]))
def test_device_without_cuda_is_one_line(tiny_dir, tmp_path, capsys, device):
    assert generate_main(["generate", "--model", tiny_dir, "--prompt", "x", "--device", device]) == 2
    one_error_line(capsys, repr(device))
    assert profile_main(["--model", tiny_dir, "--device", device, "--out", str(tmp_path)]) == 2
    one_error_line(capsys, repr(device))
    assert generate_main(["generate", "--model", tiny_dir, "--prompt", "x", "--device", "tpu"]) == 2
    one_error_line(capsys, "unknown device")


def test_auto_and_sweep_stay_inside_128_positions(short_dir, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    prompt = "def x ( y ) : return y"
    out = tmp_path / "auto.json"
    assert generate_main(["generate", "--model", short_dir, "--prompt", prompt, "--auto", "--max-new-tokens", "8",
                          "--json", str(out)]) == 0, capsys.readouterr().err
    tok, model = AutoTokenizer.from_pretrained(short_dir), AutoModelForCausalLM.from_pretrained(short_dir)
    assert json.loads(out.read_text())["output_ids"] == hf_greedy(model, tok(prompt)["input_ids"], 8)
    assert profile_main(["--model", short_dir, "--prompt", prompt, "--sweep", "--max-new-tokens", "4",
                         "--no-peaks", "--out", str(tmp_path / "p")]) == 0
    sweep = json.loads((tmp_path / "p" / "greedy.profile.json").read_text())["sweep"]
    assert max(p["n_query"] for p in sweep["points"]) + sweep["kv_len"] <= 128


def test_unknown_keyword_is_refused_with_a_hint(tiny_models):
    model = tiny_models["llama"]
    with pytest.raises(ValueError, match="unknown parameter 'window_size'; did you mean 'window'"):
        run(model, None, [1, 2, 3], "lookahead", max_new_tokens=4, window_size=2)
    with pytest.raises(ValueError, match="window is not a greedy parameter"):
        run(model, None, [1, 2, 3], "greedy", max_new_tokens=4, window=2)
    assert len(run(model, None, [1, 2, 3], "lookahead", max_new_tokens=4, window=2).output_ids) == 4


def test_missing_tokenizer_and_remote_code_messages(tiny_dir, tmp_path, capsys):
    notok = tmp_path / "notok"
    shutil.copytree(tiny_dir, notok)
    for f in notok.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            f.unlink()
    with pytest.raises(ModelError) as e:
        load(str(notok))
    msg = str(e.value)
    assert "has no tokenizer files" in msg and msg.endswith("next to its weights") and not msg.endswith(":")
    remote = tmp_path / "remote"
    shutil.copytree(tiny_dir, remote)
    cfg = json.loads((remote / "config.json").read_text())
    cfg.update(model_type="mycustom", auto_map={"AutoConfig": "cfg.MyConfig"})
    (remote / "config.json").write_text(json.dumps(cfg))
    (remote / "cfg.py").write_text("from transformers import LlamaConfig\nclass MyConfig(LlamaConfig):\n"
                                   "    model_type = 'mycustom'\n")
    assert generate_main(["generate", "--model", str(remote), "--prompt", "x"]) == 2
    one_error_line(capsys, "--trust-remote-code")
    assert profile_main(["--model", str(remote), "--out", str(tmp_path / "o")]) == 2
    one_error_line(capsys, "--trust-remote-code")


def test_profiling_takes_generates_method_options(tiny_dir, tmp_path, capsys):
    """--tree / --staged / --trust-remote-code are parsed by the one shared builder and reach the drafter."""
    out = tmp_path / "p"
    assert profile_main(["--model", tiny_dir, "--method", "speculative", "--draft", tiny_dir, "--tree", "2,1",
                         "--staged", "--trust-remote-code", "--prompt", "def x ( y ) :", "--max-new-tokens", "6",
                         "--no-peaks", "--out", str(out)]) == 0, capsys.readouterr().err
    cfg = json.loads((out / "speculative.trace.json").read_text())["config"]
    assert cfg["tree"] == [2, 1] and cfg["staged"] and cfg["mode"] == "tree"
    assert profile_main(["--model", tiny_dir, "--tree", "2,1", "--out", str(out)]) == 2
    one_error_line(capsys, "--method speculative")
