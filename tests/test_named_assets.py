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
    from decoding.__main__ import main
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--model", "embedded", "--method", "speculative", "--draft", "embedded-draft",
                 "--tree", "3,2,1", "--prompt", "import os", "--max-new-tokens", "8", "--check-exact",
                 "--json", "run.json"]) == 0, capsys.readouterr().err
    doc = json.loads(Path("run.json").read_text())
    assert doc["model"]["name"] == EMBEDDED_TARGET and len(doc["output_ids"]) == 8


def test_a_missing_draft_is_refused_before_the_target_loads(tmp_path, monkeypatch, capsys):
    """A --draft path that does not exist is one line before any model loads (on Gemma the load took 20-30 s
    before the refusal)."""
    import decoding.cli_setup as cs
    from decoding.__main__ import main

    def no_load(*a, **k):
        raise AssertionError("the target was loaded before the draft was checked")
    monkeypatch.setattr(cs, "load", no_load)
    assert main(["generate", "--model", "embedded", "--method", "speculative", "--draft", str(tmp_path / "nope"),
                 "--prompt", "import os"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file or folder" in err[0], err
