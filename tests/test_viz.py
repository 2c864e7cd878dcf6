"""viz/: every view builds from recorded traces of every method and draws exactly what the trace says."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from decoding.engine.masks import tree_visibility
from decoding.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import viz  # noqa: E402
from viz import costs as profile, mask, pool, report, stepper, tokens, tree, window  # noqa: E402
from viz.common import ORIGIN_COLORS  # noqa: E402

FIX = Path(__file__).parent / "fixtures"
METHODS = ["greedy", "lookahead", "prompt_lookup", "speculative_chain", "speculative_tree", "speculative_staged",
           "speculative_recorded"]
VIEWS = [window.figure, pool.figure, mask.figure, tree.figure]


def load(name: str) -> Trace:
    return Trace.load(FIX / f"{name}.json")


def prof(name: str) -> dict:
    return json.loads((FIX / f"profile_{name}.json").read_text())


@pytest.mark.parametrize("name", METHODS)
def test_every_view_builds_for_every_step(name):
    tr = load(name)
    for i in range(len(tr.steps)):
        for view in VIEWS:
            assert view(tr, i).to_dict()["layout"] is not None
        assert stepper.caption(tr, i).startswith(f"Step {tr.steps[i].index}")
    pool.run_figure(tr)
    profile.latency_figure([(tr, None)])
    assert tokens.html(tr, "origin") and tokens.html(tr, "step")
    assert 'class="ds-stepper"' in viz.step_view_html(tr)


def test_fixtures_cover_each_method():
    methods = {load(n).method for n in METHODS}
    assert methods == {"greedy", "lookahead", "prompt_lookup", "speculative"}
    shapes = {(load(n).config["mode"], load(n).config["staged"]) for n in METHODS if n.startswith("spec")}
    assert shapes == {("chain", False), ("tree", False), ("tree", True)}


def test_window_cells_equal_the_trace_window():
    tr = load("lookahead")
    seen = 0
    for i, s in enumerate(tr.steps):
        d = window.data(tr, i)
        if s.kind == "prefill":
            assert d is None
            continue
        seen += 1
        w = s.info["window"]
        assert [c["token"] for c in d["levels"][0][1:]] == w[0]
        for lv in range(1, len(w)):
            assert [c["token"] for c in d["levels"][lv]] == w[lv]
        assert d["x0"]["token"] == s.tokens[0] and d["x0"]["pos"] == s.positions[0]
        for row in d["levels"]:
            for c in row:
                assert c["pos"] == s.positions[c["query_index"]] == s.positions[0] + c["level"] + c["col"]
        assert [c["token"] for c in d["new"]] == s.info["window_next"][-1]
        assert d["harvested"] == s.info["harvested"]
        labels = window.figure(tr, i).data[0].text
        assert len(labels) == sum(len(r) for r in d["levels"]) + len(d["new"])
    assert seen == len(tr.steps) - 1


def test_window_age_follows_the_previous_steps_output():
    # a level's producing step must have output exactly that level (window_next[-1] of that step)
    tr = load("lookahead")
    for i, s in enumerate(tr.steps[1:], start=1):
        d = window.data(tr, i)
        top = d["levels"][-1]
        if i >= 2 and len(s.info["window"]) > 1:
            assert top[0]["produced"] == i - 1
            assert [c["token"] for c in top] == tr.steps[i - 1].info["window_next"][-1]


@pytest.mark.parametrize("name", METHODS)
def test_mask_matrix_equals_engine_mask(name):
    tr = load(name)
    for i, s in enumerate(tr.steps):
        d = mask.data(tr, i)
        assert np.array_equal(np.array(d["matrix"], dtype=bool), tree_visibility(s.parents))
        z = np.array(mask.figure(tr, i, max_tokens=10_000).data[0].z)
        drawn = z[:, 1:] if s.kv_len else z
        assert np.array_equal(drawn.astype(bool), tree_visibility(s.parents))
        assert len(d["labels"]) == s.n_query


def test_mask_is_the_papers_21x21_for_n4_w5_g2():
    tr = load("lookahead")
    assert (tr.config["window"], tr.config["ngram"], tr.config["guesses"]) == (5, 4, 2)
    i = next(k for k, s in enumerate(tr.steps) if s.n_query == 21)
    d = mask.data(tr, i)
    assert d["relative_positions"] == [0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 1, 2, 3, 1, 2, 3]
    # the paper's rules, written independently of the engine (docs/engineering-notes.md, "Lookahead paper")
    W, idx = 5, {}
    idx[(0, 0)] = 0
    for j in range(1, W):
        idx[(0, j)] = j
    for lev in (1, 2):
        for j in range(W):
            idx[(lev, j)] = W + (lev - 1) * W + j
    want = np.zeros((21, 21), dtype=bool)
    for (lev, j), q in idx.items():
        for jj in range(j + 1) if lev == 0 else range(j + 1):
            want[q, idx[(0, jj)]] = True
        for ll in range(1, lev + 1):
            want[q, idx[(ll, j)]] = True
    for g in range(2):
        for t in range(3):
            q = 15 + 3 * g + t
            want[q, 0] = True
            want[q, 15 + 3 * g:q + 1] = True
    assert np.array_equal(np.array(d["matrix"], dtype=bool), want)
    assert d["labels"][:2] == ["x0·0", "L0·1"] and d["labels"][15] == "c0·1"


@pytest.mark.parametrize("name", ["lookahead", "prompt_lookup"])
def test_pool_view_equals_trace_info(name):
    tr = load(name)
    hits = 0
    for i, s in enumerate(tr.steps):
        d = pool.data(tr, i)
        if "candidates" not in s.info:
            assert d is None
            continue
        assert d["candidates"] == s.info["candidates"]
        assert d["matched"] == s.info["matched"] and d["chosen"] == s.info["chosen"]
        assert d["accepted"] == s.accepted
        key = s.info.get("pool_key", s.info.get("key"))
        assert d["key"] == (key if isinstance(key, list) else [key])
        if d["candidates"]:
            hits += 1
            drawn = list(pool.figure(tr, i).data[0].text)
            assert drawn == [tr.token_text(t) for c in s.info["candidates"] for t in c]
            if d["chosen"] is not None and i < len(tr.steps) - 1:  # matched prefix + the model's token
                assert s.accepted[:-1] == s.info["candidates"][d["chosen"]][:d["matched"][d["chosen"]]]
    assert hits > 0
    run = pool.run_data(tr)
    steps = [s for s in tr.steps if "candidates" in s.info]
    assert run["pool_size"] == [s.info.get("pool_size") for s in steps]
    assert run["found"] == [bool(s.info["candidates"]) for s in steps]


@pytest.mark.parametrize("name", ["speculative_chain", "speculative_tree", "speculative_staged",
                                  "speculative_recorded"])
def test_tree_view_equals_trace_tree(name):
    tr = load(name)
    for i, s in enumerate(tr.steps[1:], start=1):
        d = tree.data(tr, i)
        t = s.info["tree"]
        assert [n["token"] for n in d["nodes"]] == t["tokens"]
        assert [n["parent"] for n in d["nodes"]] == t["parents"]
        assert [n["draft_prob"] for n in d["nodes"]] == t["draft_prob"]
        assert [n["target_prob"] for n in d["nodes"]] == t["target_prob"]
        assert [n["origin"] for n in d["nodes"]] == t["origin"]
        assert [n["id"] for n in d["nodes"] if n["accepted"]] == s.info["accepted_path"]
        assert [n["id"] for n in d["nodes"] if n["rejected"]] == ([] if s.info["first_rejected"] is None
                                                                  else [s.info["first_rejected"]])
        fig = tree.figure(tr, i)
        drawn = [txt for tr_ in fig.data if tr_.mode == "markers+text" for txt in tr_.text]
        assert sorted(drawn) == sorted(tr.token_text(x) for x in t["tokens"])
    if name in ("speculative_staged", "speculative_recorded"):
        assert any("stage2" in s.origins for s in tr.steps)


def test_tree_view_survives_missing_optional_fields():
    d = load("speculative_tree").to_dict()
    for key in ("draft_prob", "target_prob", "origin", "depth"):
        for s in d["steps"][1:]:
            s["info"]["tree"].pop(key)
    for s in d["steps"][1:3]:
        s["info"].pop("accepted_path"); s["info"].pop("first_rejected")
    for s in d["steps"][3:5]:
        s["info"].pop("tree")
    tr = Trace.from_dict(d)
    for i in range(len(tr.steps)):
        tree.figure(tr, i)
        stepper.caption(tr, i)
    dd = tree.data(tr, 1)
    assert dd["accepted_path"] == tr.steps[1].kept and dd["nodes"][1]["draft_prob"] is None
    viz.step_view_html(tr)


@pytest.mark.parametrize("name", METHODS)
def test_token_origins_and_colours_equal_the_trace(name):
    tr = load(name)
    d = tokens.data(tr)
    out = [x for x in d if x["origin"] != "prompt"]
    assert [x["token"] for x in out] == tr.output_ids
    assert [x["origin"] for x in out] == [o for s in tr.steps for o in s.origins]
    assert [x["step"] for x in out] == [s.index for s in tr.steps for _ in s.accepted]
    assert [x["pos"] for x in out] == list(range(len(tr.prompt_ids), len(tr.prompt_ids) + len(tr.output_ids)))
    spans = re.findall(r"data-step='(\d*)' data-pos='(\d+)' data-origin='(\w+)' style='background:(#\w+)'",
                       tokens.html(tr, "origin"))
    assert len(spans) == len(tr.prompt_ids) + len(tr.output_ids)
    for (step, pos, origin, color), x in zip(spans, d):
        assert origin == x["origin"] and color == ORIGIN_COLORS[x["color_key"]] and int(pos) == x["pos"]
        assert step == ("" if x["step"] is None else str(x["step"]))


def test_profile_views_equal_the_profile():
    runs = {n: (load(n), prof(n)) for n in ("greedy", "lookahead", "prompt_lookup")}
    for cd in profile.compare_data(runs):
        tr, p = runs[cd["name"]]
        assert cd["flops"] == [s["total_flops"] for s in p["steps"]]
        assert cd["cum_tokens"] == p["series"]["cum_tokens"] and cd["cum_flops"] == p["series"]["cum_flops"]
        assert cd["cum_tokens"][-1] == len(tr.output_ids)
        assert cd["cum_flops"][-1] == pytest.approx(sum(s["flops"] for s in p["steps"]))
    rf = profile.roofline_data(prof("lookahead"))
    assert rf["intensity"] == [s["intensity"] for s in prof("lookahead")["steps"]]
    assert rf["achieved_flops"] == [s["achieved_flops"] for s in prof("lookahead")["steps"]]
    assert rf["machine"]["peak_flops"] == prof("lookahead")["peaks"]["flops"]
    lat = profile.latency_data([(load("lookahead"), None)])[0]
    decode = [s for s in load("lookahead").steps if s.kind == "decode"]
    assert lat["n_query"] == [s.n_query for s in decode] and lat["wall_ms"] == [s.wall_ms for s in decode]
    flat = {"peak_flops": 1e12, "peak_bw": 1e11, "name": "x",
            "steps": [{"index": 1, "flops": 2e9, "bytes": 1e9, "wall_ms": 2.0, "n_query": 3, "kv_len": 9}]}
    assert profile.roofline_data(flat)["achieved_flops"] == [1e12]  # filled from flops / wall time
    for f in (profile.compare_figure(runs), profile.roofline_figure(flat), profile.latency_figure(runs)):
        assert f.data


def _payload(html: str) -> dict:
    blob = re.search(r'<div class="ds-data" hidden style="display:none">(.*?)</div>', html, re.S).group(1)
    assert "$" not in blob and "`" not in blob
    return json.loads(blob)


@pytest.mark.parametrize("name", ["lookahead", "speculative_staged"])
def test_step_view_sends_the_trace_once(name):
    tr = load(name)
    data = _payload(viz.step_view_html(tr, prof(name) if name == "lookahead" else None))
    assert [s["i"] for s in data["steps"]] == [s.index for s in tr.steps]
    for s, d in zip(tr.steps, data["steps"]):  # the query as the engine recorded it; roles one letter each
        assert d["t"] == s.tokens and d["par"] == s.parents and d["p"] == s.positions and d["a"] == s.accepted
        assert d["r"] == "".join(stepper.ROLE_CODE[r] for r in s.roles) and "figs" not in d
    assert data["steps"][3]["cap"] == viz.caption(tr, 3)
    assert data["palette"] == viz.palette.for_js()
    assert ("window" in data["views"]) == (name == "lookahead") and ("tree" in data["views"]) == (name != "lookahead")
    kw = viz.gradio_html_kwargs()
    assert "DecodeScope" in kw["head"] and "DecodeScope.watch(element)" in kw["js_on_load"]


def test_report_references_no_external_url(tmp_path):
    assert report.external_urls("<a href='https://example.org/x'>") == ["https://example.org/x"]
    runs = {n: (load(n), prof(n)) for n in ("greedy", "lookahead")}
    for name in METHODS:
        path = viz.write_report(load(name), tmp_path / f"{name}.html",
                                profile=prof(name) if name in runs else None, compare=runs)
        page = path.read_text(encoding="utf-8")
        assert report.external_urls(page) == []
        assert not re.search(r"<(script|link|img|iframe|source)\b[^>]*\s(src|href)\s*=", page, re.I)  # nothing loads
        assert not re.search(r"""["'(]//[a-z0-9.-]+\.[a-z]{2,}/""", page, re.I)  # no protocol-relative URL
        assert "Plotly" in page and 'class="ds-data"' in page and "window.DecodeScope" in page


PROBE = """<script>window.addEventListener("load", () => setTimeout(() => {
  const log = [], cap = () => document.querySelector(".ds-caption").textContent.split(":")[0];
  log.push(cap());
  document.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
  document.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
  log.push(cap());
  document.querySelector(".ds-prev").click(); log.push(cap());
  document.querySelector('.ds-text .ds-tok[data-step="3"]').click(); log.push(cap());
  log.push(String(document.querySelectorAll(".ds-text .ds-tok.ds-cur").length));
  document.querySelector('.ds-text .ds-tok[data-step="6"]').click();  // select a token: outlined everywhere
  const outlined = (v) => document.querySelectorAll(`.ds-plot[data-view="${v}"] .ds-selcell`).length;
  log.push(cap(), ["window", "pool", "mask"].map((v) => outlined(v) > 0).join(","));
  log.push(document.querySelector(".ds-selinfo").textContent.startsWith("selected") ? "info" : "none");
  const probe = document.createElement("pre"); probe.id = "probe"; probe.textContent = log.join("|");
  document.body.appendChild(probe);
}, 50));</script>"""


def test_views_render_in_headless_chromium(tmp_path):
    """Open the report from disk in Chromium: the script ran (caption of the chosen step, every view drawn by
    plotly), arrow keys / prev / clicking a token move the step, and a screenshot is written (what
    scripts/screenshots.py does for all views)."""
    from PIL import Image
    import screenshots
    tr = load("lookahead")
    page = viz.write_report(tr, tmp_path / "r.html", profile=prof("lookahead"))
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = subprocess.run([screenshots.chromium(), *screenshots.CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p'}",
                          "--dump-dom", probe.as_uri() + "#step=6"], capture_output=True, text=True, timeout=60).stdout
    assert 'class="ds-caption">Step 6: one forward pass over 21' in dom  # after the probe's clicks
    assert dom.count('class="plot-container plotly"') >= 2 + 2  # cost panel (roofline, FLOPs) + pool run, latency
    for view, tag in (("window", "<table"), ("pool", "<table"), ("mask", "<svg")):  # drawn by stepper.js
        assert f'data-draw="{view}">{tag}' in dom
    n_step3 = len(tr.steps[3].accepted)
    assert f'<pre id="probe">Step 6|Step 8|Step 7|Step 3|{n_step3}|Step 6|true,true,true|info</pre>' in dom
    png = screenshots.shoot(page, tmp_path / "r.png", (1200, 1400), step=6)
    img = Image.open(png).convert("RGB")
    assert img.size == (1200, 1400) and len(img.getcolors(1 << 20)) > 100


# ---- one palette, decade ticks, a lean step view, pruned nodes, plain headers, no server paths

from viz import palette, race, step_profile, sweep  # noqa: E402
from viz import describe  # noqa: E402

ASSETS = ROOT / "assets" / "traces"


def _rgb(c: str) -> tuple[int, int, int]:
    return tuple(int(c.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))


def _dist(a: str, b: str) -> float:
    return sum((x - y) ** 2 for x, y in zip(_rgb(a), _rgb(b))) ** .5


def test_window_ages_never_reuse_an_origin_colour():
    origins = set(palette.ORIGIN_COLORS.values()) | {palette.ROLE_COLORS["x0"]}
    ages = set(palette.AGE_COLORS) | {palette.INIT_COLOR}
    assert not ages & origins
    assert min(_dist(a, o) for a in palette.AGE_COLORS for o in origins) > 60  # not merely a different hex code
    tr = load("lookahead")
    for i in range(1, len(tr.steps)):  # every non-x0 cell of the drawn window is on the age scale
        fig = window.figure(tr, i)
        fills = {sh["fillcolor"] for sh in fig.to_dict()["layout"]["shapes"] if sh.get("fillcolor", "").startswith("#")}
        assert fills <= ages | {palette.ROLE_COLORS["x0"]}
        assert palette.ORIGIN_COLORS["candidate"] not in fills  # green no longer means "new guess"


def test_same_meaning_same_colour_in_every_view():
    la, spec = load("lookahead"), load("speculative_tree")
    # an accepted window n-gram: green in the text and in the pool row that supplied it
    shipped = {x["color_key"] for x in tokens.data(ASSETS / "lookahead_W5_N4_G5.json")}
    assert {"candidate", "text_ngram", "target"} <= shipped  # window and text n-grams told apart
    for i, s in enumerate(la.steps):
        d = pool.data(la, i)
        if not d or d["chosen"] is None or not d["matched"][d["chosen"]]:
            continue
        src = d["sources"][d["chosen"]]
        fills = [sh["fillcolor"] for sh in pool.figure(la, i).to_dict()["layout"]["shapes"]]
        want = palette.ORIGIN_COLORS[palette.token_origin("candidate", src)]
        assert want in fills and tokens.data(la)[len(la.prompt_ids) + sum(len(x.accepted) for x in la.steps[:i])][
            "color_key"] == palette.token_origin("candidate", src)
    # a draft node is orange in the tree and a draft token is orange in the text
    tfig = tree.figure(spec, 2)
    node_colours = {c for t in tfig.data if t.mode == "markers+text" and t.marker.color for c in
                    ([t.marker.color] if isinstance(t.marker.color, str) else t.marker.color)}
    assert palette.ORIGIN_COLORS["draft"] in node_colours
    assert any(x["color_key"] == "draft" for x in tokens.data(spec))
    assert tokens.html(spec).count(palette.ORIGIN_COLORS["draft"]) == sum(o == "draft" for s in spec.steps for o in s.origins)
    # the browser draws with exactly this palette and has no colours of its own (only neutral greys)
    assert _payload(viz.step_view_html(la))["palette"] == palette.for_js()
    for c in re.findall(r"#[0-9a-fA-F]{6}\b", stepper.SCRIPT):
        r, g, b = _rgb(c)
        assert r == g == b, f"stepper.js hard-codes colour {c}"


def test_every_coloured_view_has_a_legend():
    la = load("lookahead")
    html = viz.step_view_html(la)
    for view in ("window", "pool", "mask"):
        box_ = re.search(rf"data-view='{view}'>.*?</div></div>", html, re.S).group(0)
        assert "class='ds-legend'" in box_
    assert [t.name for t in pool.figure(la, 6).data if t.name] == [n for n, _ in palette.pool_legend()]
    assert any(t.name for t in window.figure(la, 6).data) and any(t.name for t in mask.figure(la, 6).data)
    assert any(t.name for t in tree.figure(load("speculative_tree"), 2).data)


def test_method_colours_equal_across_run_charts():
    runs = {n: load(n) for n in ("greedy", "lookahead", "prompt_lookup", "speculative_tree")}
    r = {t.name: t.line.color for t in race.race_figure(runs).data}
    lat = {t.name: t.marker.color for t in profile.latency_figure({n: (t, None) for n, t in runs.items()}).data}
    assert r == lat and len(set(r.values())) == len(r)
    assert r == {n: palette.method_color(n) for n in runs}
    shuffled = dict(reversed(list(runs.items())))  # colour follows the name, not the order
    assert {t.name: t.line.color for t in race.race_figure(shuffled).data} == r
    flops = {t.name: t.line.color for t in profile.compare_figure({n: (load(n), prof(n)) for n in ("greedy", "lookahead")}).data}
    assert flops == {"greedy": r["greedy"], "lookahead": r["lookahead"]}
    pts = [{"N": 1, "W": 0, "compression": 1.0, "flops_per_step": 1e6},
           {"N": 4, "W": 5, "compression": 2.0, "flops_per_step": 2e7}]
    assert sweep.figure(pts).data[0].marker.color == r["greedy"]


def _decades(axis: dict) -> None:
    """Ticks at 1 (and over a span of two decades or less, 2 and 5) times a power of ten, SI labels."""
    assert axis["type"] == "log" and axis["tickmode"] == "array"
    small = axis["range"][1] - axis["range"][0] <= 2
    for v in axis["tickvals"]:
        mant = round(v / 10 ** np.floor(np.log10(v) + 1e-9), 6)
        assert mant in ((1, 2, 5) if small else (1,)), f"tick {v} is not 1 (2, 5) times a power of ten"
    assert len(axis["ticktext"]) == len(axis["tickvals"]) and not any("e" in t for t in axis["ticktext"])


def test_log_axes_are_labelled_by_decades_only():
    flat = {"peak_flops": 1e12, "peak_bw": 1e11, "name": "x",
            "steps": [{"index": 1, "flops": 2e9, "bytes": 1e9, "wall_ms": 2.0, "n_query": 3, "kv_len": 9}]}
    figs = [profile.roofline_figure(prof("lookahead"), load("lookahead")), profile.roofline_figure(flat),
            profile.compare_figure({n: (load(n), prof(n)) for n in ("greedy", "lookahead")}),
            sweep.figure([{"N": 1, "W": 0, "compression": 1.0, "flops_per_step": 3e5},
                          {"N": 4, "W": 5, "compression": 2.0, "flops_per_step": 4e7}])]
    n_log = 0
    for f in figs:
        lay = f.to_dict()["layout"]
        for k, ax in lay.items():
            if k.startswith(("xaxis", "yaxis")) and ax.get("type") == "log":
                _decades(ax)
                n_log += 1
    assert n_log == 6
    d = step_profile.data(load("lookahead"), prof("lookahead"))
    _decades(d["axes"]["intensity"]); _decades(d["axes"]["achieved"])


def long_lookahead(n_steps: int = 91) -> Trace:
    """A 91-step lookahead run built from the recorded fixture's decode steps (re-indexed, positions shifted)."""
    d = load("lookahead").to_dict()
    dec = d["steps"][1:]
    steps, kv, out = [d["steps"][0]], d["steps"][1]["kv_len"], list(d["steps"][0]["accepted"])
    while len(steps) < n_steps:
        s = copy.deepcopy(dec[(len(steps) - 1) % len(dec)])
        shift = kv - s["kv_len"]
        s["index"], s["kv_len"], s["positions"] = len(steps), kv, [p + shift for p in s["positions"]]
        kv += len(s["accepted"])
        out += s["accepted"]
        steps.append(s)
    d.update(steps=steps, output_ids=out)
    d.pop("stats", None)
    return Trace.from_dict(d)


def test_step_view_of_a_91_step_run_is_small_and_fast():
    import time
    tr = long_lookahead()
    assert len(tr.steps) == 91
    viz.step_view_html(tr)  # warm imports
    t0 = time.perf_counter()
    html = viz.step_view_html(tr, prof("lookahead"))
    took = time.perf_counter() - t0
    assert len(html.encode()) < 600_000, len(html.encode())  # the per-step-figure page was 3.5 MB
    assert took < 2.0, took  # 0.1 s here; the old page took 5-10 s on a shared 2-core CPU
    assert '"figs"' not in html and "plotly-graph" not in html  # no pre-rendered per-step figures


def pruned_trace() -> Trace:
    d = load("speculative_tree").to_dict()
    d["config"]["confidence"] = 0.4
    d["steps"][2]["info"]["tree"]["pruned"] = {"parents": [1, 0], "tokens": [7, 9], "draft_prob": [0.21, 0.05]}
    return Trace.from_dict(d)


def test_pruned_nodes_appear_with_their_probability():
    tr = pruned_trace()
    d = tree.data(tr, 2)
    assert d["cutoff"] == 0.4 and [(n["parent"], n["token"], n["draft_prob"]) for n in d["pruned"]] == \
        [(1, 7, 0.21), (0, 9, 0.05)]
    fig = tree.figure(tr, 2)
    texts = [t for tr_ in fig.data if tr_.text is not None for t in tr_.text]
    assert any("p=0.21 < cutoff 0.40" in t for t in texts) and any("p=0.05 < cutoff 0.40" in t for t in texts)
    assert "cutoff 0.40" in fig.layout.title.text
    assert "2 more proposed but pruned" in viz.caption(tr, 2)
    data = _payload(viz.step_view_html(tr))
    styles = [data["styles"][n[2]] for n in data["steps"][2]["tv"]["n"]]  # the page's nodes
    labels = [data["strs"][st[1]] for st in styles if st[5] & 2]  # the pruned ones
    assert data["cutoff"] == 0.4 and [lab.split(" · ")[1] for lab in labels] == ["p=0.21 < cutoff 0.40", "p=0.05 < cutoff 0.40"]
    assert tree.data(load("speculative_tree"), 2)["pruned"] == []  # old traces: nothing drawn
    old = Trace.from_dict({**load("speculative_tree").to_dict(), "config": {**load("speculative_tree").config,
                                                                           "confidence": 0.4}})
    assert "not recorded" in tree.figure(old, 2).layout.title.text  # a cutoff, but no count we cannot know
    assert "pruned" not in viz.caption(load("speculative_tree"), 2)


def test_headers_use_plain_words_and_no_server_paths(tmp_path):
    assert describe.short_name("/work/main/assets/target") == "assets/target"
    assert describe.short_name("C:\\models\\tiny\\draft") == "tiny/draft" and describe.short_name("~/m/x/y") == "x/y"
    assert describe.short_name("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    la, spec = Trace.load(ASSETS / "lookahead_W5_N4_G5.json"), Trace.load(ASSETS / "speculative_tree_3-2-1.json")
    assert la.model["name"] == "smollm2-135m-instruct"  # shipped traces are recorded without server paths ...
    la.model = {**la.model, "name": "/work/main/assets/target", "recorded_on": "/srv/box/cpu"}  # ... others may not
    assert describe.config_words(la).startswith("lookahead · W 5 · N 4 · G 5")
    assert describe.config_words(spec).startswith("speculative tree 3,2,1 · cutoff 0.40 · draft: shipped draft "
                                                  "(assets/drafts/smollm2")
    embedded = Trace.from_dict({**spec.to_dict(), "config": {**spec.config, "draft": {"name": "/srv/x/assets/draft"}}})
    assert describe.config_words(embedded).startswith("speculative tree 3,2,1 · cutoff 0.40 · draft: embedded draft")
    for tr in (la, spec, Trace.load(ASSETS / "prompt_lookup.json"), Trace.load(ASSETS / "speculative_staged_chain.json")):
        head = re.search(r'<div class="ds-head">(.*?)</div>', viz.step_view_html(tr)).group(1)
        assert "{" not in head and '"' not in head and "recorded on cpu" in head  # no JSON; where it was recorded
        page = viz.report.report_html(tr, title="/home/me/run.html")
        for text in (head, page):
            assert not re.search(r"(?<![\w.:/])(/work|/home|/root|/tmp|/Users|~/|[A-Z]:\\)", text), "server path leaked"


def test_step_profile_data_and_greedy_line():
    from profiling.flops import arch_of, step_cost
    tr, p = load("lookahead"), prof("lookahead")
    d = step_profile.data(tr, p)
    assert [r["index"] for r in d["steps"]] == [s["index"] for s in p["steps"]]
    assert [r["flops"] for r in d["steps"]] == [s["flops"] for s in p["steps"]]
    assert d["steps"][-1]["cum_tokens"] == len(tr.output_ids) and d["roof"]["flops"] == p["peaks"]["flops"]
    a, P = arch_of(tr.model["config"]), len(tr.prompt_ids)
    want = step_cost(a, P, 0)["flops"] + sum(step_cost(a, 1, P + j - 1)["flops"] for j in range(1, len(tr.output_ids)))
    assert d["greedy"]["tokens"][-1] == len(tr.output_ids) and d["greedy"]["flops"][-1] == want
    from profiling import trace_costs  # the plain per-step list works too (times from the trace, no roof)
    d2 = step_profile.data(tr, trace_costs(tr))
    assert d2["roof"] is None and [r["ms"] for r in d2["steps"]] == [s.wall_ms for s in tr.steps]
    d3 = step_profile.data(tr, trace_costs(tr), peaks={"flops": 1e11, "bandwidth": 2e10, "device": "/srv/x/cpu"})
    assert d3["roof"]["ridge"] == 5.0 and d3["roof"]["device"] == "x/cpu"  # the app's path: analytic costs + peaks
    assert step_profile.data(tr, None) is None
    html = viz.step_view_html(tr, p)
    assert "data-view='roofline'" in html and "data-view='cumflops'" in html


def test_narrow_page_does_not_overflow(tmp_path):
    """At 400 px: nothing wider than the page; wide pictures scroll in their own box; plots stack."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("no /usr/bin/chromium")
    page_path = viz.write_report(load("lookahead"), tmp_path / "r.html", profile=prof("lookahead"))
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        pg = b.new_page(viewport={"width": 400, "height": 900})
        pg.goto(page_path.as_uri() + "#step=6")
        pg.wait_for_selector(".ds-scroll svg", timeout=20_000)
        res = pg.evaluate("""() => {
          const vw = document.documentElement.clientWidth, bad = [];
          document.querySelectorAll("body *").forEach((e) => { const r = e.getBoundingClientRect();
            if (r.right > vw + 1 && !e.closest(".ds-scroll") && !e.closest(".ds-static") && !e.closest(".ds-controls")) bad.push(e.tagName + "." + e.className); });
          const plots = [...document.querySelectorAll(".ds-stepper .ds-plot")].map((e) => e.getBoundingClientRect().left);
          const mask = document.querySelector('.ds-scroll[data-draw="mask"]');
          return {vw, sw: document.documentElement.scrollWidth, bad: bad.slice(0, 5), lefts: plots,
                  maskScrolls: getComputedStyle(mask).overflowX, maskWide: mask.scrollWidth > mask.clientWidth};
        }""")
        b.close()
    assert res["sw"] <= res["vw"] == 400 and res["bad"] == []
    assert res["maskScrolls"] == "auto" and res["maskWide"]
    assert len(set(round(x) for x in res["lefts"])) == 1  # stacked: every view starts at the same x


def test_browser_draws_pruned_nodes_and_follows_the_step_in_the_cost_panel(tmp_path):
    """What stepper.js draws: pruned nodes with their probability against the cutoff, and a cost panel whose
    numbers and roofline point follow the selected step."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("no /usr/bin/chromium")
    spec = viz.write_report(pruned_trace(), tmp_path / "s.html")
    la = viz.write_report(load("lookahead"), tmp_path / "l.html", profile=prof("lookahead"))
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        pg = b.new_page(viewport={"width": 1200, "height": 900})
        pg.goto(spec.as_uri() + "#step=2")
        pg.wait_for_selector(".ds-plot[data-view='tree'] svg", timeout=20_000)
        tree_text = pg.inner_text(".ds-plot[data-view='tree']")
        pg.goto(la.as_uri() + "#step=6")
        pg.wait_for_selector(".ds-run-plot[data-view='roofline'] .main-svg", timeout=20_000)
        before = pg.inner_text(".ds-prof-num")
        pg.click(".ds-next")
        after = pg.inner_text(".ds-prof-num")
        point = pg.evaluate("() => { const d = document.querySelector('.ds-run-plot[data-view=\"roofline\"]').data;"
                            " return d[d.length - 1].customdata; }")
        b.close()
    assert "p=0.21 < cutoff 0.40" in tree_text and "p=0.05 < cutoff 0.40" in tree_text
    assert "cutoff 0.40: 2 proposed node(s) below it pruned" in tree_text
    st = {s["index"]: s for s in prof("lookahead")["steps"]}
    assert before.startswith("step 6:") and after.startswith("step 7:") and point == [7]
    assert f"{st[7]['n_query']} query tokens" in after


def test_pool_browser_lists_the_rebuilt_pool_by_key(tiny_models, tmp_path):
    """The step view carries each step's pool delta; Chromium's pool browser at step k lists exactly the pool
    viz.pool.contents rebuilds (= the engine's pool, tests/test_pool.py), the looked-up key first and marked."""
    import screenshots
    from decoding.methods.windows.lookahead import Lookahead
    from decoding.engine.runner import generate
    tr = generate(tiny_models["llama"], [5, 9, 3, 5, 9, 7, 5, 9, 3, 11, 5, 9], Lookahead(window=4, ngram=3, guesses=2,
                  pool_cap=1), max_new_tokens=16)
    data = _payload(viz.step_view_html(tr))
    assert [d["info"].get("pool_delta") for d in data["steps"]] == [s.info.get("pool_delta") for s in tr.steps]
    k = tr.steps[-3].index
    page = viz.write_report(tr, tmp_path / "r.html")
    dom = subprocess.run([screenshots.chromium(), *screenshots.CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p'}",
                          "--dump-dom", page.as_uri() + f"#step={k}"], capture_output=True, text=True, timeout=60).stdout
    box = re.search(r'<details class="ds-poolbrowse">(.*?)</details>', dom, re.S).group(1)
    assert f"pool after step {k}:" in box
    rows = re.findall(r'<tr class="([^"]*)" data-key="(\d+)">(.*?)</tr>', box, re.S)
    shown = {int(key): {tuple(int(t) for t in g.split(",")) for g in re.findall(r'data-g="([\d,]+)"', body)}
             for _, key, body in rows}
    want = pool.contents(tr, k)
    assert shown == {key: v["text"] | v["window"] for key, v in want.items()} and len(shown) > 3
    assert rows[0][0] == "ds-poolkey" and int(rows[0][1]) == tr.steps[-3].info["pool_key"]
    assert sum(r[0] == "ds-poolkey" for r in rows) == 1


def test_side_by_side_strips_match_the_traces():
    """Each strip cell is one step of its run, spanning exactly the output positions that step produced."""
    from viz import side_by_side
    runs = {"greedy": load("greedy"), "lookahead": load("lookahead")}
    rows = side_by_side.data(runs)
    for r in rows:
        tr = runs[r["name"]]
        assert [t for c in r["cells"] for t in c["tokens"]] == tr.output_ids[:side_by_side.MAX_TOKENS]
        assert [c["start"] for c in r["cells"]] == list(np.cumsum([0] + [len(c["tokens"]) for c in r["cells"]])[:-1])
    assert side_by_side.default_pair(["greedy", "lookahead", "prompt_lookup"], "prompt_lookup") == ("greedy", "prompt_lookup")
    assert side_by_side.default_pair(["lookahead", "jacobi"]) == ("lookahead", "jacobi")
    html = side_by_side.linked_html(runs, "lookahead")
    assert html.count("<template class='ds-sbs-t'") == 2 and html.count("class='ds-sbs-cell'") == sum(r["steps"] for r in rows)


def test_side_by_side_page_links_two_step_views_by_output_position(tmp_path, capsys):
    """python -m viz side-by-side: clicking lookahead's 4-token cell shows, on the left, greedy's step for the
    same output position; stepping the left view moves the right one; picking another run keeps the
    position; the page says how many steps each run spent on those positions."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    assert Path("/usr/bin/chromium").exists(), "Chromium missing: apt-get install -y chromium"
    files = [str(FIX / f"{m}.json") for m in ("greedy", "lookahead", "prompt_lookup")]
    out = tmp_path / "sbs.html"
    from viz.__main__ import main as viz_main
    assert viz_main(["side-by-side", *files, "-o", str(out)]) == 0 and out.exists()
    capsys.readouterr()
    assert viz_main(["side-by-side", files[0]]) == 2
    assert capsys.readouterr().err.strip() == "error: side-by-side needs two or more trace files"
    g, la = load("greedy"), load("lookahead")
    wide = next(s for s in la.steps if len(s.accepted) > 1)
    start = sum(len(s.accepted) for s in la.steps if s.index < wide.index)
    greedy_step = [s.index for s in g.steps for _ in s.accepted][start]
    steps = "() => [...document.querySelectorAll('.ds-sbs-col .ds-stepper')].map(e => parseInt(e.dataset.step, 10))"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        pg = b.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(out.as_uri())
        pg.wait_for_selector(".ds-sbs-col[data-side=right] .ds-stepper .ds-scroll svg", timeout=20_000)
        pg.locator(f".ds-sbs-row[data-run='lookahead'] .ds-sbs-cell[data-step='{wide.index}']").click()
        assert pg.evaluate(steps) == [greedy_step, wide.index]
        n = len(wide.accepted)
        assert f"greedy {n} steps, lookahead 1 step" in pg.locator(".ds-sbs-say").inner_text()
        assert pg.locator(".ds-sbs-row[data-run='greedy'] .ds-sbs-span").count() == n
        pg.locator(".ds-sbs-col[data-side=left] .ds-next").click()  # greedy's next token: still inside the wide step
        assert pg.evaluate(steps) == [greedy_step + 1, wide.index]
        pg.select_option(".ds-sbs-pick[data-side=right]", "prompt_lookup")
        pl = load("prompt_lookup")
        want = [s.index for s in pl.steps for _ in s.accepted][start + 1]
        assert pg.evaluate(steps) == [greedy_step + 1, want]
        b.close()
    assert not errors, errors


def _rgb01(c: str) -> tuple[float, ...]:
    return tuple(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))


def _luminance(c: str) -> float:
    lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in _rgb01(c)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def test_red_means_only_rejected_and_token_text_stays_readable():
    """Red is "rejected": the current-step marker and no accepted token's origin may look like it; every origin
    fill keeps the dark token text readable (WCAG 4.5:1); every origin a method records has a legend entry."""
    import colorsys
    hue = lambda c: colorsys.rgb_to_hsv(*_rgb01(c))  # noqa: E731
    red = hue(palette.STATE_COLORS["rejected"])[0]

    def near_red(c: str) -> bool:  # a saturated colour within 15 degrees of red's hue reads as red
        h, sat, _ = hue(c)
        return sat > 0.35 and min(abs(h - red), 1 - abs(h - red)) * 360 < 15
    assert not near_red(palette.CURRENT_COLOR)
    assert not [k for k, c in palette.ORIGIN_COLORS.items() if near_red(c)]
    text = _luminance("#222222")
    dim = {k: round((_luminance(c) + 0.05) / (text + 0.05), 2) for k, c in palette.ORIGIN_COLORS.items()
           if (_luminance(c) + 0.05) / (text + 0.05) < 4.5}
    assert not dim, dim
    named = {palette.ORIGIN_COLORS[k] for k in palette.ORIGIN_LABELS}  # an alias (prompt_lookup) shares a colour
    unnamed = [k for k in palette.ORIGIN_COLORS if palette._origin_key(k) not in palette.ORIGIN_LABELS
               and palette.ORIGIN_COLORS[k] not in named]
    assert not unnamed, unnamed
    for src in ("datastore", "suffix"):  # retrieval's origins (decoding/methods/retrieve/retrieval.py)
        assert src in palette.ORIGIN_LABELS and dict(palette.origin_legend({src}))
