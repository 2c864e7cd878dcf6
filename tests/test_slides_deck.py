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
    steps = [int(x) for x in re.findall(r'<section class="slide" data-step="(\d+)"', html)]
    tr = as_trace(path)
    assert len(steps) == len(d["slides"]) == len(slide_steps(tr)) and 0 < len(steps) <= MAX_SLIDES
    assert len(steps) < len(tr.steps) - 1, "the deck keeps every step: nothing was chosen"
    assert 0 not in steps and "(prefill)" not in html
    assert "no Jacobi window" not in html and "no pool lookup" not in html
    view = browser.new_page(viewport={"width": 1280, "height": 720})
    view.goto(out.as_uri())
    expect(view.locator(".slide.on")).to_have_count(1)
    # the caption as the audience sees it: its CSS size times the SVG's scale on a 1280x720 screen
    px = view.evaluate("""() => { const s = document.querySelector('.slide.on svg');
      const scale = s.getBoundingClientRect().width / s.viewBox.baseVal.width;
      return parseFloat(getComputedStyle(s.querySelector('.ds-caption')).fontSize) * scale; }""")
    assert px >= 16, f"caption renders at {px:.1f} px on a 1280x720 slide"
    view.close()


def test_a_greedy_deck_is_short(browser, tmp_path):
    out, d = deck(browser, ROOT / "tests" / "fixtures" / "greedy.json", tmp_path)
    html = out.read_text()
    assert html.count('<section class="slide"') == len(d["slides"]) <= 6 and "(prefill)" not in html
