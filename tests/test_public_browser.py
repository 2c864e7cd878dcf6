"""The public app in a real headless Chromium: what a crafted trace's strings become on the page.

A trace's model name, dtype, device and stop reason reach Replay's stats line, which Gradio renders as
Markdown. Blank lines, links, images and headings in them must show as text: no live link, no image (a
tracking pixel), no heading, and no request leaves for the payload's host."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from test_app import cache_dir  # noqa: F401
from test_browser import browser  # noqa: F401 - the one headless Chromium fixture
from test_public_sessions import url  # noqa: F401 - the public app on the embedded pair

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]
ROOT = Path(__file__).resolve().parent.parent
PAYLOADS = {("model", "name"): "x\n\n[click here](https://evil.example/a)\n\n![px](http://evil.example/p.png)\n\n"
                               "www.evil.example mail@evil.example",
            ("model", "dtype"): "float32\n# HEADING ONE",
            ("model", "device"): "cpu\n\n## HEADING TWO <img src=http://evil.example/q.png>",
            ("stop_reason",): "eos\n\n[there](https://ev.il/b)\n\n- a list"}


def test_markdown_in_a_replayed_traces_strings_is_inert(browser, url, tmp_path):
    d = json.loads((ROOT / "assets" / "traces" / "lookahead_W5_N4_G5.json").read_text())
    for path, value in PAYLOADS.items():
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    f = tmp_path / "markdown.json"
    f.write_text(json.dumps(d))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if "evil.example" in r.url or "ev.il" in r.url else None)
    page.route("**/*", lambda r: r.abort() if "evil.example" in r.request.url or "ev.il" in r.request.url else r.continue_())
    page.goto(url, wait_until="load", timeout=60000)
    page.get_by_role("tab", name="Replay").click()
    expect(page.locator("#ds-rp-upload")).to_be_visible(timeout=30000)
    page.locator("#ds-rp-upload input[type=file]").set_input_files(str(f))
    page.wait_for_timeout(1000)  # the upload reaches the server before the click
    page.get_by_role("button", name="Replay", exact=True).click()
    stats = page.locator("#ds-rp-stats")
    expect(stats).to_contain_text("tokens/s", timeout=60000)
    found = page.evaluate("""() => { const e = document.querySelector('#ds-rp-stats');
        return {a: e.querySelectorAll('a').length, img: e.querySelectorAll('img').length,
                h: e.querySelectorAll('h1,h2,h3,h4,h5,h6').length, li: e.querySelectorAll('li').length,
                p: e.querySelectorAll('p').length, text: e.innerText,
                paras: [...e.querySelectorAll('p')].map(x => x.innerText)}; }""")
    assert found["a"] == 0 and found["img"] == 0 and found["h"] == 0 and found["li"] == 0, found
    for words in ("click here", "HEADING ONE", "HEADING TWO", "evil.example", "there", "ev.il"):
        assert words in found["text"], (words, found["text"])  # the payloads are there, as text
    # the stats line, the numbers line and Replay's own two lines ("Why this step", then "Recorded elsewhere" for an
    # uploaded trace): no paragraph was injected
    paras = found["paras"]
    assert found["p"] <= 4 and len(paras) == found["p"], found
    assert paras[-2].startswith("Why this step:") and paras[-1].startswith("Recorded elsewhere:"), paras
    assert not outside, outside
    page.close()
