"""A lesson's words agree with its pictures: one count per step and per run (viz/counts.py), and each stop
opens on a step that shows what its narration promises (viz/exports/teach.py), tested per method on the embedded
models (fp32, greedy)."""
from __future__ import annotations

import copy
import re

import pytest
import torch

from appkit.page import lesson
from decoding import load, run
from decoding.models import ASSETS
from viz.counts import run_counts, step_counts
from viz.describe import header_words
from viz.steps.stepper import build
from viz.steps.stepper_text import caption
from viz.exports.teach import WANTS, teaching_step, want_of

torch.set_num_threads(1)
CASES = {"greedy": ("greedy", {}), "lookahead": ("lookahead", {"window": 5, "ngram": 4, "guesses": 5}),
         "prompt_lookup": ("prompt_lookup", {}), "jacobi": ("jacobi", {"block": 5}),
         "chain": ("speculative", {"draft_tokens": 4}), "tree": ("speculative", {"tree": [3, 2, 1]}),
         "staged": ("speculative", {"tree": [2, 1, 1, 1, 1], "staged": True}),
         "medusa": ("medusa", {}), "eagle": ("eagle", {})}


@pytest.fixture(scope="module")
def runs():
    (model, tok), draft = load(str(ASSETS / "target")), load(str(ASSETS / "draft"))[0]
    out = {}
    for name, (method, params) in CASES.items():
        extra = {"draft_model": draft} if method == "speculative" else {}
        out[name] = run(model, tok, lesson.VECTOR if name in ("lookahead", "prompt_lookup") else lesson.STACK,
                        method, max_new_tokens=32, **params, **extra)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_header_slider_and_captions_use_one_count(runs, name):
    tr = runs[name]
    rc, d = run_counts(tr), build(tr)
    # header "N tokens in P forward passes (the prefill + S decode steps)"; the slider's last label is "step S / S"
    m = re.search(r"(\d+) tokens in (\d+) forward passes \(the prefill \+ (\d+) decode steps", header_words(tr))
    assert m, header_words(tr)
    assert (int(m[1]), int(m[2]), int(m[3])) == (len(tr.output_ids), len(tr.steps), len(tr.steps) - 1)
    assert d["counts"]["decode_steps"] == tr.steps[-1].index == rc.decode_steps
    for k, s in enumerate(tr.steps):
        c, cs = step_counts(s), d["steps"][k]
        assert c.guessed + c.own == len(s.accepted) == c.new and (cs["g"], cs["own"]) == (c.guessed, c.own)
        assert c.own == sum(o == "target" for o in s.origins)
        if s.kind == "decode" and ("candidates" in s.info or "tree" in s.info) and \
                not ("candidates" in s.info and not s.info["candidates"] and "window" not in s.info):
            assert c.words() in caption(tr, k), (k, caption(tr, k))


def test_lookahead_caption_never_says_no_match_beside_accepted_guesses(runs):
    tr = runs["lookahead"]
    for k, s in enumerate(tr.steps[1:], start=1):
        text = caption(tr, k)
        assert ("no candidate matched" in text) == (step_counts(s).guessed == 0), text


@pytest.mark.parametrize("name", list(CASES))
def test_the_opening_step_shows_what_the_narration_promises(runs, name):
    tr = runs[name]
    assert want_of(tr) == ({"medusa": "heads", "eagle": "heads"}.get(name, name))
    pick = teaching_step(tr)
    s = tr.steps[pick["k"]]
    assert s.index == pick["i"] and s.kind == "decode"
    if not pick["found"]:  # said so, in words, and no step of the run shows it
        assert pick["shows"].startswith("This run has no "), pick
        assert not any(WANTS[want_of(tr)][1](x) for x in tr.steps if x.kind == "decode")
        return
    assert WANTS[want_of(tr)][0] in pick["shows"]
    if name == "staged":
        assert "stage2" in s.origins
    if name == "chain":
        assert isinstance(s.info.get("first_rejected"), int) and step_counts(s).guessed > 0
    if name == "tree":
        parents, path = s.info["tree"]["parents"], s.info["accepted_path"]
        assert any(parents[j] == parents[n] for n in path[1:] for j in range(n)), (path, parents)
    if name != "greedy":
        assert step_counts(s).guessed > 0


def test_a_run_without_the_effect_says_so():
    """A staged run whose stage-2 tokens were never accepted: the pick names what is missing."""
    from viz.common import as_trace
    tr = copy.deepcopy(as_trace("tests/fixtures/speculative_staged.json"))
    for s in tr.steps:
        s.origins = ["draft" if o == "stage2" else o for o in s.origins]
    pick = teaching_step(tr)
    assert not pick["found"] and pick["shows"].startswith("This run has no step that accepted stage-2 tokens")


def test_each_stop_says_what_its_opening_step_shows():
    for k, stop in enumerate(lesson.STOPS):
        assert lesson.opens_on(stop) in lesson.narration(k, lesson.STOPS)
    by_title = {s.title: lesson.opens_on(s) for s in lesson.STOPS}
    assert "stage-2" in by_title["Staged speculation: draft the draft"]
    assert "rejected" in by_title["Speculative decoding: a draft chain"]
