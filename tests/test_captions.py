"""Every caption is said from the step's own record: a pool n-gram that a lookahead step copied from its
output is never called a window harvest, a count is the step's count, "Cut" only on the step a run was cut in.

The walk covers every step of every shipped trace (assets/traces) and of the lesson's runs (each stop of the
fallback lesson, run through the app's handlers on the embedded pair, as tests/test_lesson_stops.py does).
The browser's captions (trajectory and pool titles) are computed by viz/page/views.js itself, run in Node
on the same step data the page gets, so the words tested are the words shown."""
from __future__ import annotations

import html
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from decoding.trace import Trace
from viz.counts import step_counts
from viz.exports.teach import teaching_step, want_of
from viz.steps import pool, stepper, trajectory
from viz.steps.cut import cut_words
from viz.steps.stepper_text import caption

ROOT = Path(__file__).resolve().parent.parent
torch.set_num_threads(1)
NODE = shutil.which("node")
HARVEST = "harvested from earlier Jacobi windows"

# Load views.js with the two globals it touches, then print every step's trajectory and pool titles.
JS = """
globalThis.window = globalThis;
globalThis.document = { addEventListener() {} };
require(process.argv[2]);
const V = window.DecodeScopeViews.VIEWS;
const pages = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = pages.map((D) => D.steps.map((s) => ({
  i: s.i,
  trajectory: D.views.includes("trajectory") ? V.trajectory(D, s)[0] : null,
  pool: D.views.includes("pool") ? V.pool(D, s)[0] : null,
})));
process.stdout.write(JSON.stringify(out));
"""


def shipped() -> list[tuple[str, Trace]]:
    return [(p.name, Trace.from_dict(json.loads(p.read_text()))) for p in sorted((ROOT / "assets" / "traces").glob("*.json"))]


@pytest.fixture(scope="module")
def lesson_traces() -> list[tuple[str, Trace]]:
    """Every stop of the fallback lesson (the embedded pair), run as the page runs it."""
    spec = importlib.util.spec_from_file_location("lesson_check", ROOT / "scripts" / "lesson_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    from appkit.page import lesson
    from appkit.run.settings import Settings
    h = check.handlers(lesson.TARGET)
    out = []
    for stop in lesson.stops(lesson.TARGET):
        tr = h.plan(Settings(**lesson.values(stop, lesson.TARGET)), [stop.method]).run(stop.method)
        out.append((f"lesson: {stop.title}", tr))
    return out


def browser_titles(traces: list[tuple[str, Trace]], tmp_path: Path) -> list[list[dict]]:
    pages = [stepper.build(tr) for _, tr in traces]
    script = tmp_path / "titles.js"
    script.write_text(JS)
    r = subprocess.run([NODE, str(script), str(ROOT / "viz" / "page" / "views.js")], input=json.dumps(pages),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def check_captions(name: str, tr: Trace, titles: list[dict]) -> None:
    """Every step's captions against its own record."""
    last = len(tr.steps) - 1
    rows = {r["step"]: r for r in trajectory.data(tr)["rows"]}
    by_index = {t["i"]: t for t in titles}
    for k, s in enumerate(tr.steps):
        where = f"{name} step {s.index}"
        src = pool.chosen_source(s)
        words = caption(tr, k)
        # the narration's source is the chosen candidate's recorded source, and only that
        for other, said in pool.SOURCE_WORDS.items():
            assert (said in words) == (other == src and step_counts(s).guessed > 0 and "candidates" in s.info), (where, words)
        cut = tr.stop_reason == "max_new_tokens" and k == last and "Cut:" in words
        assert ("Cut:" in words) == cut, (where, words)
        seen = by_index.get(s.index, {})
        t = html.unescape(seen.get("trajectory") or "")
        row = rows.get(s.index)
        if t and row and row["step"] == s.index and " from the pool" in t:
            assert row["from_pool"], (where, t)
            n = len(row["from_pool"])
            assert f"and {n} token(s) from the pool" in t, (where, t)
            assert (HARVEST in t) == (src == "window"), (where, src, t)  # the picture's claim is the record's
            if src in ("prompt", "output"):
                assert pool.SOURCE_WORDS[src] in t, (where, t)
        elif t:
            assert HARVEST not in t, (where, t)
        p = html.unescape(seen.get("pool") or "")
        if p and "candidates" in s.info and s.info["candidates"]:
            assert f"→ {len(s.info['candidates'])} candidate(s)" in p, (where, p)
    pick = teaching_step(tr)
    opened = next(s for s in tr.steps if s.index == pick["i"])
    decode = [k for k, s in enumerate(tr.steps) if s.kind != "prefill"]
    assert not cut_words(tr, pick["k"]) or len(decode) == 1, (name, pick)  # a cut step teaches nothing
    if HARVEST in pick["shows"]:
        assert want_of(tr) == "lookahead" and pool.chosen_source(opened) == "window", (name, pick)


def test_every_caption_of_every_shipped_and_lesson_trace_agrees_with_its_step(lesson_traces, tmp_path):
    assert NODE, "the page's views.js runs in Node here: install Debian's nodejs (.ci/run does)"
    traces = shipped() + lesson_traces
    assert {tr.method for _, tr in traces} >= {"lookahead", "jacobi", "prompt_lookup", "speculative"}
    titles = browser_titles(traces, tmp_path)
    for (name, tr), t in zip(traces, titles):
        check_captions(name, tr, t)
    # the walk met pool tokens of each kind a lookahead records, so both sides of the claim were checked
    kinds = {pool.chosen_source(s) for _, tr in traces for r in trajectory.data(tr)["rows"] if r["from_pool"]
             for s in tr.steps if s.index == r["step"]}
    assert {"window", "output"} <= kinds, kinds


def test_the_opening_step_is_never_a_cut_last_step():
    """A run cut by max new tokens in the step that accepted the most guesses (as retrieval's auto preset was,
    opening on "step 77 / 77 ... Cut"): the page opens on the best step that was not cut, the slides skip it."""
    from viz.exports.teach import slide_steps
    from viz.steps.cut import cut_words
    d = json.loads((ROOT / "assets" / "traces" / "prompt_lookup.json").read_text())
    tr = Trace.from_dict(d)
    best = teaching_step(tr)["k"]
    assert step_counts(tr.steps[best]).guessed > 0
    d["steps"] = d["steps"][:best + 1]  # the run stops in its best step, cut by max new tokens
    d["output_ids"] = [t for s in d["steps"] for t in s["accepted"]]
    d["stop_reason"] = "max_new_tokens"
    d["config"] = {**d["config"], "max_new_tokens": len(d["output_ids"])}
    cut = Trace.from_dict(d)
    assert cut_words(cut, best)  # the last step is the cut one, and it accepted the most guesses
    pick = teaching_step(cut)
    assert pick["k"] != best and not cut_words(cut, pick["k"]), pick
    assert best not in slide_steps(cut)
    for name, tr in shipped():  # no shipped trace opens on a cut step either
        assert not cut_words(tr, teaching_step(tr)["k"]), name
