"""What a teacher shows agrees with itself. A step's caption tells the same counts as its picture: for every tree-drafting method (speculative,
Medusa, EAGLE) the caption's "accepted k" is the depth of the accepted path the tree view draws, and the
new-token count is the step's accepted tokens."""
from __future__ import annotations

import re

import pytest

from decoding import load, run
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET
from viz.steps.stepper_text import caption

PROMPT = "def fibonacci(n):\n    "


@pytest.fixture(scope="module")
def models():
    return load(EMBEDDED_TARGET), load(EMBEDDED_DRAFT)[0]


@pytest.mark.parametrize("method,params", [("speculative", {"tree": [3, 2, 1]}), ("speculative", {"draft_tokens": 4}),
                                           ("medusa", {}), ("eagle", {})], ids=["tree", "chain", "medusa", "eagle"])
def test_caption_counts_match_the_accepted_path(models, method, params):
    (model, tok), draft = models
    if method == "speculative":
        params = {**params, "draft_model": draft}
    tr = run(model, tok, PROMPT, method, max_new_tokens=48, **params)
    deep = 0
    for k, s in enumerate(tr.steps):
        if s.kind != "decode" or "accepted_path" not in s.info:
            continue
        text = caption(tr, k)
        depth = len(s.info["accepted_path"]) - 1
        m = re.search(r"accepted (\d+)", text)
        cut = len(s.accepted) <= depth  # the run's last step, cut at max-new-tokens: every kept token was drafted
        assert m and int(m.group(1)) == (len(s.accepted) if cut else depth), (k, text, s.info["accepted_path"])
        assert f"{len(s.accepted)} new token" in text, (k, text)
        deep += depth > 0
    assert deep, "no step accepted a drafted token: the check would be vacuous"


def test_the_teaching_preset_puts_the_lesson_values_into_the_fields():
    """Picking "teaching" outside the lesson sets W/N/G to the lesson's W5 N4 G5 (and the other methods'
    teaching values), the values the lesson's own stops run: the run and its stats line then agree."""
    from appkit.page import autofields, lesson
    from appkit.run.settings import FIELDS, Settings

    s = Settings(preset=lesson.TEACH, window=1, ngram=3, guesses=2)
    out = autofields.shown(None, *[getattr(s, f) for f in FIELDS])
    got = {f: u["value"] for f, u in zip(autofields.FIELDS, out) if isinstance(u, dict) and "value" in u}
    assert (got["window"], got["ngram"], got["guesses"]) == (5, 4, 5)
    assert (got["max_ngram"], got["num_tokens"], got["draft_tokens"], got["spec_mode"]) == (3, 10, 4, "chain")
    by_method = {st.method: st.settings for st in lesson.STOPS}
    assert {k: by_method["lookahead"][k] for k in ("window", "ngram", "guesses")} == lesson.TEACHING["lookahead"]


def test_legends_list_only_what_the_run_has(models):
    """Greedy's legends name the prompt, the model's own tokens and x0, not ten origins and six roles; a
    Medusa tree's legend names the heads' teal, not the draft model's orange node it never draws."""
    import viz

    (model, tok), _ = models
    legends = lambda h: " ".join(re.findall(r"<div class='ds-legend'>(.*?)</div>", h))  # noqa: E731
    greedy = legends(viz.step_view_html(run(model, tok, PROMPT, "greedy", max_new_tokens=8)))
    assert "model&#x27;s own next token" in greedy and "role: x0" in greedy
    for absent in ("window", "draft", "stage-2", "lookahead", "EAGLE", "Medusa"):
        assert absent not in greedy, (absent, greedy)
    html = viz.step_view_html(run(model, tok, PROMPT, "medusa", max_new_tokens=16))
    tree = next(x for x in re.findall(r"<div class='ds-legend'>(.*?)</div>", html) if "accepted path" in x)
    assert "Medusa head" in tree and "draft node" not in tree and "stage-2" not in tree, tree
    # every colour the tree and the mask's role strip fill Medusa's nodes with is in their legends
    from viz.palette import ORIGIN_COLORS
    mask = next(x for x in re.findall(r"<div class='ds-legend'>(.*?)</div>", html) if "may attend" in x)
    assert ORIGIN_COLORS["target"] in tree and ORIGIN_COLORS["draft"] not in tree + mask, (tree, mask)
    assert "Medusa head" in mask, mask
