"""viz/ shows its architecture: rooms of at most 20 modules, CLIs only in viz/__main__.py, method colours,
labels and pictures read from the method specs (an unknown method in a trace still draws), and the tree and
mask views drawn one way: the page and the plotly figure place the same Python view-model."""
from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

import viz
from decoding.engine.masks import tree_visibility
from decoding.methods.registry import SPECS
from viz import mask, palette, stepper, tree
from viz.__main__ import main as viz_main
from viz.common import as_trace, is_parent

ROOT = Path(__file__).resolve().parent.parent
VIZ = ROOT / "viz"
FIX = ROOT / "tests" / "fixtures"
CHROMIUM = "/usr/bin/chromium"


def test_picture_modules_hold_no_cli():
    """Only viz/__main__.py parses arguments or imports the CLI helpers; every other module is library code."""
    for path in VIZ.rglob("*.py"):
        if path.name == "__main__.py":
            continue
        tree_ = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree_) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree_) if isinstance(n, ast.ImportFrom)}
        where = path.relative_to(ROOT)
        assert not names & {"argparse", "decoding.cli.habits", "decoding.cli.main"}, (where, names)
        assert not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree_.body), where
        assert "__name__ == \"__main__\"" not in path.read_text(), where


def test_gif_comm_steps_and_lp_window_are_viz_subcommands(tmp_path, capsys):
    lp = FIX / "lookahead.json"
    out = tmp_path / "comm.html"
    assert viz_main(["comm-steps", str(lp), "--out", str(out)]) == 0 and out.stat().st_size > 1000
    out = tmp_path / "w.html"
    assert viz_main(["lp-window", str(lp), "--step", "2", "--out", str(out)]) == 0 and out.exists()
    for page in (tmp_path / "comm.html", out):  # plotly inline, as the report embeds it: no CDN, works offline
        html = page.read_text()
        assert '<script src="https://cdn.plot.ly' not in html, page
        assert "Plotly.newPlot" in html and len(html) > 1_000_000, page
    capsys.readouterr()
    assert viz_main(["lp-window", str(lp), "--step", "999", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--step 999" in err and len(err.splitlines()) == 1, err
    assert viz_main(["gif", str(lp), "--width", "5"]) == 2  # the option's range, as before the move
    assert viz_main(["comm-steps", str(tmp_path / "missing.json")]) == 2


def test_method_colours_labels_and_pictures_come_from_the_specs():
    for name, spec in SPECS.items():
        assert palette.method_color(name) == spec.colour, name
        assert palette.method_label(name) == spec.label, name
        assert palette.method_pictures(name) == tuple(spec.pictures), name
    assert palette.for_js()["method"]["retrieval"] == SPECS["retrieval"].colour
    for f in ("lookahead", "speculative_tree", "prompt_lookup", "greedy"):
        tr = as_trace(FIX / f"{f}.json")
        d = stepper.build(tr)
        assert d["pictures"] == list(SPECS[tr.method].pictures)
        assert ("trajectory" in d["views"]) == ("trajectory" in SPECS[tr.method].pictures)


def test_an_unknown_method_in_a_trace_draws_with_a_fallback_colour_and_an_escaped_name():
    tr = copy.deepcopy(as_trace(FIX / "speculative_tree.json"))
    tr.method = "<b>toy</b>"
    html = viz.step_view_html(tr)
    assert "<b>toy" not in html and "&lt;b&gt;toy" in html
    d = stepper.build(tr)
    assert "tree" in d["views"] and "mask" in d["views"]
    assert palette.method_color(tr.method) in palette.EXTRA_COLORS
    assert viz.report.report_html(tr)


def _cells(view: dict) -> list[set[int]]:
    return [{j for a, b in zip(r[::2], r[1::2]) for j in range(a, b + 1)} for r in view["rows"]]


@pytest.mark.parametrize("name", ["lookahead", "speculative_tree", "speculative_staged", "greedy"])
def test_mask_view_model_is_the_engines_mask_and_the_figure_places_it(name):
    tr = as_trace(FIX / f"{name}.json")
    for k, s in enumerate(tr.steps):
        v = mask.view(tr, k)
        if not s.parents:
            assert v["n"] == 0
            continue
        n = v["n"]
        vis = tree_visibility([p if is_parent(p, i) else -1 for i, p in enumerate(s.parents)])
        assert _cells(v) == [{j for j in range(n) if vis[i, j]} for i in range(n)], (name, k)
        z = mask.figure(tr, k).data[0].z
        off = 1 if v["kv"] else 0
        assert [{j - off for j, c in enumerate(row) if c == 1} for row in z] == _cells(v)


def test_tree_view_model_is_what_the_figure_places():
    tr = as_trace(FIX / "speculative_tree.json")
    v = tree.view(tr, 4)
    fig = tree.figure(tr, 4)
    marks = [t for t in fig.data if t.mode == "markers+text"]
    assert [c for t in marks for c in t.marker.color] == [n["fill"] for n in v["nodes"]]
    assert [c for t in marks for c in t.marker.line.color] == [n["stroke"] for n in v["nodes"]]
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [(t.x[0], t.y[0], t.x[1], t.y[1]) for t in lines] == [(e["x0"], e["y0"], e["x1"], e["y1"]) for e in v["edges"]]
    assert sum(n["rejected"] for n in v["nodes"]) == 1 and any(e["width"] == 4 for e in v["edges"])


def test_the_page_places_exactly_the_view_models(tmp_path):
    """In Chromium: the tree's circles carry the view-model's fills and strokes in its order, its title is the
    view-model's, and the mask has one cell per visible (row, column) of the view-model."""
    tr = as_trace(FIX / "speculative_tree.json")
    page_file = viz.report.write_report(tr, tmp_path / "r.html")
    tv, mv = tree.view(tr, 4), mask.view(tr, 4)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--headless", "--no-sandbox"])
        page = b.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        root = page.locator(".ds-stepper").first
        root.evaluate("(r, i) => r.__ds_goto(i)", 4)
        page.wait_for_function("r => r.dataset.step === '4'", arg=root.element_handle())
        got = page.evaluate("""() => {
          const t = document.querySelector(".ds-plot[data-view=tree]"), m = document.querySelector(".ds-plot[data-view=mask]");
          const path = m.querySelector("path").getAttribute("d");
          return {title: t.querySelector(".ds-vt").textContent, mtitle: m.querySelector(".ds-vt").textContent,
                  fills: [...t.querySelectorAll("circle")].map(c => c.getAttribute("fill")),
                  strokes: [...t.querySelectorAll("circle")].map(c => c.getAttribute("stroke")),
                  lines: t.querySelectorAll("line").length, cells: (path.match(/M/g) || []).length};
        }""")
        b.close()
    assert not errors, errors
    assert got["title"].startswith(tv["title"]) and got["mtitle"].startswith(mv["title"])
    assert got["fills"] == [n["fill"] for n in tv["nodes"]] and got["strokes"] == [n["stroke"] for n in tv["nodes"]]
    assert got["lines"] == len(tv["edges"]) and got["cells"] == sum(len(c) for c in _cells(mv))
