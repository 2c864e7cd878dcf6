"""Reference lookup (prompt lookup that also copies from user-supplied texts): HF greedy's ids on every
architecture with long copies really accepted, the "reference" origin, and one clear line for bad input
(CLI exit 2) including the jacobi block checks."""
import pytest

from conftest import hf_greedy
from decoding import generate, load, make_drafter, run
from decoding.cli.main import main
from decoding.methods.lookup.reference_text import MAX_REFERENCE_CHARS, check_references, read_reference

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]


def edited(ids: list[int], every: int = 9) -> list[int]:
    """A reference that is the output with a token changed every `every` tokens (an edit's input)."""
    return [(t + 1) % 64 if i % every == every - 1 else t for i, t in enumerate(ids)]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_reference_lookup_matches_hf_greedy_and_copies_long_spans(tiny_models, arch):
    model = tiny_models[arch]
    ref = hf_greedy(model, PROMPT, 64)
    d = make_drafter("prompt_lookup", reference_ids=[[1, 2, 3], edited(ref)], reference_tokens=16, max_ngram=2)
    tr = generate(model, PROMPT, d, max_new_tokens=64)
    assert tr.output_ids == ref
    copied = [sum(o == "reference" for o in s.origins) for s in tr.steps]
    assert max(copied) >= 4, "no step copied several tokens from the reference"
    assert sum(c > 1 for c in copied) >= 2
    for s in tr.steps[1:]:
        if s.info.get("candidates"):
            assert len(s.info["candidate_sources"]) == len(s.info["candidates"])
            assert set(s.info["candidate_sources"]) <= {"reference", "text"}


def test_aggressive_decoding_follows_the_reference_in_order(tiny_models):
    """The cursor: with the output itself (edited) as the reference, the copies walk through it and the
    mean accepted length is far above plain prompt lookup's."""
    model = tiny_models["llama"]
    ref = hf_greedy(model, PROMPT, 96)
    plain = generate(model, PROMPT, make_drafter("prompt_lookup"), max_new_tokens=96)
    ours = generate(model, PROMPT, make_drafter("prompt_lookup", reference_ids=[edited(ref, 16)],
                                                reference_tokens=32), max_new_tokens=96)
    assert plain.output_ids == ours.output_ids == ref
    assert ours.stats()["mean_accepted"] >= 6 > plain.stats()["mean_accepted"]


def test_api_reference_text_and_trace_config(tiny_dir):
    model, tok = load(tiny_dir)
    prompt = "def x ( y ) :"
    greedy = run(model, tok, prompt, "greedy", max_new_tokens=24)
    tr = run(model, tok, prompt, "prompt_lookup", max_new_tokens=24, reference=[greedy.text, "return y"])
    assert tr.output_ids == greedy.output_ids
    assert tr.config["references"] == 2 and "reference" in {o for s in tr.steps for o in s.origins}
    with pytest.raises(ValueError, match="prompt_lookup"):
        run(model, tok, prompt, "lookahead", max_new_tokens=4, reference="return y")


@pytest.mark.parametrize("bad,needle", [("", "empty"), ("   \n", "empty"), (["ok", ""], "reference 2 is empty"),
                                        ("x" * (MAX_REFERENCE_CHARS + 1), "too long")])
def test_bad_reference_texts(bad, needle):
    with pytest.raises(ValueError, match=needle):
        check_references(bad)


def test_bad_reference_files(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "bin.dat").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    for name, needle in [("empty.txt", "empty"), ("bin.dat", "binary"), ("latin1.txt", "binary"),
                         ("missing.txt", "does not exist")]:
        with pytest.raises(ValueError, match=needle):
            read_reference(tmp_path / name)


def cli_error(tiny_dir, capsys, *args) -> str:
    assert main(["generate", "--model", tiny_dir, "--prompt", "def x ( y ) :", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    return lines[0]


def test_cli_bad_input_one_line_each(tiny_dir, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01\x02")
    (tmp_path / "big.txt").write_text("y " * MAX_REFERENCE_CHARS)
    (tmp_path / "ok.txt").write_text("return y + 1")
    pl = ["--method", "prompt_lookup", "--reference"]
    assert "empty" in cli_error(tiny_dir, capsys, *pl, str(tmp_path / "empty.txt"))
    assert "binary" in cli_error(tiny_dir, capsys, *pl, str(tmp_path / "bin.dat"))
    assert "too long" in cli_error(tiny_dir, capsys, *pl, str(tmp_path / "ok.txt"), "--reference", str(tmp_path / "big.txt"))
    assert "prompt_lookup" in cli_error(tiny_dir, capsys, "--method", "lookahead", "--reference", str(tmp_path / "ok.txt"))
    assert "block" in cli_error(tiny_dir, capsys, "--method", "jacobi", "--block", "0")
    assert "jacobi span" in cli_error(tiny_dir, capsys, "--method", "jacobi", "--block", "64", "--max-new-tokens", "450")
    assert "--block" in cli_error(tiny_dir, capsys, "--method", "greedy", "--block", "4")


def test_cli_reference_and_jacobi_runs(tiny_dir, tmp_path, capsys):
    import json
    out = tmp_path / "g.json"
    assert main(["generate", "--model", tiny_dir, "--method", "greedy", "--prompt", "def x ( y ) :",
                 "--max-new-tokens", "24", "--json", str(out)]) == 0
    greedy = json.loads(out.read_text())
    (tmp_path / "ref.txt").write_text(greedy["text"])
    for args in (["--method", "prompt_lookup", "--reference", str(tmp_path / "ref.txt")],
                 ["--method", "jacobi", "--block", "4"], ["--method", "jacobi", "--auto"]):
        assert main(["generate", "--model", tiny_dir, "--prompt", "def x ( y ) :", "--max-new-tokens", "24",
                     "--json", str(out), *args]) == 0
        assert json.loads(out.read_text())["output_ids"] == greedy["output_ids"], args
    err = capsys.readouterr().err
    assert "[reference]" in err and "[auto] block" in err


def test_app_edit_example_copies_20_plus_tokens_a_step_on_the_embedded_model():
    """The app's aggressive-decoding example (reference = the input of the edit) on the shipped target:
    identical to HF greedy, and some steps accept 20+ tokens."""
    from appkit.run.presets import SHIPPED_CPU
    from appkit.page.ui import EDIT_EXAMPLES
    from decoding.exactness import hf_greedy as hf
    prompt, reference_text, method = EDIT_EXAMPLES[0]
    model, tok = load(threads=1)
    tr = run(model, tok, prompt, method, max_new_tokens=160, reference=reference_text, **SHIPPED_CPU[method])
    from decoding.api import eos_of
    assert tr.output_ids == hf(model, tr.prompt_ids, 160, eos_of(model, tok))
    lens = [len(s.accepted) for s in tr.steps if s.kind == "decode"]
    assert max(lens) >= 20 and tr.stats()["mean_accepted"] >= 8, lens
