"""Engineer's CLI habits: prompts from a file or stdin (several per run), --chat, --stop, --stream, the
timing lines (TTFT, time per output token, GB/s) and --compare greedy; outputs stay exactly HF greedy."""
import io
import json
import shutil

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import hf_greedy
from decoding.cli.main import main

P1, P2 = "def x ( y ) : return y + 1", "for i in range ( n ) : print ( i )"


@pytest.fixture(scope="module")
def ref(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir), AutoModelForCausalLM.from_pretrained(tiny_dir)


def gen(tiny_dir, *args):
    return main(["generate", "--model", tiny_dir, "--method", "lookahead", "--max-new-tokens", "12", *args])


def test_several_prompts_from_a_file_each_exact(tiny_dir, tmp_path, ref, capsys):
    tok, model = ref
    (tmp_path / "p.txt").write_text(f"{P1}\n\n{P2}\n")
    assert gen(tiny_dir, "--prompt-file", str(tmp_path / "p.txt"), "--json", str(tmp_path / "run.json")) == 0
    for i, p in enumerate((P1, P2), 1):
        doc = json.loads((tmp_path / f"run-{i}.json").read_text())
        assert doc["output_ids"] == hf_greedy(model, tok(p)["input_ids"], 12, eos=tok.eos_token_id)
    err = capsys.readouterr().err
    assert err.count("[timing] time to first token") == 2 and "GB/s" in err and "ms per output token" in err
    (tmp_path / "p.jsonl").write_text(json.dumps(P1 + "\n" + P2) + "\n")
    assert gen(tiny_dir, "--prompt-file", str(tmp_path / "p.jsonl"), "--json", str(tmp_path / "one.json")) == 0
    assert json.loads((tmp_path / "one.json").read_text())["prompt_ids"] == tok(P1 + "\n" + P2)["input_ids"]


def test_prompt_from_stdin_and_streaming(tiny_dir, tmp_path, ref, monkeypatch, capsys):
    tok, model = ref
    monkeypatch.setattr("sys.stdin", io.StringIO(P1))
    assert gen(tiny_dir, "--prompt-file", "-", "--stream", "--json", str(tmp_path / "s.json")) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["output_ids"] == hf_greedy(model, tok(P1)["input_ids"], 12, eos=tok.eos_token_id)
    assert capsys.readouterr().out.strip() == doc["text"].strip()


def test_stop_string_ends_the_run_where_the_text_appears(tiny_dir, tmp_path, ref):
    tok, model = ref
    full = hf_greedy(model, tok(P1)["input_ids"], 12, eos=tok.eos_token_id)
    word = tok.decode(full[5:6]).strip()
    k = next(i for i in range(1, 13) if word in tok.decode(full[:i]))
    assert gen(tiny_dir, "--prompt", P1, "--stop", word, "--json", str(tmp_path / "stop.json")) == 0
    doc = json.loads((tmp_path / "stop.json").read_text())
    assert doc["output_ids"] == full[:k] and doc["stop_reason"] == "stop"
    assert [t for s in doc["steps"] for t in s["accepted"]] == doc["output_ids"]


@pytest.mark.parametrize("method", ["greedy", "lookahead"])
def test_stop_with_check_exact_compares_with_hf_greedy_stopped_there(tiny_dir, tmp_path, ref, capsys, method):
    """--check-exact measures the stopped output against HF greedy stopped at the same string (as HF's
    stop_strings stop it), not against the whole max-new-tokens reference."""
    tok, model = ref
    full = hf_greedy(model, tok(P1)["input_ids"], 12, eos=tok.eos_token_id)
    word = tok.decode(full[5:6]).strip()
    capsys.readouterr()
    assert main(["generate", "--model", tiny_dir, "--method", method, "--max-new-tokens", "12", "--prompt", P1,
                 "--stop", word, "--check-exact", "--json", str(tmp_path / "stop.json")]) == 0
    doc = json.loads((tmp_path / "stop.json").read_text())
    assert doc["stop_reason"] == "stop" and len(doc["output_ids"]) < 12
    assert doc["agreement"]["identical"] is True and doc["agreement"]["compared"] == len(doc["output_ids"])
    assert "vs HF greedy: identical" in capsys.readouterr().err


def test_chat_template_and_compare(tiny_dir, tmp_path, ref, capsys):
    tok, model = ref
    chat = tmp_path / "chat"
    shutil.copytree(tiny_dir, chat)
    t = AutoTokenizer.from_pretrained(chat)
    t.chat_template = "{% for m in messages %}def {{ m['content'] }} :{% endfor %}"
    t.save_pretrained(chat)
    assert main(["generate", "--model", str(chat), "--prompt", "x ( y )", "--chat", "--compare", "greedy",
                 "--max-new-tokens", "10", "--json", str(tmp_path / "c.json")]) == 0
    doc = json.loads((tmp_path / "c.json").read_text())
    ids = tok("def x ( y ) :")["input_ids"]
    assert doc["prompt_ids"] == ids and doc["output_ids"] == hf_greedy(model, ids, 10, eos=tok.eos_token_id)
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[compare]")]
    # a ratio on a quiet machine, "machine busy" with step counts on a busy one (tests/test_cli_compare.py)
    assert len(line) == 1 and ("speed-up" in line[0] or "machine busy" in line[0]) and "identical to greedy" in line[0]
    assert gen(tiny_dir, "--prompt", P1, "--chat") == 2
    assert "no chat template" in capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [([], "--prompt-file"), (["--prompt", "x", "--prompt-file", "f"], "not both"),
                                         (["--prompt-file", "/no/such.txt"], "prompt file '/no/such.txt' does not exist")])
def test_prompt_source_errors(tiny_dir, capsys, args, needle):
    assert main(["generate", "--model", tiny_dir, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Errno" not in err[0]


def test_chat_output_is_printed_without_the_turn_end(tmp_path, capsys):
    """--chat prints the answer without the template's end-of-turn token (<|im_end|>, the model's EOS); the
    trace keeps every id and its text. The model here ends its turn at once: its LM head is zero, so id 0,
    <|im_end|>, wins every argmax."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from conftest import WORDS, tiny
    vocab = {w: i for i, w in enumerate(["<|im_end|>", "[UNK]"] + WORDS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="<|im_end|>")
    tok.chat_template = "{% for m in messages %}def {{ m['content'] }} :{% endfor %}"
    model = tiny("llama", vocab=64)
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()
    model.config.eos_token_id = model.generation_config.eos_token_id = 0
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    for stream in ([], ["--stream"]):
        capsys.readouterr()
        assert main(["generate", "--model", str(tmp_path / "m"), "--prompt", "x ( y )", "--chat", "--method", "greedy",
                     "--max-new-tokens", "4", "--json", str(tmp_path / "c.json"), *stream]) == 0
        doc = json.loads((tmp_path / "c.json").read_text())
        assert doc["output_ids"] == [0] and "<|im_end|>" in doc["text"]
        assert "<|im_end|>" not in capsys.readouterr().out, stream


def test_report_of_a_folder_says_it_is_a_folder(tmp_path, capsys):
    """`viz report DIR` names the folder as a folder in one line (not 'no trace file at <its last part>')."""
    from viz.__main__ import main as viz_main
    (tmp_path / "runs").mkdir()
    assert viz_main(["report", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs is a folder, not a trace file" in err


def test_side_by_side_refuses_runs_of_different_prompts(tiny_dir, tmp_path, capsys):
    """side-by-side lines up step k of each run: runs of two prompts are refused in one line naming both
    files; runs of one prompt still make the page."""
    from viz.__main__ import main as viz_main
    for name, prompt, method in (("a", P1, "greedy"), ("b", P1, "lookahead"), ("c", "x = 1", "greedy")):
        assert main(["generate", "--model", tiny_dir, "--method", method, "--prompt", prompt, "--max-new-tokens", "4",
                     "--json", str(tmp_path / f"{name}.json")]) == 0
    capsys.readouterr()
    assert viz_main(["side-by-side", str(tmp_path / "a.json"), str(tmp_path / "c.json"), "-o", str(tmp_path / "s.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "c.json and a.json decode different prompts" in err
    assert not (tmp_path / "s.html").exists()
    assert viz_main(["side-by-side", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", str(tmp_path / "s.html")]) == 0
