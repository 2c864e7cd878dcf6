"""The docs' names for shipped files resolve wherever the package is installed (site-packages has no
assets/ folder): `embedded`, `embedded-draft`, and shipped heads by name; a folder of that name in the working
directory still wins."""
from __future__ import annotations

import json
from pathlib import Path

from decoding.methods.self_draft.heads import SHIPPED_HEADS, heads_folder
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET, resolve


def test_names_resolve_to_the_shipped_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no checkout around: the names must not be paths relative to it
    assert resolve("embedded") == (EMBEDDED_TARGET, None)
    assert resolve("embedded-draft") == (EMBEDDED_DRAFT, None)
    assert heads_folder("embedded", "eagle") == str(SHIPPED_HEADS / "eagle")
    assert heads_folder("smollm2", "medusa") == str(SHIPPED_HEADS / "smollm2" / "medusa")
    (tmp_path / "embedded").mkdir()
    assert resolve("embedded") == ("embedded", None)


def test_the_docs_speculative_command_runs_by_name(tmp_path, monkeypatch, capsys):
    from decoding.cli.main import main
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--model", "embedded", "--method", "speculative", "--draft", "embedded-draft",
                 "--tree", "3,2,1", "--prompt", "import os", "--max-new-tokens", "8", "--check-exact",
                 "--json", "run.json"]) == 0, capsys.readouterr().err
    doc = json.loads(Path("run.json").read_text())
    assert doc["model"]["name"] == EMBEDDED_TARGET and len(doc["output_ids"]) == 8


def test_a_missing_draft_is_refused_before_the_target_loads(tmp_path, monkeypatch, capsys):
    """A --draft path that does not exist is one line before any model loads (on Gemma the load took 20-30 s
    before the refusal)."""
    import decoding.cli.method_flags as cs
    from decoding.cli.main import main

    def no_load(*a, **k):
        raise AssertionError("the target was loaded before the draft was checked")
    monkeypatch.setattr(cs, "load", no_load)
    assert main(["generate", "--model", "embedded", "--method", "speculative", "--draft", str(tmp_path / "nope"),
                 "--prompt", "import os"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file or folder" in err[0], err


def _no_load(monkeypatch):
    import decoding.cli.method_flags as cs

    def no_load(*a, **k):
        raise AssertionError("a model was loaded before the refusal")
    monkeypatch.setattr(cs, "load", no_load)


def _one_refusal(capsys, argv: list[str]) -> str:
    from decoding.cli.main import main
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_a_missing_relative_draft_or_an_uncached_hub_draft_is_refused_before_any_load(tmp_path, monkeypatch, capsys):
    """A relative path under a folder that exists (drafts/mine) and a Hub id that is not cached while offline
    (the suite runs with HF_HUB_OFFLINE=1) are refused in one line before the target loads."""
    _no_load(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drafts").mkdir()
    base = ["generate", "--model", "embedded", "--method", "speculative", "--prompt", "import os"]
    assert "no such file or folder" in _one_refusal(capsys, [*base, "--draft", "drafts/mine"])
    assert "not in the Hugging Face cache" in _one_refusal(capsys, [*base, "--draft", "someone/no-such-draft-xyz"])


def test_heads_no_shipped_set_fits_are_refused_before_the_model_loads(tiny_dir, monkeypatch, capsys):
    """EAGLE / Medusa on a model whose width no shipped heads have: the refusal default_heads gives after the
    load comes before it (Gemma's load took 20-30 s)."""
    _no_load(monkeypatch)
    for method in ("eagle", "medusa"):
        line = _one_refusal(capsys, ["generate", "--model", tiny_dir, "--method", method, "--prompt", "x"])
        assert f"{method} needs heads" in line and "train-heads" in line, line
