"""The trajectory view: drawn from a jacobi trace and from a lookahead trace's window, cells equal to what
the engine fed the model, states that agree with the final text, linked by position in the step view."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny
from decoding import generate, make_drafter
import viz
from viz import trajectory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]


@pytest.fixture(scope="module")
def runs():
    model = tiny("qwen2", seed=3)
    return {m: generate(model, PROMPT, make_drafter(m, **kw), max_new_tokens=64)
            for m, kw in [("jacobi", dict(block=6)), ("lookahead", dict(window=4, ngram=4, guesses=2)),
                          ("greedy", {})]}


def check_states(tr, d):
    final = tr.prompt_ids + tr.output_ids
    rows_of: dict[int, list] = {}
    for k, r in enumerate(d["rows"]):
        for c in r["cells"]:
            rows_of.setdefault(c["pos"], []).append((k, c))
    for pos, h in rows_of.items():
        for i, (k, c) in enumerate(h):
            right_from_here = all(x["token"] == final[pos] for _, x in h[i:]) if pos < len(final) else False
            first = right_from_here and (i == 0 or h[i - 1][1]["token"] != final[pos])
            assert c["state"] == ("converges" if first else "converged" if right_from_here else "wrong"), (pos, k)


def test_jacobi_rows_are_the_guesses_fed_to_the_model(runs):
    tr = runs["jacobi"]
    d = trajectory.data(tr)
    decode = [s for s in tr.steps if s.kind == "decode"]
    assert [r["step"] for r in d["rows"]] == [s.index for s in decode]
    for r, s in zip(d["rows"], decode):
        assert [c["token"] for c in r["cells"]] == s.tokens[1:] == s.info["jacobi"]["guesses"]
        assert [c["pos"] for c in r["cells"]] == s.positions[1:]
        a0, a1 = r["accepted"]
        assert a1 - a0 == len(s.accepted) - 1  # outlined: the accepted guesses (the last token is the model's)
        assert all(c["state"] != "wrong" for c in r["cells"] if a0 <= c["pos"] < a1)  # accepted = final
    check_states(tr, d)
    assert d["accepted_guesses"] > 0 and 0 < d["right"] < d["cells"]


def test_lookahead_window_gives_the_same_picture(runs):
    tr = runs["lookahead"]
    d = trajectory.data(tr)
    assert d["rows"]
    for r in d["rows"]:
        s = tr.steps[r["step"]]
        newest = {}
        for role, sl, p, t in zip(s.roles, s.slots, s.positions, s.tokens):
            if role == "window" and (p not in newest or sl[0] >= newest[p][0]):
                newest[p] = (sl[0], t)
        assert {c["pos"]: c["token"] for c in r["cells"]} == {p: t for p, (_, t) in newest.items()}
    check_states(tr, d)
    assert trajectory.figure(tr).layout.meta["cells"]
    assert not trajectory.has_trajectory(runs["greedy"])


def test_only_the_guesses_a_step_accepted_are_outlined(runs):
    """A cell is outlined when its own query row is on the step's accepted path: every guess of a Jacobi
    step's accepted prefix; never a lookahead window guess (a lookahead step accepts a verified pool n-gram,
    whatever the window guessed at those positions), whose row names the pool tokens instead."""
    jac = trajectory.data(runs["jacobi"])
    for r in jac["rows"]:
        s = runs["jacobi"].steps[r["step"]]
        assert r["accepted_cells"] == [s.kv_len + i for i in range(1, len(s.accepted))] and not r["from_pool"]
    tr = runs["lookahead"]
    d = trajectory.data(tr)
    pool_steps = [r for r in d["rows"] if len(tr.steps[r["step"]].accepted) > 1]
    assert pool_steps, "the fixture's lookahead run accepts n-grams"
    for r in d["rows"]:
        s = tr.steps[r["step"]]
        assert r["accepted_cells"] == []
        assert len(r["from_pool"]) == s.origins.count("candidate")
        assert all(s.roles[q] != "window" for q in s.kept[1:])
    assert d["accepted_guesses"] == 0 and d["from_pool"] == sum(tr.steps[r["step"]].origins.count("candidate")
                                                                for r in d["rows"]) > 0
    fig = trajectory.figure(tr)
    assert all(sh.line.width == 1 for sh in fig.layout.shapes)  # nothing outlined in the window
    assert "from the pool" in fig.layout.title.text
    html = viz.step_view_html(tr)
    blob = json.loads(re.search(r'<div class="ds-data" hidden style="display:none">(.*?)</div>', html, re.S).group(1))
    assert all(row["a"] == [] for row in blob["trajectory"]["rows"])
    assert [len(row["p"]) for row in blob["trajectory"]["rows"]] == [len(r["from_pool"]) for r in d["rows"]]


def test_step_view_adds_the_trajectory_for_jacobi_and_lookahead(runs):
    for name, tr in runs.items():
        html = viz.step_view_html(tr)
        blob = json.loads(re.search(r'<div class="ds-data" hidden style="display:none">(.*?)</div>', html, re.S).group(1))
        assert ("trajectory" in blob["views"]) == (name != "greedy")
        if name == "jacobi":
            assert "tree" not in blob["views"] and blob["steps"][2]["r"] == "x" + "j" * 6
            t = trajectory.data(tr)
            assert [[c[0], c[1]] for c in blob["trajectory"]["rows"][5]["c"]] == \
                [[c["pos"], c["token"]] for c in t["rows"][5]["cells"]]


PROBE = """<script>window.addEventListener("load", () => setTimeout(() => {
  const v = '.ds-plot[data-view="trajectory"]';
  const log = [document.querySelectorAll(`${v} td[data-pos]`).length > 0 ? "cells" : "none"];
  log.push(document.querySelector(`${v} .ds-vt`).textContent.startsWith("Trajectory of the Jacobi block") ? "title" : "?");
  log.push(document.querySelector(`${v} tr.ds-chosen th`).textContent);
  const tok = [...document.querySelectorAll('.ds-text .ds-tok')].find((t) => t.dataset.step === "6");
  tok.click();  // select it: the step moves and its position is outlined in the trajectory
  log.push(String(document.querySelectorAll(`${v} .ds-selcell`).length > 0));
  const probe = document.createElement("pre"); probe.id = "probe"; probe.textContent = log.join("|");
  document.body.appendChild(probe);
}, 50));</script>"""


def test_trajectory_view_draws_and_links_in_chromium(runs, tmp_path):
    import screenshots
    page = viz.write_report(runs["jacobi"], tmp_path / "r.html")
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = subprocess.run([screenshots.chromium(), *screenshots.CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p'}",
                          "--dump-dom", probe.as_uri() + "#step=4"], capture_output=True, text=True, timeout=60).stdout
    assert '<pre id="probe">cells|title|▶ step 4|true</pre>' in dom
