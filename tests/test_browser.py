"""The app in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright; .ci/run installs it),
measuring what a user feels, not only that the page loads:

- a live 400-token lookahead run: at most one update per MIN_INTERVAL_S, each slowing the engine (timed alone
  in the same test) by <= 50 ms, and <= 1.5 s from click to done beyond the engine's own run;
- no main-thread long task over 200 ms while it streams (PerformanceObserver "longtask");
- Stop -> "Stopped after N tokens" within 1.0 s, and the partial run keeps its step view and trace;
- 0 px horizontal overflow at a 400 px wide viewport; 0 requests to any host but the app's;
- the default race: every accelerated method >= 1.2x greedy or one line saying why;
- a bad value gets a message beside the settings and the previous output stays.
Screenshots go to out/screenshots/ (gitignored; the committed ones in docs/screenshots/ come from here).
"""
from __future__ import annotations

import json

import os
import re
import socket
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect, sync_playwright

import app as app_module
from appkit.run.presets import SHIPPED_CPU
from appkit.run.stream import MIN_INTERVAL_S
from appkit.page.ui import VECTOR
from decoding import run

# Gradio's queue builds DataFrames with options pandas 3 deprecates; not ours to fix.
pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]
ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "out" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--no-first-run"]
LONGTASKS = """
window.__longtasks = [];
new PerformanceObserver(l => { for (const e of l.getEntries()) window.__longtasks.push([e.startTime, e.duration]); })
  .observe({type: 'longtask', buffered: true});
"""
# every status line the page shows, as it shows it: the live updates it received
STATS_SEEN = """
window.__stats = [];
new MutationObserver(() => {
  const el = document.querySelector('#ds-stats'), t = el ? el.textContent : '', s = window.__stats;
  if (t && (!s.length || s[s.length - 1][1] !== t)) s.push([performance.now(), t]);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
STATS = "#ds-stats"
LONGTASK_MS = 200
PER_UPDATE_MS = 50  # what one live update may add to the engine's run (measured: see the test)
FIXED_MS = 1500  # click to the engine's start plus its end to the page, on a quiet machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    # the real defaults: the embedded target and draft in assets/ (what `python app.py` serves)
    mp = pytest.MonkeyPatch()
    mp.setenv("DECODESCOPE_CACHE", str(tmp_path_factory.mktemp("cache")))
    demo = app_module.build_demo(public=False)
    _, local, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                              **app_module.launch_kwargs())
    yield local, demo
    demo.close()
    mp.undo()


@pytest.fixture(scope="module")
def url(served):
    return served[0]


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "Chromium missing: apt-get install -y chromium (the CI script does)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


class Watch:
    """Console errors, uncaught page errors and every request to a host other than the app's."""

    def __init__(self, page, base: str):
        self.errors: list[str] = []
        self.external: list[str] = []
        host = urlparse(base).hostname
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

        def seen(req):
            u = urlparse(req.url)
            if u.scheme in ("http", "https", "ws", "wss") and u.hostname not in (host, "localhost", "127.0.0.1"):
                self.external.append(req.url)
        page.on("request", seen)

        def route(r):  # and never let one out
            u = urlparse(r.request.url)
            if u.scheme in ("http", "https", "ws", "wss") and u.hostname not in (host, "localhost", "127.0.0.1"):
                return r.abort()
            return r.continue_()
        page.route("**/*", route)


def open_app(browser, url: str, width: int = 1400):
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.add_init_script(LONGTASKS)
    page.add_init_script(STATS_SEEN)
    watch = Watch(page, url)
    page.goto(url, wait_until="load", timeout=60000)
    expect(page.locator("#ds-run")).to_be_visible(timeout=30000)
    return page, watch


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input")
    box.fill(str(value))
    box.press("Tab")


def wait_stats(page, text: str, timeout_ms: int = 120000) -> None:
    page.wait_for_function(f"(document.querySelector('{STATS}')||{{}}).innerText?.includes({text!r})",
                           polling="raf", timeout=timeout_ms)


def wait_done(page, tokens: int, timeout_ms: int = 120000) -> None:
    """The run that makes `tokens` tokens is done (not the previous run's 'done')."""
    page.wait_for_function(f"(document.querySelector('{STATS}')||{{}}).innerText?.includes('done') && "
                           f"document.querySelector('{STATS}').innerText.includes('{tokens} new tokens')",
                           polling="raf", timeout=timeout_ms)


def label_step(page, root: str) -> int:
    text = page.locator(f"{root} .ds-label").inner_text()
    m = re.match(r"step (\d+) / (\d+)", text)
    assert m, text
    return int(m.group(1))


def load_factor() -> float:
    """1 on a quiet machine, load / cores above it: a wall time of a process starved of CPU by other work looks
    slow too, so a shared CI box measures the page, not its neighbours (the goals are re-measured quiet)."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def longtask_limit_ms() -> float:
    """200 ms on a quiet machine, scaled by the load (load_factor)."""
    return LONGTASK_MS * load_factor()


def overflow(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def live_round(page, model, tok, n: int) -> dict:
    """The engine alone for n tokens, then the same run live in the browser right after it (both see the same
    load). In ms: the engine alone, the live run's engine (its trace's wall, on the page's done line) and click
    to done on the page; and the live updates the page received (distinct "running… step N" status lines)."""
    engine = run(model, tok, VECTOR, "lookahead", max_new_tokens=n, **SHIPPED_CPU["lookahead"])
    set_number(page, "ds-max-new", n)
    t0 = page.evaluate("performance.now()")
    page.locator("#ds-run").click()
    wait_done(page, n)
    t1 = page.evaluate("performance.now()")
    assert page.locator("#ds-output textarea").input_value() == engine.text
    seen = [text for at, text in page.evaluate("window.__stats") if t0 <= at <= t1]
    wall = re.search(r"([\d.]+)\s*wall s", page.locator(STATS).inner_text())
    assert wall, page.locator(STATS).inner_text()
    # the run's event ends when its step view is mounted (stepper.js drops the stale mark); until then gradio
    # ignores another click on Run (trigger mode "once"), so the next round waits for it
    expect(page.locator("#ds-stepview.ds-stale")).to_have_count(0, timeout=60000)
    return {"engine_ms": engine.wall_s * 1e3, "live_engine_ms": float(wall.group(1)) * 1e3, "live_ms": t1 - t0,
            "updates": len({m.group(1) for t in seen if (m := re.search(r"running… step (\d+)", t))}),
            "t0": t0, "t1": t1, "engine": engine}


@pytest.mark.timing
def test_live_run_keeps_engine_speed_and_the_page_responsive(browser, served):
    """Streaming costs a bounded amount per update, updates come at a bounded rate (MIN_INTERVAL_S), and the
    run's fixed cost (click to the engine's start, its end to the page) is bounded in ms: none of these moves
    with the engine's speed, where a ratio of tokens/s does (on a machine 4x faster a 400-token run lasts a
    second and the fixed cost is a third of it). Unthrottled updates (one a step) fail the rate bound; expensive
    ones (slowing the engine while it streams) the per-update bound."""
    url, demo = served
    page, watch = open_app(browser, url)
    expect(page.locator("#ds-prompt textarea")).to_have_value(VECTOR)
    set_number(page, "ds-max-new", 8)  # warm-up: load the model, first forwards
    page.locator("#ds-run").click()
    wait_done(page, 8)
    expect(page.locator("#ds-stepview .ds-stepper .main-svg").first).to_be_visible(timeout=60000)
    page.wait_for_timeout(1000)  # the warm-up's step view is drawn: not part of the measured run
    model, tok = demo.decodescope["cache"].get(app_module.EMBEDDED_TARGET)
    # a timing on a shared machine: each round times the engine alone and then the live run right after it, and
    # the test keeps the best of up to 3 rounds (a slow live path fails all 3); each round has its own length, so
    # wait_done sees its 'done'
    fixed_limit = FIXED_MS * load_factor()
    best_update, best_fixed = float("inf"), float("inf")
    for n in (400, 399, 398):
        r = live_round(page, model, tok, n)
        # at most one update per MIN_INTERVAL_S of the engine's run (+1: the first comes at once; +10 ms: the done
        # line's wall is rounded), whatever the engine's speed
        assert r["updates"] <= (r["live_engine_ms"] + 10) / 1e3 / MIN_INTERVAL_S + 1, \
            f"{r['updates']} live updates in a {r['live_engine_ms']:.0f} ms run: more than one per {MIN_INTERVAL_S} s"
        per_update = (r["live_engine_ms"] - r["engine_ms"]) / max(1, r["updates"])  # the engine slowed by streaming
        fixed = r["live_ms"] - r["live_engine_ms"]
        best_update, best_fixed = min(best_update, per_update), min(best_fixed, fixed)
        print(f"\n{n} tokens: engine alone {r['engine_ms']:.0f} ms, live {r['live_engine_ms']:.0f} ms with "
              f"{r['updates']} updates ({per_update:+.0f} ms per update, limit {PER_UPDATE_MS}); click to done "
              f"{r['live_ms']:.0f} ms (fixed {fixed:.0f} ms, limit {fixed_limit:.0f}); load {os.getloadavg()[0]:.1f}")
        if best_update <= PER_UPDATE_MS and best_fixed <= fixed_limit:
            break
    assert best_update <= PER_UPDATE_MS, f"each live update slowed the engine by {best_update:.0f} ms (best round)"
    assert best_fixed <= fixed_limit, f"click to done took {best_fixed:.0f} ms beyond the engine's run (best round)"
    engine, t0, t1 = r["engine"], r["t0"], r["t1"]
    tasks = [(round(s - t0), d) for s, d in page.evaluate("window.__longtasks") if t0 <= s <= t1]
    limit = longtask_limit_ms()
    print(f"long tasks (> 50 ms) during the run, (start ms, duration ms): {tasks}; limit {limit:.0f} ms")
    assert all(d <= limit for _, d in tasks), f"main-thread long tasks during the run: {tasks} ms"
    # the step view comes once, at the end; step back and forward
    stepper = "#ds-stepview .ds-stepper"
    expect(page.locator(stepper)).to_be_visible(timeout=60000)
    # the 400-token run's view (not the warm-up's, which stays on screen until the new one is mounted)
    expect(page.locator(f"{stepper} .ds-label")).to_have_text(
        re.compile(rf"step \d+ / {engine.steps[-1].index}$"), timeout=30000)
    expect(page.locator(f'{stepper} .ds-plot[data-view="window"] .ds-scroll table').first).to_be_visible(timeout=30000)
    last = label_step(page, stepper)
    page.locator(f"{stepper} .ds-prev").click()
    assert label_step(page, stepper) == last - 1
    page.locator(f"{stepper} .ds-first").click()
    assert label_step(page, stepper) == 0 and "prefill" in page.locator(f"{stepper} .ds-caption").inner_text()
    page.keyboard.press("ArrowRight")
    assert label_step(page, stepper) == 1
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "app_run.png"), full_page=True)
    assert not watch.external, f"requests left the machine: {watch.external}"
    assert not watch.errors, watch.errors
    page.close()


@pytest.mark.timing
def test_stop_within_a_second_keeps_the_partial_run(browser, url):
    page, watch = open_app(browser, url)
    set_number(page, "ds-max-new", 1500)
    page.locator("#ds-run").click()
    wait_stats(page, "running")
    page.wait_for_timeout(800)
    t0 = page.evaluate("performance.now()")
    page.locator("#ds-stop").click()
    wait_stats(page, "Stopped after", timeout_ms=10000)
    latency = (page.evaluate("performance.now()") - t0) / 1e3
    print(f"\nStop -> 'Stopped' in {latency:.2f} s")
    assert latency <= 1.0
    n = int(re.search(r"Stopped after (\d+) tokens", page.locator(STATS).inner_text()).group(1))
    assert 0 < n < 1500
    expect(page.locator("#ds-stepview .ds-stepper")).to_be_visible(timeout=60000)  # the partial run's step view
    expect(page.locator("#ds-trace-file")).to_contain_text("lookahead-trace", timeout=30000)
    page.wait_for_timeout(1000)
    expect(page.locator(STATS)).to_contain_text("Stopped after")  # nothing overwrote it
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_bad_value_gets_a_message_and_keeps_the_output(browser, url):
    page, watch = open_app(browser, url)
    set_number(page, "ds-max-new", 6)
    page.locator("#ds-run").click()
    wait_done(page, 6)
    expect(page.locator("#ds-stepview .ds-stepper")).to_be_visible(timeout=60000)  # the event has ended
    before = page.locator("#ds-output textarea").input_value()
    assert before
    set_number(page, "ds-max-new", 0)
    expect(page.locator("#ds-max-new input")).to_have_value("0")  # not clamped to 1 by the browser
    page.locator("#ds-run").click()
    expect(page.locator("#ds-msg")).to_contain_text("max new tokens must be a whole number in [1, 4096], got 0",
                                                    timeout=20000)
    expect(page.locator(STATS)).to_contain_text("Not run")
    assert page.locator("#ds-output textarea").input_value() == before
    page.locator(".toast-close").first.click()  # the toast goes; the message stays
    expect(page.locator(".toast-close")).to_have_count(0, timeout=5000)
    expect(page.locator("#ds-msg")).to_contain_text("max new tokens")
    # the live budget line follows W, N, G, and an over-budget setting is refused with its numbers
    set_number(page, "ds-W", 64)
    set_number(page, "ds-N", 16)
    set_number(page, "ds-G", 64)
    expect(page.locator("#ds-budget")).to_contain_text("1,920 query tokens per step")
    assert not watch.external, watch.external
    page.close()


def test_a_run_opens_on_a_telling_step_and_a_value_typed_out_of_range_replaces_the_check(browser, url):
    """The Run tab's step view opens on the step that shows the method's point (not the last, often cut by max
    new tokens) and says so; a value out of range is reported as it is typed, and the last run's ✓ goes."""
    page, watch = open_app(browser, url)
    set_number(page, "ds-max-new", 48)
    page.locator("#ds-run").click()
    wait_done(page, 48)
    stepper = "#ds-stepview .ds-stepper"
    expect(page.locator(f"{stepper} .ds-pick")).to_contain_text(re.compile(r"[Oo]pened on step \d+"), timeout=60000)
    opened = label_step(page, stepper)
    page.locator(f"{stepper} .ds-last").click()
    assert opened < label_step(page, stepper), "the step view opened on the last step"
    expect(page.locator("#ds-run-status")).to_contain_text("✓", timeout=30000)
    page.locator("#ds-max-new input").fill("99999")  # typed, no Run, no Tab
    expect(page.locator("#ds-budget")).to_contain_text("max new tokens", timeout=10000)
    expect(page.locator("#ds-run-status")).to_contain_text("fix it before Run", timeout=5000)
    expect(page.locator("#ds-run-status")).not_to_contain_text("✓")
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_default_race_wins_or_says_why(browser, url):
    page, watch = open_app(browser, url)
    page.get_by_role("tab", name="Race").click()
    page.locator("#ds-race").click()
    expect(page.locator("#ds-race-md")).to_contain_text("Exactness checked", timeout=180000)
    expect(page.locator("#ds-race-md")).not_to_contain_text("running", timeout=420000)  # 3 interleaved repeats
    md = page.locator("#ds-race-md").inner_text()
    print("\n" + md)
    # honest: median of 3 interleaved runs, the spread per method, one winner named, a reason for every method;
    # on a busy machine (the other test worker, a loaded CI box) no ratio and no winner, the cost model instead
    busy = "Machine busy: speed not measured" in md
    assert "Median of 3 interleaved runs" in md and "✗" not in md, md
    for m in ("lookahead", "prompt_lookup", "speculative"):  # every accelerated method races by default
        if busy:
            assert re.search(rf"{m} [^:]*: speed not measured \(machine busy\); cost model: \d+ steps", md), md
            assert re.search(rf"{m} is not timed here, speed not measured \(machine busy\): .* costs [\d.]+x a "
                             rf"1-token step", md), md
            continue
        speed = float(re.search(rf"{m} [^:]*: ([\d.]+)× wall-clock", md).group(1))
        assert speed >= 1.2 or re.search(rf"{m} is .* costs [\d.]+x a 1-token step .* ms\)", md), md
        assert re.search(rf"{m} [^:]*: [\d.]+× wall-clock \(runs [\d.]+-[\d.]+×\)", md), md
        assert re.search(rf"{m} is .* [\d.]+x measured", md), md
    assert busy or re.search(r"Winner: \w+|Too close to call: \w+ and \w+", md), md
    # side by side: greedy's and the winner's step views, linked by output position
    sbs = "#ds-race-sbs .ds-sbs-linked"
    assert page.locator(f"{sbs} .ds-sbs-pick[data-side=left]").input_value() == "greedy"
    winner = page.locator(f"{sbs} .ds-sbs-pick[data-side=right]").input_value()  # the default: the best median
    m = re.search(r"Winner: (\w+)", md) or re.search(r"(\w+) leads by median", md)
    assert busy or winner == m.group(1), (winner, md)
    expect(page.locator(f"{sbs} .ds-sbs-col[data-side=right] .ds-stepper .ds-caption")).not_to_be_empty(timeout=20000)
    wide = page.locator(f"{sbs} .ds-sbs-row[data-run='{winner}'] .ds-sbs-cell:not([data-len='1'])").first
    n = int(wide.get_attribute("data-len"))
    wide.click()
    assert page.locator(f"{sbs} .ds-sbs-col[data-side=right] .ds-stepper").get_attribute("data-step") == wide.get_attribute("data-step")
    assert f"greedy {n} steps, {winner} 1 step" in page.locator(f"{sbs} .ds-sbs-say").inner_text()
    page.screenshot(path=str(SHOTS / "app_side_by_side.png"), full_page=True)
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_narrow_viewport_has_no_horizontal_overflow(browser, url):
    page, watch = open_app(browser, url, width=400)
    assert overflow(page) <= 0, f"{overflow(page)} px of horizontal overflow at 400 px"
    set_number(page, "ds-max-new", 24)
    page.locator("#ds-run").click()
    wait_done(page, 24)
    expect(page.locator("#ds-stepview .ds-stepper .main-svg").first).to_be_visible(timeout=60000)
    page.wait_for_timeout(500)
    assert overflow(page) <= 0, f"{overflow(page)} px of horizontal overflow at 400 px after a run"
    assert_headline_visible(page, 400)
    assert_scroll_cues(page, "#ds-stepview")
    # the sticky step controls wrap into at most three compact rows at 400 px: every one of them on screen
    # (first/last step, slider, step counter, present, the exports), none in a box that must be scrolled
    bar = page.locator("#ds-stepview .ds-controls").bounding_box()
    assert bar["height"] <= 100, f"the sticky control bar is {bar['height']:.0f} px tall at 400 px"
    off = page.evaluate("[...document.querySelectorAll('#ds-stepview .ds-controls > button, #ds-stepview .ds-controls"
                        " > input, #ds-stepview .ds-controls > .ds-label')].filter(e => { const r = e.getBoundingClientRect();"
                        " return r.width === 0 || r.left < 0 || r.right > document.documentElement.clientWidth + 0.5; })"
                        ".map(e => e.className || e.textContent)")
    assert not off, f"step controls off-screen or hidden at 400 px: {off}"
    clip = page.evaluate("(() => { const c = document.querySelector('#ds-stepview .ds-controls');"
                         " return c.scrollWidth - c.clientWidth; })()")
    assert clip <= 0, f"the control row scrolls sideways by {clip} px at 400 px"
    page.screenshot(path=str(SHOTS / "app_narrow.png"), full_page=True)
    assert not watch.external, watch.external
    page.close()


def test_replay_tab(browser, url):
    page, watch = open_app(browser, url)
    page.get_by_role("tab", name="Replay").click()
    page.get_by_label("recorded traces (assets/traces)").click()
    page.get_by_role("option").first.click()
    page.get_by_role("button", name="Replay", exact=True).click()
    stepper = "#ds-replay .ds-stepper"
    expect(page.locator(stepper)).to_be_visible(timeout=60000)
    expect(page.locator(f"{stepper} .ds-plot .ds-scroll table, {stepper} .ds-plot .ds-scroll svg").first).to_be_visible(timeout=20000)
    first = label_step(page, stepper)
    page.locator(f"{stepper} .ds-next").click()
    assert label_step(page, stepper) == first + 1 or first == int(page.locator(f"{stepper} .ds-slider").get_attribute("max"))
    assert "/" + str(ROOT).strip("/") not in page.content()  # no server path in what the page carries
    page.screenshot(path=str(SHOTS / "app_replay.png"), full_page=True)
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_replay_of_an_uploaded_payload_trace_runs_no_script(browser, url, tmp_path):
    """The real app's Replay, a crafted upload: payloads in every string the loader accepts as text (token
    texts, the run's text, model name, stop reason) draw as text; a payload in a numeric field is refused
    with one message. No dialog opens, no element is injected, and the page keeps working."""
    payload = '"><img src=x onerror=alert(1)></title><script>alert(2)</script>'
    d = json.loads((ROOT / "assets" / "traces" / "lookahead_W5_N4_G5.json").read_text())
    d["vocab"] = {k: payload for k in d["vocab"]}
    d["text"], d["stop_reason"], d["model"]["name"] = payload, payload[:40], payload
    good, bad = tmp_path / "payload.json", tmp_path / "crafted.json"
    good.write_text(json.dumps(d))
    d["steps"][3]["kv_len"] = "</title><img src=x onerror=alert(3)>"
    bad.write_text(json.dumps(d))
    dialogs: list[str] = []

    def replay(path: Path):
        page, watch = open_app(browser, url)
        page.on("dialog", lambda dlg: (dialogs.append(dlg.message), dlg.dismiss()))
        page.get_by_role("tab", name="Replay").click()
        expect(page.locator("#ds-rp-upload")).to_be_visible(timeout=30000)
        page.locator("#ds-rp-upload input[type=file]").set_input_files(str(path))
        page.wait_for_timeout(1000)  # the upload reaches the server before the click
        page.get_by_role("button", name="Replay", exact=True).click()
        return page, watch

    page, watch = replay(bad)
    expect(page.get_by_text("steps[3].kv_len").first).to_be_visible(timeout=60000)
    page.close()
    page, watch = replay(good)
    stepper = "#ds-replay .ds-stepper"
    expect(page.locator(stepper)).to_be_visible(timeout=60000)
    for _ in range(6):
        page.locator(f"{stepper} .ds-next").click()
        page.locator(f"{stepper} .ds-tok").first.hover()
    page.wait_for_timeout(500)
    injected = page.evaluate("[...document.querySelectorAll('#ds-replay img, #ds-replay script')]"
                             ".filter(e => (e.getAttribute('src') || '') === 'x' || (e.textContent || '').includes('alert(')).length")
    assert not dialogs and injected == 0, (dialogs, injected)
    assert "alert(" in page.locator(stepper).inner_text()  # the payload is there, as text
    assert not watch.external, watch.external
    page.close()


def assert_headline_visible(page, width: int) -> None:
    """The headline numbers wrap, never clip: no box inside #ds-stats scrolls or cuts them."""
    cut = page.evaluate("[...document.querySelectorAll('#ds-stats, #ds-stats *')]"
                        ".filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX != 'visible').length")
    assert cut == 0, f"{cut} clipped boxes in the headline stats at {width} px"
    text = page.locator(STATS).inner_text()
    for k in ("tokens/s", "new tokens", "steps (forward passes)", "compression", "mean accepted / step", "wall s"):
        assert k in text, (k, text)


def assert_scroll_cues(page, host: str) -> None:
    """Every step view wider than its box says "scroll →" in its title."""
    bad = page.evaluate(f"[...document.querySelectorAll('{host} .ds-plot')].filter(p => {{ const s = p.querySelector('.ds-scroll');"
                        " return s.scrollWidth > s.clientWidth + 1 && !p.classList.contains('ds-overflows'); }).length")
    assert bad == 0, f"{bad} views scroll without a cue"
    cued = page.evaluate(f"[...document.querySelectorAll('{host} .ds-plot.ds-overflows > .ds-vt')]"
                         ".map(e => getComputedStyle(e, '::after').content)")
    assert all("scroll" in c for c in cued), cued


def test_stepper_keeps_the_current_token_in_view_and_labels_the_previous_run(browser, url):
    page, watch = open_app(browser, url, width=1920)
    set_number(page, "ds-max-new", 160)
    page.locator("#ds-run").click()
    wait_done(page, 160)
    stepper = "#ds-stepview .ds-stepper"
    expect(page.locator(f"{stepper} .ds-label")).to_have_text(re.compile(r"step \d+ / \d+"), timeout=60000)
    assert "ds-stale" not in page.locator("#ds-stepview").get_attribute("class")
    assert_headline_visible(page, 1920)
    in_view = ("(() => { const b = document.querySelector('#ds-stepview .ds-text').getBoundingClientRect();"
               " const t = document.querySelector('#ds-stepview .ds-text .ds-tok.ds-cur').getBoundingClientRect();"
               " return t.top >= b.top - 1 && t.bottom <= b.bottom + 1; })()")
    page.locator(f"{stepper} .ds-first").click()
    n = int(page.locator(f"{stepper} .ds-slider").get_attribute("max"))
    for k in range(min(n, 60)):
        page.locator(f"{stepper} .ds-next").click()
        if k % 10 == 9:
            assert page.evaluate(in_view), f"the current token left the token box at step {k + 1}"
    page.locator(f"{stepper} .ds-last").click()
    assert page.evaluate(in_view)
    # axis titles on the cost plots (no lone "1e10" tick with nothing to read it by)
    for view in ("roofline", "cumflops"):
        for axis in ("g-xtitle", "g-ytitle"):
            title = page.locator(f'{stepper} .ds-run-plot[data-view="{view}"] .{axis}').text_content()
            assert title.strip(), f"{view} has no {axis}"
    # the step controls stay on screen while the views below are read
    page.locator(f'{stepper} .ds-plot[data-view="mask"]').scroll_into_view_if_needed()
    top = page.evaluate(f"document.querySelector('{stepper} .ds-controls').getBoundingClientRect().top")
    assert 0 <= top < 1000, f"step controls scrolled away (top {top:.0f} px)"
    # a new run: the old step view is labelled "previous run" until the new one lands
    set_number(page, "ds-max-new", 400)
    page.locator("#ds-run").click()
    expect(page.locator("#ds-stepview")).to_have_class(re.compile("ds-stale"), timeout=5000)
    wait_done(page, 400)
    expect(page.locator("#ds-stepview")).not_to_have_class(re.compile("ds-stale"), timeout=60000)
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_a_newcomer_completes_the_lesson(browser, served):
    """One click per stop, start to end: each stop runs with the teaching preset, opens at its best step and
    its picture matches its narration (asserted on the DOM); no console error, no request to another host.
    The lesson follows the page's default target (here the embedded fallback: the suite never downloads)."""
    from appkit.page import lesson
    from appkit.public.limits import Limits
    from appkit.run.presets import describe
    from appkit.run.settings import Settings, method_params
    from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET
    url, default = served[0], served[1].decodescope["page"].target.value
    stops = lesson.stops(default)
    page, watch = open_app(browser, url)
    page.locator("#ds-lesson-start").click()
    stepper = "#ds-stepview .ds-stepper"
    for k, stop in enumerate(stops):
        if k:
            page.locator("#ds-lesson-next").click()
        expect(page.locator("#ds-lesson")).to_contain_text(f"Stop {k + 1} of {len(stops)}", timeout=30000)
        expect(page.locator("#ds-lesson")).to_contain_text(stop.narration.split(". ")[0][:60])
        problems = []
        values = lesson.values(stop, default)
        expect(page.locator("#ds-prompt textarea")).to_have_value(values["prompt"])
        params = method_params(Settings(**values), stop.method, Limits(False, EMBEDDED_TARGET, EMBEDDED_DRAFT), problems)
        assert not problems, problems
        preset = describe(stop.method, params) if stop.settings else ""
        want = [f"{stop.method} · done", f"teaching preset {preset}" if preset else ""]
        page.wait_for_function(f"(document.querySelector('{STATS}')||{{}}).innerText?.includes({want[0]!r}) && "
                               f"document.querySelector('{STATS}').innerText.includes({want[1]!r})", timeout=180000)
        expect(page.locator("#ds-stepview")).not_to_have_class(re.compile("ds-stale"), timeout=60000)
        expect(page.locator(f"{stepper} .ds-head")).to_contain_text(stop.method.replace("_", " "), timeout=30000)
        views = page.eval_on_selector_all(f"{stepper} .ds-plot", "els => els.map(e => e.dataset.view)")
        assert views == stop.expect["views"], (stop.title, views)
        # the view opened on the step viz.teach picked for what the narration promises, and says what it shows
        pick = page.evaluate(f"""(() => {{ const r = document.querySelector('{stepper}');
            const D = JSON.parse(r.querySelector('.ds-data').textContent);
            return [D.pick.i, parseInt(r.dataset.step, 10), D.pick.shows]; }})()""")
        assert pick[0] == pick[1], (stop.title, pick)
        expect(page.locator(f"{stepper} .ds-pick")).to_have_text(pick[2])
        expect(page.locator("#ds-lesson")).to_contain_text(lesson.opens_on(stop)[:50])
        if "window" in stop.expect:  # W columns, N-1 levels: the paper's picture
            cols, levels = stop.expect["window"]
            rows = page.eval_on_selector_all(
                f'{stepper} .ds-plot[data-view="window"] table.ds-tab tr',
                "rows => rows.filter(r => !r.querySelector('th').textContent.includes('new guesses'))"
                ".map(r => r.querySelectorAll('td').length)")
            assert rows == [cols] * levels, (stop.title, rows)
        if "compression" in stop.expect:
            expect(page.locator(STATS)).to_contain_text(f"{stop.expect['compression']:.2f} compression")
        if k == 2:
            page.screenshot(path=str(SHOTS / "app_lesson_lookahead.png"), full_page=False)
    expect(page.locator("#ds-lesson-next")).to_be_disabled()
    expect(page.locator("#ds-lesson")).to_contain_text("Last stop")
    assert not watch.external, watch.external
    assert not watch.errors, watch.errors
    page.close()


def test_the_run_button_is_above_the_fold_and_runs_from_any_tab(browser, url):
    """At a projector's 1280x900 the Run button is on the first screen (under the prompt, not below the
    settings); pressed while another tab is open, it brings the Run tab forward with the new run."""
    page, watch = open_app(browser, url, width=1280)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.wait_for_timeout(500)
    run = page.locator("#ds-run").bounding_box()
    assert run["y"] + run["height"] <= 900, f"the Run button is at y={run['y']:.0f}, below the fold of 900 px"
    assert run["y"] < page.locator("#ds-preset").bounding_box()["y"] + 400, run
    page.locator("button[role=tab][data-tab-id=race]").click()
    expect(page.locator("#ds-race")).to_be_visible()
    set_number(page, "ds-max-new", 8)
    page.locator("#ds-run").click()
    expect(page.locator("button[role=tab][data-tab-id=run]")).to_have_attribute("aria-selected", "true", timeout=5000)
    wait_done(page, 8)
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_a_lesson_stop_shows_narration_beside_the_full_width_step_view(browser, url):
    """At 1280x900 a lesson stop puts its narration and its picture on screen together: the step view spans
    the page and the narration sits in its side column; at 400x800 the two stack. Screenshots of both."""
    page, watch = open_app(browser, url, width=1280)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.locator("#ds-lesson-start").click()
    stepper = "#ds-stepview .ds-stepper"
    expect(page.locator(f"{stepper} .ds-side")).to_be_visible(timeout=180000)
    page.wait_for_timeout(800)
    box = lambda sel: page.locator(sel).first.bounding_box()  # noqa: E731
    side, view, pic = box(f"{stepper} .ds-side"), box(stepper), box(f"{stepper} .ds-grid .ds-plot")
    assert view["width"] >= 1100, f"the step view is {view['width']:.0f} px wide in lesson mode"
    for name, b in (("narration", side), ("first picture", pic)):
        assert b["y"] < 900 and b["y"] + min(b["height"], 200) > 0, (name, b)
    assert side["x"] + side["width"] <= pic["x"] + 1, (side, pic)  # beside, not above
    expect(page.locator(f"{stepper} .ds-side")).to_contain_text("Stop 1 of")
    expect(page.locator(f"{stepper} .ds-pick")).to_be_visible()
    expect(page.locator("#ds-lesson")).to_be_hidden()  # the narration is said once: beside the view, not above too
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "app_lesson_1280x900.png"))
    page.set_viewport_size({"width": 400, "height": 800})
    page.wait_for_timeout(500)
    page.locator(f"{stepper} .ds-side").scroll_into_view_if_needed()
    assert overflow(page) <= 0
    page.screenshot(path=str(SHOTS / "app_lesson_400x800.png"))
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()


def test_step_pictures_leave_the_page_and_present_full_screen(browser, url, tmp_path):
    """↓ SVG / ↓ PNG save the current step's views (checked by size, the SVG rendered on its own, the PNG
    decoded); ↓ slides saves the run as an HTML deck (one slide per step, rendered on its own); presentation mode is large type driven by the keyboard alone."""
    from PIL import Image
    page, watch = open_app(browser, url)
    page.get_by_role("tab", name="Replay").click()
    page.get_by_label("recorded traces (assets/traces)").click()
    page.get_by_role("option", name=re.compile("lookahead")).first.click()
    page.get_by_role("button", name="Replay", exact=True).click()
    stepper = "#ds-replay .ds-stepper"
    expect(page.locator(f"{stepper} .ds-last")).to_be_visible(timeout=60000)
    page.locator(f"{stepper} .ds-last").click()
    expect(page.locator(f'{stepper} .ds-plot[data-view="window"] table').first).to_be_visible(timeout=10000)
    step = label_step(page, stepper)
    with page.expect_download() as dl:
        page.locator(f"{stepper} .ds-svg").click()
    svg = tmp_path / dl.value.suggested_filename
    dl.value.save_as(svg)
    text = svg.read_text()
    # native SVG (no HTML inside foreignObject, which Inkscape, PowerPoint and Keynote leave blank)
    assert svg.name.endswith(f"step{step}.svg") and svg.stat().st_size > 5000 and "<foreignObject" not in text
    assert f"step {step} /" in text and "Jacobi window" in text and "<svg" in text[:200]
    ET.fromstring(text)  # well-formed XML
    view = browser.new_page()  # the file renders on its own: the window's cells and tokens and the mask are drawn
    view.goto(svg.as_uri())
    assert view.locator("text").count() > 20 and view.locator("rect").count() > 10
    view.close()
    with page.expect_download() as dl:
        page.locator(f"{stepper} .ds-png").click()
    png = tmp_path / dl.value.suggested_filename
    dl.value.save_as(png)
    img = Image.open(png).convert("L")
    assert png.suffix == ".png" and png.stat().st_size > 10000 and img.width > 600 and img.height > 300
    assert len(img.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 20, "the PNG is blank"
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "export_step.png").write_bytes(png.read_bytes())
    # the run as one HTML deck: the steps that teach (D.slides), the stepper comes back to its step
    slides = page.evaluate(f"JSON.parse(document.querySelector('{stepper} .ds-data').textContent).slides")
    last = page.evaluate(f"JSON.parse(document.querySelector('{stepper} .ds-data').textContent).steps[{slides[-1]}].i")
    n = len(slides)
    with page.expect_download() as dl:
        page.locator(f"{stepper} .ds-slides").click()
    deck = tmp_path / dl.value.suggested_filename
    dl.value.save_as(deck)
    html = deck.read_text()
    assert deck.name.endswith("-slides.html") and deck.stat().st_size > 5000 * n and label_step(page, stepper) == step
    # one view of a step per slide (the window, the pool, ... each its own slide), the steps those of D.slides
    shown = list(dict.fromkeys(re.findall(r'<section class="slide" data-step="(\d+)"', html)))
    m = html.count('<section class="slide"')
    assert len(shown) == n < m and "<foreignObject" not in html
    view = browser.new_page()  # it renders on its own: one slide shown, the window table drawn, keys move
    view.goto(deck.as_uri())
    expect(view.locator(".slide.on")).to_have_count(1)
    expect(view.locator("#count")).to_have_text(re.compile(f"slide 1 / {m}"))
    expect(view.locator(".slide.on table.ds-tab td").first).to_be_visible(timeout=10000)
    view.keyboard.press("End")
    expect(view.locator("#count")).to_have_text(re.compile(f"slide {m} / {m}"))
    assert f"step {last} /" in view.locator(".slide.on .sl-head").first.text_content()
    assert view.locator(".slide.on rect").count() > 10
    view.close()
    # presentation mode: large type, keyboard only, Esc leaves
    page.locator(f"{stepper} .ds-present").click()
    expect(page.locator(stepper)).to_have_class(re.compile("ds-present"))
    size = page.evaluate(f"parseFloat(getComputedStyle(document.querySelector('{stepper} .ds-caption')).fontSize)")
    assert size >= 20, size  # presentation type: >= 20 px (26 px from 1600 px wide; tests/test_present_layout.py)
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    assert label_step(page, stepper) == 1
    page.keyboard.press("Escape")
    expect(page.locator(stepper)).not_to_have_class(re.compile("ds-present"), timeout=5000)
    assert not watch.external and not watch.errors, (watch.external, watch.errors)
    page.close()
