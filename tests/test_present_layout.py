"""Presentation mode on a projector: every lesson stop, at 1280x720 and 1920x1080, in a real headless Chromium.

Each stop runs as the lesson runs it (its teaching values through the app's Handlers.plan, the embedded models:
the suite never downloads), its step view is the Run tab's (handlers.step_views) with the lesson's narration
beside it, opened on the step the narration points at; then "present". Asserted on the DOM: no two visible
text boxes overlap (each text's client rects, clipped by its scrolling boxes and the sticky controls; SVG labels
by their boxes), nothing scrolls sideways (the page, the view, every picture's box), every visible text is at
least 20 px at 1920x1080 and 16 px at 1280x720 (legends, notes, narration and the tree's labels were 8-14 px),
and the step's highlighted tokens and first picture are in view (at 1280x720 none of them were). Full screen gave
the view's grid a definite height, so its rows shrank and the token strip was drawn over the caption and the
window's heading. Screenshots of the lesson's stops at both sizes go to out/screenshots/present/ (docs/screenshots
holds a few).
"""
from __future__ import annotations

from collections import Counter

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
  const bar = root.querySelector('.ds-controls').getBoundingClientRect();  // sticky and opaque: what scrolls under it is hidden
  const clip = (el, r) => { let [a, b, c, d] = r;
    for (let e = el.parentElement; e && e !== document.documentElement; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.overflowX !== 'visible' || cs.overflowY !== 'visible') { const q = e.getBoundingClientRect();
        a = Math.max(a, q.left); b = Math.max(b, q.top); c = Math.min(c, q.right); d = Math.min(d, q.bottom); } }
    if (!el.closest('.ds-controls') && a < bar.right && c > bar.left && b < bar.bottom) b = Math.max(b, bar.bottom);
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
# Every visible text's rendered size in px: [size, what]. HTML text: its computed font size times the CSS zoom
# above it (a table scaled to its box); SVG text: its font size times the picture's scale on screen (its laid-out
# width over its viewBox width). Visible: not hidden, and not clipped away by a box that scrolls or hides overflow.
FONTS = """(root) => {
  const out = [], vis = (el) => { for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
    const cs = getComputedStyle(e); if (cs.display === 'none' || cs.visibility === 'hidden' || +cs.opacity === 0) return false; }
    return true; };
  const shown = (el, r) => { let [a, b, c, d] = r;
    for (let e = el.parentElement; e && e !== document.documentElement; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.overflowX !== 'visible' || cs.overflowY !== 'visible') { const q = e.getBoundingClientRect();
        a = Math.max(a, q.left); b = Math.max(b, q.top); c = Math.min(c, q.right); d = Math.min(d, q.bottom); } }
    return c - a > 1 && d - b > 1; };
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let t; (t = walk.nextNode());) {
    const el = t.parentElement;
    if (!t.textContent.trim() || !el || el.closest('svg') || el.closest('.ds-data,style,script') || !vis(el)) continue;
    const range = document.createRange(); range.selectNodeContents(t);
    if (![...range.getClientRects()].some((r) => shown(el, [r.left, r.top, r.right, r.bottom]))) continue;
    out.push([parseFloat(getComputedStyle(el).fontSize) * (el.currentCSSZoom || 1),
      (el.className || el.tagName) + ': ' + t.textContent.trim().slice(0, 30)]); }
  for (const el of root.querySelectorAll('svg text')) {
    if (!el.textContent.trim() || !vis(el)) continue;
    const r = el.getBoundingClientRect();
    if (!shown(el, [r.left, r.top, r.right, r.bottom])) continue;
    const svg = el.ownerSVGElement, vb = svg.viewBox.baseVal, box = svg.getBoundingClientRect();
    out.push([parseFloat(getComputedStyle(el).fontSize) * (vb && vb.width ? box.width / vb.width : 1),
      'svg: ' + el.textContent.trim().slice(0, 30)]); }
  return out; }"""
# The current step on screen: its highlighted tokens (inside the token box's visible part and the window) and its
# first picture's top: [tokens, tokens in view, picture top, picture bottom, window height].
IN_VIEW = """(root) => { const H = window.innerHeight, W = window.innerWidth, box = root.querySelector('.ds-text').getBoundingClientRect();
  const toks = [...root.querySelectorAll('.ds-text .ds-tok.ds-cur')], inside = (r) => r.top >= Math.max(0, box.top) - 1
    && r.bottom <= Math.min(H, box.bottom) + 1 && r.left >= 0 && r.right <= W;
  const pic = root.querySelector('.ds-grid > .ds-plot .ds-scroll').getBoundingClientRect();
  return [toks.length, toks.filter((t) => inside(t.getBoundingClientRect())).length, pic.top, pic.bottom, H]; }"""
FLOOR = {1280: 16, 1920: 20}  # px: read from the back of a room on a 1280x720 and a 1920x1080 projector
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


def test_every_lesson_stop_presents_in_projector_type_with_the_step_in_view(browser, stop_pages):  # noqa: F811
    """At both sizes: no overlap, no sideways scroll, every visible text at the size's floor (a tree or a mask too
    big is cut and says so), and at 1280x720 the step's highlighted tokens and its first picture in view."""
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
            sizes = root.evaluate(FONTS)
            assert len(sizes) > 30, (title, sizes)  # the check saw the view's words
            problems += [(title, f"{w}x{h}", "small type", round(px, 1), what) for px, what in sizes if px < FLOOR[w] - 0.05]
            cur, shown, top, bottom, height = root.evaluate(IN_VIEW)
            if cur and shown < cur:
                problems.append((title, f"{w}x{h}", f"{shown} of {cur} highlighted tokens in view"))
            if not 0 <= top < bottom <= height and not (0 <= top and bottom - top > height / 2 and top < height / 2):
                problems.append((title, f"{w}x{h}", "the step's picture is not in view", round(top), round(bottom)))
            page.screenshot(path=str(SHOTS / "present" / f"lesson_stop{k + 1}_{w}x{h}.png"))
        page.close()
    kinds = Counter((p[0][:24], p[1], p[2] if p[2] != "small type" else f"small type: {p[4].split(':')[0]}") for p in problems)
    assert not problems, "\n".join(map(str, [*kinds.items(), *problems[:40]]))


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
