"""Words a teacher reads aloud must match what was really run or counted: what the shipped datastore holds,
which draft a speculative trace ran, what a roofline axis and the profile's bytes say, what lookahead's
trajectory banner claims."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "assets" / "datastore" / "smollm2" / "datastore.json"


def store_parts() -> dict[str, dict]:
    """The shipped datastore's documents grouped by source folder (chat/, stdlib/), read from its own record."""
    parts: dict[str, dict] = defaultdict(lambda: {"files": 0, "tokens": 0, "names": []})
    meta = json.loads(STORE.read_text())
    for f in meta["files"]:
        p = parts[f["name"].split("/")[0]]
        p["files"] += 1
        p["tokens"] += f["tokens"]
        p["names"].append(f["name"].split("/", 1)[1])
    return {**parts, "total": {"tokens": meta["tokens"]}}


def test_every_description_of_the_shipped_datastore_says_what_is_in_it():
    from appkit.page.lesson import ALL
    from appkit.page.method_controls import DATASTORES
    parts = store_parts()
    chat, lib = parts["chat"], parts["stdlib"]
    assert 0.2 < chat["tokens"] / parts["total"]["tokens"] < 0.3  # "a quarter"
    last_folder = lib["names"][-1].split("/")[0] + "/"
    stop = next(s for s in ALL if s.method == "retrieval")
    said = stop.narration
    for words in (said, (ROOT / "docs" / "retrieval.md").read_text(),
                  (ROOT / "assets" / "datastore" / "README.md").read_text()):
        assert "index of the Python standard library" not in words
        assert f"{parts['total']['tokens']:,}" in words
        assert f"{chat['files']} " in words and f"first {lib['files']} " in words, words[:400]
        assert last_folder in words and lib["names"][0] in words
        assert "a quarter" in words
    label = dict((v, k) for k, v in DATASTORES)["shipped"]
    assert "chat answers" in label and f"up to {last_folder}" in label
    card = (ROOT / "assets" / "datastore" / "README.md").read_text()
    assert f"{chat['tokens']:,}" in card and f"{lib['tokens']:,}" in card


def test_a_speculative_trace_names_the_draft_it_ran_not_the_target(tmp_path, monkeypatch):
    from conftest import tiny
    from decoding import generate
    from decoding.api import build_drafter
    from decoding.methods.draft_model import shipped_draft as sd
    from test_shipped_draft import _draft_folder
    from viz.describe import header_words
    target = tiny("llama", hidden=64, layers=3)
    target.name_or_path_ = "/models/smollm2-135m-instruct"
    folder = _draft_folder(target, tmp_path / "drafts" / "smollm2")
    monkeypatch.setattr(sd, "SHIPPED", folder)
    tr = generate(target, [5, 6, 7, 8, 5, 6, 7], build_drafter(target, None, "speculative", draft_tokens=3),
                  max_new_tokens=6)
    assert tr.config["draft"]["name"] == str(folder)
    words = header_words(tr)
    assert "draft: shipped draft" in words and "smollm2-135m-instruct" not in words.split(" · ")[0]


def test_a_roofline_axis_below_one_reads_as_a_decimal_and_figure_titles_have_their_corner():
    from viz.palette import decade_ticks, si
    ticks = decade_ticks(0.06, 40)["ticktext"]
    assert "0.1" in ticks and not any(t.endswith("m") for t in ticks), ticks
    assert [si(v) for v in (0.1, 0.25, 0.002, 5e-4, 2e9)] == ["0.1", "0.25", "0.002", "500µ", "2G"]
    from appkit.page import ui
    src = Path(ui.__file__).read_text()
    for label in ("roofline", "step latency vs query tokens", "FLOPs vs steps", "operator breakdown (roofline bound)"):
        assert f'gr.Plot(label="{label}", show_label=False' in src  # the figure's own title owns the corner


def test_the_profile_says_its_bytes_are_the_quantised_blocks_the_kernel_streamed():
    from decoding.trace import Trace
    from profiling.flops import bytes_counted, trace_costs
    from viz import step_profile
    d = json.loads((ROOT / "tests" / "fixtures" / "lookahead.json").read_text())
    plain = bytes_counted(d["model"])
    assert plain == f"weights in {d['model'].get('dtype', 'float32')}"
    d["model"] = {**d["model"], "linear_weight_bytes": 3_000_000, "cpu_kernel": {"kernel": "fp32"}}
    said = bytes_counted(d["model"])
    assert said == "weights as the quantised blocks the CPU fp32 kernel streams (3.0 MB a forward)"
    tr = Trace.from_dict(d)
    panel = step_profile.data(tr, trace_costs(d))
    assert panel["bytes_counted"] == said  # the step view's number line shows it after the bytes
    js = (ROOT / "viz" / "page" / "views.js").read_text()
    assert "bytes (${pr.bytes_counted" in js


def test_lookahead_banner_and_trajectory_caption_say_the_same_source():
    """The banner's words for a window n-gram are the captions' words for a window source; the trajectory
    caption takes its words from the step's record (tests/test_captions.py walks every step)."""
    from viz.exports.teach import WANTS
    from viz.steps.pool import SOURCE_WORDS
    banner = WANTS["lookahead"][0]
    js = (ROOT / "viz" / "page" / "views.js").read_text()
    caption = next(line for line in js.splitlines() if "const fromPool" in line)
    same = "harvested from earlier Jacobi windows"
    assert same in banner and same in SOURCE_WORDS["window"]
    assert "here.pw" in caption and "harvested" not in caption  # no source said in JS: the record's words


def test_a_step_cut_by_max_new_tokens_says_it_was_cut():
    from conftest import tiny
    from decoding import generate
    from decoding.api import build_drafter
    from viz.steps import tree
    from viz.steps.stepper_text import caption
    target = tiny("llama", hidden=64, layers=2)
    drafter = build_drafter(target, None, "speculative", draft_model=target, draft_tokens=4, confidence=0.0)  # all kept
    tr = generate(target, [5, 6, 7, 8, 5, 6, 7], drafter, max_new_tokens=7)
    assert tr.stop_reason == "max_new_tokens"
    last = len(tr.steps) - 1
    assert len(tr.steps[last].accepted) < len(tr.steps[last].info["accepted_path"])  # verification said more
    for words in (caption(tr, last), tree.view(tr, last)["title"]):
        assert "Cut: the run reached max new tokens (7) in this step" in words, words
        assert f"kept only {len(tr.steps[last].accepted)} token" in words
    assert "Cut" not in caption(tr, last - 1) and "Cut" not in tree.view(tr, last - 1)["title"]
