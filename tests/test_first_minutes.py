"""A teacher's first five minutes with the app, in a real headless Chromium (Playwright on /usr/bin/chromium):

- at 1920x1080 the tab bar (Run / Race / Profile / Sweep / Replay) is on the first screen, and the intro that
  used to push it down is one click away (the "About" accordion);
- the method fields on first load are what the first auto run uses (one lookup: appkit/run/presets.py
  before_load is the run's own presets.cached), so "up to N query tokens" does not change after that run;
- "Start the lesson" at 1280x720 says "running…" under the lesson's buttons at once and keeps saying it, in
  view, until the run's first output;
- the lesson's lookahead stop runs a window of W >= 3 (the 2D window is seen) and says why the CPU auto preset
  runs one column and what the wider window costs, in query rows (no timing).

The page is `python app.py`'s: the default model when this machine's cache holds it (as
tests/test_browser_default.py finds it; never downloaded here), else the embedded fallback the suite runs on.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

import app as app_module
from decoding.models import DEFAULT_MODEL, EMBEDDED_TARGET
from decoding.models import fetch as fm
from test_browser import Watch, browser, free_port  # noqa: F401 - browser: the one Chromium fixture

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]
STATS = "#ds-stats"
QUERY = re.compile(r"up to (\d+) query tokens")


@pytest.fixture(scope="module")
def first_served(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    mine = fm.cached(Path.home() / ".cache" / "decodescope")
    if mine is not None:  # the default model as this machine has it (a symlink: nothing fetched, nothing copied)
        (cache / "models").mkdir()
        (cache / "models" / fm.FOLDER).symlink_to(mine, target_is_directory=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("DECODESCOPE_CACHE", str(cache))
    demo = app_module.build_demo(public=False)
    warm(demo)
    _, local, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                              **app_module.launch_kwargs())
    yield local, demo
    demo.close()
    mp.undo()


def warm(demo) -> None:
    """The target loaded and its CPU threads timed once, before any page opens (what a first run would wait
    for): the tests measure the page, and a later page still loads with the build-time fields."""
    from appkit.run.threads import threads_for
    h, p = demo.decodescope["handlers"], demo.decodescope["page"]
    threads_for(*h.cache.get(h.model_name(p.target.value, "target"), h.lim.device("auto"), h.lim.dtype("auto"),
                             p.kernel.value))


def open_at(browser, url: str, width: int, height: int):  # noqa: F811
    page = browser.new_page(viewport={"width": width, "height": height})
    watch = Watch(page, url)
    page.goto(url, wait_until="load", timeout=60000)
    expect(page.locator("#ds-run")).to_be_visible(timeout=30000)
    return page, watch


def fields(page) -> tuple:
    """(W, N, G, the query tokens the budget line says)."""
    got = [page.locator(f"#ds-{k} input").input_value() for k in ("W", "N", "G")]
    m = QUERY.search(page.locator("#ds-budget").inner_text())
    return (*got, m.group(1) if m else None)


def test_the_tabs_are_on_the_first_screen_at_1920x1080(browser, first_served):  # noqa: F811
    page, watch = open_at(browser, first_served[0], 1920, 1080)
    page.wait_for_timeout(300)
    tab = page.locator("button[role=tab][data-tab-id=run]").bounding_box()
    assert tab["y"] + tab["height"] <= 1080, f"the tab bar ends at y={tab['y'] + tab['height']:.0f}, below 1080"
    for sel in ("#ds-lesson-start", "#ds-run", "#ds-method", "#ds-budget"):  # the rest of the first screen stays
        box = page.locator(sel).bounding_box()
        assert box["y"] + box["height"] <= 1080, (sel, box)
    # the intro's exactness sentence, kept one click away
    expect(page.locator("#ds-about")).not_to_contain_text("greedy modes return exactly", use_inner_text=True)
    page.locator("#ds-about").get_by_text("About", exact=False).first.click()
    expect(page.locator("#ds-about")).to_contain_text("greedy modes return exactly greedy's tokens")
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_the_fields_on_first_load_are_what_the_first_run_uses(browser, first_served):  # noqa: F811
    """W, N, G and "up to N query tokens" on a fresh page equal what the first auto run ran (its trace's
    config) and what the fields say after it: the page and the run read one preset."""
    from appkit.run import presets
    url, demo = first_served
    target = demo.decodescope["limits"].default_target
    want = presets.before_load(target, ["lookahead"])["lookahead"]
    page, watch = open_at(browser, url, 1400, 1000)
    before = fields(page)
    assert before[:3] == tuple(str(want[k]) for k in ("window", "ngram", "guesses")), (before, want)
    box = page.locator("#ds-max-new input")
    box.fill("4")
    box.press("Tab")
    page.locator("#ds-run").click()
    page.wait_for_function(f"(document.querySelector('{STATS}')||{{}}).innerText?.includes('lookahead · done')",
                           polling=200, timeout=120000)
    stats = page.locator(STATS).inner_text()
    assert f"auto preset W{want['window']} N{want['ngram']} G{want['guesses']}" in stats, stats
    # the fields' update after the run (autofields.shown: the fields and this note in one event) has landed
    expect(page.locator("#ds-preset-md")).to_contain_text("auto chose", timeout=10000)
    assert fields(page) == before, (before, fields(page))
    expect(page.locator("#ds-preset")).to_contain_text("auto")
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_start_the_lesson_says_running_at_once_and_in_view_at_1280x720(browser, first_served):  # noqa: F811
    page, watch = open_at(browser, first_served[0], 1280, 720)
    page.locator("#ds-lesson-start").click()
    t0 = time.monotonic()
    busy = page.locator("#ds-lesson-status .ds-rs-busy")
    expect(busy).to_be_visible(timeout=1000)
    expect(busy).to_contain_text("running…")
    seen = 0
    while True:  # until the run's first output: tokens in the output box, or its end
        state = page.evaluate("""() => { const o = document.querySelector('#ds-output textarea');
            const s = document.querySelector('#ds-stats'); return [o ? o.value : '', s ? s.innerText : '']; }""")
        if state[0] or " done" in state[1]:
            break
        box = page.evaluate("""() => { const b = document.querySelector('#ds-lesson-status');
            const r = b && b.querySelector('.ds-rs-busy') && b.getBoundingClientRect();
            return r && r.height > 0 ? [r.top, r.bottom, b.innerText] : null; }""")
        assert box and 0 <= box[0] and box[1] <= 720 and "…" in box[2], \
            f"{time.monotonic() - t0:.1f} s after the click the running line is not in view: {box}"
        seen += 1
        assert time.monotonic() - t0 < 120, "the lesson's first stop made no output in 120 s"
        page.wait_for_timeout(100)
    assert seen >= 1
    page.locator("#ds-stop").click()  # then it says how the run ended and where its step view is
    expect(page.locator("#ds-lesson-status")).to_contain_text(re.compile("✓ .*(Stopped|done)"), timeout=60000)
    expect(page.locator("#ds-lesson-status")).to_contain_text("step view")
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


@pytest.mark.parametrize("default", [DEFAULT_MODEL, EMBEDDED_TARGET])
def test_the_lesson_window_is_wide_and_the_page_says_why_auto_runs_one_column(default):
    """The lookahead stop's window has W >= 3 columns (its picture is the 2D window); its narration and the
    Run tab's "How this method works" say why the CPU preset runs W1 and what the wider window costs in rows."""
    from appkit.page import lesson
    from appkit.page.explain import explain
    from appkit.page.tables import display_name
    home = display_name(default)
    stops = lesson.stops(home)
    k = next(i for i, s in enumerate(stops) if s.method == "lookahead")
    v = lesson.values(stops[k], home)
    assert v["window"] >= 3 and stops[k].expect["window"][0] == v["window"], v
    auto = lesson.auto_window("lookahead", home)
    assert auto["window"] == 1
    text = lesson.narration(k, stops, home)
    rows_auto, rows_wide = lesson.rows("lookahead", auto), lesson.rows("lookahead", v)
    assert f"Why auto runs W1 N{auto['ngram']} G{auto['guesses']} on a CPU" in text, text
    assert "query row" in text and "each extra window column" in text, text
    assert f"up to {rows_wide} query rows a step against auto's {rows_auto}" in text, text
    assert not re.search(r"\d\s*(ms|s\b|tokens/s)", text.split("**Why auto")[1].split("**Model")[0]), text  # rows, no timing
    assert "Why auto runs lookahead at W1 on a CPU" in explain("lookahead")


def test_before_load_is_the_runs_own_lookup(tmp_path, monkeypatch):
    """What the page shows before a model is loaded (before_load) equals what the run finds once it is
    (presets.cached on the loaded model), for the default model's name and the embedded target's."""
    from conftest import tiny
    from appkit.page import autofields
    from appkit.run import presets
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path))
    model = tiny("llama")
    methods = autofields.METHODS + autofields.SHARED_METHODS
    for name in (DEFAULT_MODEL, EMBEDDED_TARGET):
        shown = presets.before_load(name, methods)
        ran = {m: presets.cached(name, model, m) for m in methods}
        assert shown == {m: r["params"] for m, r in ran.items() if r is not None}, name
    assert presets.before_load(DEFAULT_MODEL, ["lookahead"]) != presets.before_load(EMBEDDED_TARGET, ["lookahead"])
