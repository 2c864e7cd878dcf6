"""↓ SVG writes native SVG (rect and text elements, no HTML inside <foreignObject>, which Inkscape, PowerPoint
and Keynote leave blank): the file parses as XML, every text value is escaped, and the step's tokens are there
as <text>. Real Chromium, a report opened from disk."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from playwright.sync_api import expect

import viz
from viz.common import as_trace

from test_slides_deck import browser  # noqa: F401 (the module's Chromium, one fixture)

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"


def test_svg_export_is_native_svg_with_the_steps_tokens_as_text(browser, tmp_path):
    tr = as_trace(ROOT / "assets" / "traces" / "lookahead_W5_N4_G5.json")
    page_file = viz.write_report(tr, tmp_path / "report.html")
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.goto(page_file.as_uri() + "#step=12")
    expect(page.locator('.ds-stepper .ds-plot[data-view="window"] table').first).to_be_visible(timeout=20000)
    d = json.loads(page.locator(".ds-stepper .ds-data").first.text_content())
    step = d["steps"][12]
    with page.expect_download() as dl:
        page.locator(".ds-stepper .ds-svg").first.click()
    out = tmp_path / dl.value.suggested_filename
    dl.value.save_as(out)
    page.close()
    text = out.read_text(encoding="utf-8")
    assert "foreignObject" not in text and "xhtml" not in text.lower()
    tree = ET.fromstring(text)  # well-formed XML: every value escaped
    assert tree.tag == f"{SVG}svg"
    shown = [" ".join("".join(t.itertext()).split()) for t in tree.iter(f"{SVG}text")]
    assert any(f"step {step['i']} /" in s for s in shown), "the header names no step"
    assert any(s.startswith("Jacobi window at step") for s in shown)
    # every token the window and the pool draw for this step (query roles w, x, c) is a <text> of its own
    drawn = [d["vocab"].get(str(t), f"<{t}>") for t, r in zip(step["t"], step["r"]) if r in "wxc"]
    want = {" ".join(w.split()) for w in drawn if w.strip()}
    assert len(want) >= 5, want
    missing = sorted(want - set(shown))
    assert not missing, f"tokens not written as <text>: {missing[:8]}"
    assert len(list(tree.iter(f"{SVG}rect"))) > 40  # the cells are drawn, filled in their colours
    fills = {r.get("fill") for r in tree.iter(f"{SVG}rect")}
    assert d["palette"]["role"]["x0"] in fills and d["palette"]["state"]["rejected"] in fills, fills
    view = browser.new_page()  # and the file renders on its own in a browser
    view.goto(out.as_uri())
    assert view.locator("text").count() > 40
    view.close()
