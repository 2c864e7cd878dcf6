"""The ↓ slides deck is readable on a projector: no prefill slide, no empty "no Jacobi window" panels, only
the steps that teach (capped), and its text scaled to the slide. Real Chromium, a report opened from disk."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

import viz
from viz.common import as_trace
from viz.exports.teach import MAX_SLIDES, slide_steps

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "Chromium missing: apt-get install -y chromium"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def deck(browser, trace_path: Path, tmp_path: Path) -> tuple[Path, dict]:
    tr = as_trace(trace_path)
    page_file = tmp_path / "report.html"
    viz.write_report(tr, page_file)
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.goto(page_file.as_uri())
    expect(page.locator(".ds-stepper .ds-slides").first).to_be_visible(timeout=20000)
    d = json.loads(page.locator(".ds-stepper .ds-data").first.text_content())
    with page.expect_download() as dl:
        page.locator(".ds-stepper .ds-slides").first.click()
    out = tmp_path / dl.value.suggested_filename
    dl.value.save_as(out)
    page.close()
    return out, d


def test_the_deck_skips_the_prefill_and_empty_panels_and_reads_at_projector_size(browser, tmp_path):
    path = ROOT / "assets" / "traces" / "speculative_staged_chain.json"
    out, d = deck(browser, path, tmp_path)
    html = out.read_text()
    steps = list(dict.fromkeys(int(x) for x in re.findall(r'<section class="slide" data-step="(\d+)"', html)))
    tr = as_trace(path)
    assert len(steps) == len(d["slides"]) == len(slide_steps(tr)) and 0 < len(steps) <= MAX_SLIDES
    assert len(steps) < len(tr.steps) - 1, "the deck keeps every step: nothing was chosen"
    assert 0 not in steps and "(prefill)" not in html
    assert "no Jacobi window" not in html and "no pool lookup" not in html
    view = browser.new_page(viewport={"width": 1280, "height": 720})
    view.goto(out.as_uri())
    expect(view.locator(".slide.on")).to_have_count(1)
    # the caption as the audience sees it on a 1280x720 screen (the deck's type scales with the screen)
    px = view.evaluate("parseFloat(getComputedStyle(document.querySelector('.slide.on .sl-cap')).fontSize)")
    assert px >= 16, f"caption renders at {px:.1f} px on a 1280x720 slide"
    view.close()


# Every slide made the only one shown, in turn: the size of each token (a window, pool or trajectory cell; a tree
# or mask label, its font size times the SVG's scale on screen), of each legend entry and of every other text,
# and whether anything reaches past the slide's edges.
MEASURE = """() => {
  const px = (e) => parseFloat(getComputedStyle(e).fontSize);
  const onScreen = (t) => { const m = t.getScreenCTM(); return px(t) * Math.hypot(m.a, m.b); };
  const own = (e) => [...e.childNodes].some((c) => c.nodeType === 3 && c.data.trim());
  return [...document.querySelectorAll(".slide")].map((s, k, all) => {
    all.forEach((o) => o.classList.toggle("on", o === s));
    const box = s.getBoundingClientRect(), view = s.querySelector(".sl-view");
    const tokens = [...view.querySelectorAll("td")].filter(own).map(px)
      .concat([...view.querySelectorAll("svg text")].filter((t) => t.textContent.trim()).map(onScreen));
    const legends = [...s.querySelectorAll(".ds-legend .ds-sw")].map(px);
    const other = [...s.querySelectorAll("*")].filter((e) => own(e) && !e.closest("svg") && e.tagName !== "TD").map(px);
    const out = [...s.querySelectorAll("*")].filter((e) => { const r = e.getBoundingClientRect();
      return r.width && (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1); });
    return { step: s.dataset.step, view: s.dataset.view, pictures: view.children.length, tokens, legends, other,
             note: (s.querySelector(".sl-note") || {}).textContent || "",
             overflow: s.scrollWidth > s.clientWidth + 1 || s.scrollHeight > s.clientHeight + 1,
             outside: out.slice(0, 3).map((e) => e.tagName + "." + e.getAttribute("class")) };
  });
}"""


@pytest.mark.parametrize("name", ["lookahead_W5_N4_G5.json", "speculative_tree_3-2-1.json"])
def test_one_view_per_slide_in_projector_type_and_nothing_past_the_edge(browser, tmp_path, name):
    """At 1920x1080: every token at least 24 px, every legend entry at least 16 px (the old deck drew a whole
    step per slide: tokens at 8-10 px, legends at 5 px), one view per slide, nothing overflowing it, and a mask
    larger than a slide holds is zoomed on the rows that matter, saying which."""
    out, d = deck(browser, ROOT / "assets" / "traces" / name, tmp_path)
    view = browser.new_page(viewport={"width": 1920, "height": 1080})
    view.goto(out.as_uri())
    expect(view.locator(".slide.on")).to_have_count(1)
    slides = view.evaluate(MEASURE)
    view.close()
    views = {s["view"] for s in slides}
    assert len({s["step"] for s in slides}) == len(d["slides"]) and len(slides) > len(d["slides"])
    assert views >= ({"window", "pool", "mask"} if name.startswith("lookahead") else {"tree", "mask"}), views
    for s in slides:
        where = f"step {s['step']} {s['view']}"
        assert s["pictures"] == 1, f"{where}: {s['pictures']} pictures on one slide"
        assert s["tokens"] and min(s["tokens"]) >= 24, f"{where}: tokens at {min(s['tokens'] or [0]):.1f} px"
        assert s["legends"] and min(s["legends"]) >= 16, f"{where}: legend at {min(s['legends'] or [0]):.1f} px"
        assert min(s["other"]) >= 16, f"{where}: text at {min(s['other']):.1f} px"
        assert not s["overflow"] and not s["outside"], f"{where}: past the slide's edge: {s['outside']}"
    if name.startswith("lookahead"):  # a mask over 14 queries: its slide shows the chosen rows and says which
        masks = [s for s in slides if s["view"] == "mask"]
        big = [s for s in masks if (m := re.search(r"\((\d+) of (\d+)\)", s["note"])) and int(m.group(2)) > 14]
        assert big and all(s["note"].startswith("rows shown: ") and int(re.search(r"\((\d+) of", s["note"]).group(1))
                           <= 14 for s in big), [s["note"] for s in masks]


def test_a_greedy_deck_is_short(browser, tmp_path):
    out, d = deck(browser, ROOT / "tests" / "fixtures" / "greedy.json", tmp_path)
    html = out.read_text()
    steps = set(re.findall(r'<section class="slide" data-step="(\d+)"', html))
    assert len(steps) == len(d["slides"]) <= 6 and "(prefill)" not in html
