"""Presentation mode on a projector: every lesson stop, at 1280x720 and 1920x1080, in a real headless Chromium.

Each stop runs as the lesson runs it (its teaching values through the app's Handlers.plan, the embedded models:
the suite never downloads), its step view is the Run tab's (handlers.step_views) with the lesson's narration
beside it, opened on the step the narration points at; then "present". Asserted on the DOM: no two visible
text boxes overlap (each text's client rects, clipped by its scrolling boxes; SVG labels by their boxes),
nothing scrolls sideways (the page, the view, every picture's box). Full screen gave the view's grid a definite
height, so its rows shrank and the token strip was drawn over the caption and the window's heading.
Screenshots of the lesson's stops at 1920x1080 go to out/screenshots/present/ (docs/screenshots holds a few).
"""
from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from appkit.models.model_cache import ModelCache
from appkit.page import lesson
from appkit.page.tables import public_trace
from appkit.public.limits import Limits
from appkit.run.costs import run_costs
from appkit.run.handlers import Handlers, step_views
from appkit.run.settings import Settings
from decoding.models import EMBEDDED_TARGET
from test_browser import SHOTS, browser  # noqa: F401 - browser: the one Chromium fixture
from viz.steps.stepper import head_html

SIZES = ((1280, 720), (1920, 1080))

# Every visible text box of the step view: [x0, y0, x1, y1, what] (text runs by their client rects, clipped
# by every ancestor that scrolls or hides its overflow; SVG labels by their bounding boxes).
BOXES = """(root) => {
  const out = [], vis = (el) => { for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
    const cs = getComputedStyle(e); if (cs.display === 'none' || cs.visibility === 'hidden' || +cs.opacity === 0) return false; }
    return true; };
  const clip = (el, r) => { let [a, b, c, d] = r;
    for (let e = el.parentElement; e && e !== document.documentElement; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.overflowX !== 'visible' || cs.overflowY !== 'visible') { const q = e.getBoundingClientRect();
        a = Math.max(a, q.left); b = Math.max(b, q.top); c = Math.min(c, q.right); d = Math.min(d, q.bottom); } }
    return c - a > 1 && d - b > 1 ? [a, b, c, d] : null; };
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let t; (t = walk.nextNode());) {
    const el = t.parentElement;
    if (!t.textContent.trim() || !el || el.closest('svg') || el.closest('.ds-data,style,script') || !vis(el)) continue;
    const range = document.createRange(); range.selectNodeContents(t);
    for (const r of range.getClientRects()) { const c = clip(el, [r.left, r.top, r.right, r.bottom]);
      if (c) out.push([...c, (el.className || el.tagName) + ': ' + t.textContent.trim().slice(0, 30)]); } }
  for (const el of root.querySelectorAll('svg text')) {
    if (!el.textContent.trim() || !vis(el)) continue;
    const r = el.getBoundingClientRect(), c = clip(el, [r.left, r.top, r.right, r.bottom]);
    if (c) out.push([...c, 'svg: ' + el.textContent.trim().slice(0, 30)]); }
  return out; }"""
SIDEWAYS = """(root) => [['page', document.documentElement.scrollWidth - document.documentElement.clientWidth],
  ['view', root.scrollWidth - root.clientWidth],
  ...[...root.querySelectorAll('.ds-scroll, .ds-text')].filter((e) => e.offsetParent !== null)
    .map((e) => [(e.closest('[data-view]') || e).dataset.view || e.className, e.scrollWidth - e.clientWidth])]"""


def overlaps(boxes: list, slack: float = 2.0) -> list:
    """Pairs of text boxes that cover each other by more than `slack` px both ways (touching is fine)."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
            if w > slack and h > slack:
                out.append((a[4], b[4], round(w), round(h)))
    return out


@pytest.fixture(scope="module")
def stop_pages():
    """(stop title, the page's HTML) per lesson stop: its run, its step view, its narration beside it."""
    h = Handlers(Limits(public=False), ModelCache())
    md, all_stops, pages = MarkdownIt(), lesson.stops(EMBEDDED_TARGET), []
    for k, stop in enumerate(all_stops):
        p = h.plan(Settings(**lesson.values(stop, EMBEDDED_TARGET)), [stop.method])
        tr = p.run(stop.method)
        public_trace(tr)
        view = step_views(tr, run_costs(tr, p.model), len(tr.steps) - 1)
        narration = md.render(lesson.narration(k, all_stops, EMBEDDED_TARGET))
        pages.append((stop.title, f"""<!doctype html><html><head><meta charset="utf-8">{head_html()}</head><body>
<div id="ds-lesson">{narration}</div><div id="host" data-ds-goto="{lesson.GOTO_BEST}" data-ds-side="#ds-lesson">
{view}</div><script>DecodeScope.watch(document.getElementById('host'))</script></body></html>"""))
    return pages


def test_every_lesson_stop_presents_without_overlap_or_sideways_scroll(browser, stop_pages):  # noqa: F811
    problems = []
    (SHOTS / "present").mkdir(parents=True, exist_ok=True)
    for k, (title, html) in enumerate(stop_pages):
        page = browser.new_page(viewport={"width": SIZES[0][0], "height": SIZES[0][1]})
        page.set_content(html, wait_until="load")
        page.locator("#host .ds-stepper .ds-side").wait_for(timeout=30000)
        page.locator("#host .ds-stepper .ds-present").click()
        page.wait_for_function("document.querySelector('#host .ds-stepper').classList.contains('ds-present')")
        for w, h in SIZES:
            page.set_viewport_size({"width": w, "height": h})
            page.wait_for_timeout(400)
            root = page.locator("#host .ds-stepper")
            assert page.evaluate("document.fullscreenElement === document.querySelector('#host .ds-stepper')")
            boxes = root.evaluate(BOXES)
            assert len(boxes) > 30, (title, boxes)  # the check saw the view's words
            problems += [(title, f"{w}x{h}", "overlap", o) for o in overlaps(boxes)]
            problems += [(title, f"{w}x{h}", "scrolls sideways", n, px) for n, px in root.evaluate(SIDEWAYS) if px > 1]
            if w == 1920:
                page.screenshot(path=str(SHOTS / "present" / f"lesson_stop{k + 1}_1920x1080.png"))
        page.close()
    assert not problems, "\n".join(map(str, problems[:40]))


# The Race's results as a teacher's 10-method race fills them: the longest config words each kind of shape
# gets (presets.describe) and the longest exactness badge (race.badge).
RACE_CONFIGS = ["", "block 8, sized per step", "W1 N3 G2", "max n-gram 3, copy 10, sized per step",
                "budget 64, sized per step", "W4 N3 G4", "staged tree 4,2,2,1, sized per step",
                "tree budget 8, cut 0.4, sized per step", "tree budget 12, cut 0.3, sized per step",
                "depth 6, stop 0.3, sized per step", "tree budget 8, cut 0.4"]
RACE_METHODS = ["greedy", "jacobi", "lookahead", "prompt_lookup", "retrieval", "token_recycling", "speculative",
                "medusa", "eagle", "self_speculative", "hydra"]
# every cell of the results table whose text is not wholly inside the table's visible box, or is cut by its own box
CLIPPED = """() => { const t = document.querySelector('#ds-race-table .table-wrap'), out = [], seen = [];
  let box = t.getBoundingClientRect();
  for (let e = t; e && e !== document.documentElement; e = e.parentElement) {
    const cs = getComputedStyle(e);
    if (cs.overflowX !== 'visible') { const q = e.getBoundingClientRect();
      box = { left: Math.max(box.left, q.left), right: Math.min(box.right, q.right) }; } }
  for (const c of t.querySelectorAll('th, .body-cell')) {  // Gradio 6: header th, virtual rows' div cells
    if (!c.innerText.trim() || !c.getClientRects().length) continue;
    const range = document.createRange(); range.selectNodeContents(c);
    const r = range.getBoundingClientRect();
    const cut = [c, ...c.querySelectorAll('*')].some((e) => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible');
    seen.push(c.innerText.trim());
    if (r.left < box.left - 1 || r.right > box.right + 1 || cut) out.push(c.innerText.trim()); }
  return [seen, out]; }"""


def test_the_race_table_shows_every_cell_whole_at_1920x1080(browser):  # noqa: F811
    """The Race's results table (appkit/page/ui.py race_results, as the Race tab builds it) filled with a 10-method
    race: at 1920x1080 no cell is cut or pushed past the table's edge (the "exact" column read "identi")."""
    import socket

    import gradio as gr

    from appkit.page.tables import race_table
    from appkit.page.ui import CSS, race_results
    rows = [{"method": m, "config": c, "tokens": 80, "steps": 54, "compression": 1.481, "mean accepted": "1.48",
             "tokens/s": 31.4, "runs": 3, "wall s (median)": 2.547, "wall s (min-max)": "2.401-2.913",
             "speedup vs greedy": 0.91, "speedup (min-max)": "0.81-1.02", "step saving vs greedy": 1.48,
             "exact": "reference" if m == "greedy" else "✗ differs from greedy at token 17" if m == "eagle"
             else "✓ identical to greedy"} for m, c in zip(RACE_METHODS, RACE_CONFIGS)]
    with gr.Blocks() as demo:
        race_results(race_table(rows))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, css=CSS)
    try:
        page = browser.new_page(viewport={"width": 1920, "height": 1080})
        page.goto(url)
        page.wait_for_function("[...document.querySelectorAll('#ds-race-table .body-cell')].some((c) => "
                               "c.innerText.includes('identical'))", timeout=60000, polling=500)
        page.wait_for_timeout(500)
        shown, clipped = page.evaluate(CLIPPED)
        assert "✓ identical to greedy" in shown and "reference" in shown and "✗ differs from greedy at token 17" in shown
        assert "speedup (min-max)" in shown and "tree budget 12, cut 0.3, sized per step" in shown  # the check saw the table
        assert clipped == []
        page.close()
    finally:
        demo.close()
