"""A crafted trace never runs script in a page DecodeScope makes.

The loader (decoding/trace/check.py) refuses malformed traces; this is the second, independent layer: viz/
escapes where HTML is made (viz/escape.py in Python, esc in views.js), so even a Trace built in Python with
markup in any field renders inert. Real traces of every method are overwritten field by field as Python
objects (never through the loader), drawn by every renderer and checked statically: no element, handler or
link a payload could have made, in the pages and in plotly's text. Then headless Chromium opens the payload
pages, the side-by-side page and the exported SVG and slides with a dialog listener, steps and clicks through
them, and finds no dialog and no injected element; a step whose parents form a cycle renders and steps in
seconds.
"""
from __future__ import annotations

import copy
import re
import time
from dataclasses import asdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

import viz
from decoding import load, run
from decoding.models import EMBEDDED_DRAFT
from decoding.trace import Step, Trace
from profiling.flops import trace_costs
from viz.escape import safe_json
from viz import costs, heads, mask, pool, race, report, side_by_side, stepper, tokens, trajectory, tree, window

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--no-first-run"]
PROMPT = "def add(a, b):\n    return a + b\n\ndef add"
RUNS = {"greedy": {}, "lookahead": {"window": 3, "ngram": 3, "guesses": 3}, "prompt_lookup": {},
        "speculative": {"tree": [2, 1]}, "jacobi": {"block": 4},
        "medusa": {"heads": str(ROOT / "assets" / "heads" / "medusa")},
        "eagle": {"heads": str(ROOT / "assets" / "heads" / "eagle")}}
# The review's payloads, one per context (double-quoted attribute, <title>, single-quoted attribute, link),
# and all of them in one string: a writer that forgets to escape any context breaks out on one of them.
PAYLOADS = ['"><img src=x onerror=alert(1)>', "</title><script>alert(1)</script>", "1' onmouseover='alert(1)' x='",
            "javascript:alert(1)", '<a href="javascript:alert(1)">x</a>']
ALL = "".join(PAYLOADS)
# The review's three: these fields must still draw (escaped), not only refuse.
REPORTED = [("steps", "[]", "positions"), ("steps", "[]", "positions", "[]"), ("steps", "[]", "kv_len"),
            ("steps", "[]", "index")]
PEAKS = {"flops": 1e12, "bandwidth": 1e11, "device": "test device"}


# ---- crafted traces: every field of a real trace, overwritten as Python objects

def _key(k: object) -> object:
    """Dict keys that are token ids (vocab, histograms) form one pattern, '*'."""
    return "*" if isinstance(k, str) and k.lstrip("-").isdigit() else k


def _match(k: object, head: object) -> bool:
    return head == "**" or _key(k) == head  # "**": every key of that dict at once


def shapes(obj: object, path: tuple = ()) -> list[tuple]:
    """Every field pattern in a trace dict (list items as '[]'): the leaves and the containers, since a
    whole field replaced by a string is a crafted trace too."""
    out = [path] if path else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += shapes(v, path + (_key(k),))
    elif isinstance(obj, list):
        for v in obj:
            out += shapes(v, path + ("[]",))
    return list(dict.fromkeys(out))


def put(obj: object, pattern: tuple, value: object) -> object:
    """A copy of obj with every field matching `pattern` replaced by value."""
    if not pattern:
        return value
    head, rest = pattern[0], pattern[1:]
    if isinstance(obj, list) and head == "[]":
        return [put(v, rest, value) for v in obj]
    if isinstance(obj, dict):
        return {k: put(v, rest, value) if _match(k, head) else v for k, v in obj.items()}
    return obj


def build(d: dict) -> Trace:
    """A Trace object made directly, as a Python caller can, bypassing Trace.from_dict and its checks."""
    steps = d["steps"]
    if isinstance(steps, list) and all(isinstance(s, dict) for s in steps):
        steps = [Step(**s) for s in steps]
    return Trace(**{**{k: v for k, v in d.items() if k in Trace.__dataclass_fields__}, "steps": steps})


def crafted(tr: Trace, patterns: list[tuple], value: str = ALL) -> Trace:
    d = copy.deepcopy(asdict(tr))
    for p in patterns:
        d = put(d, p, value)
    return build(d)


def patterns(d: dict) -> list[tuple]:
    """shapes(d), with the model config's ~30 numbers as one pattern (only the cost panel reads them)."""
    return [p for p in shapes(d) if p[:2] != ("model", "config") or len(p) == 2] + [("model", "config", "**")]


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    """One real trace per method from the embedded models (about a second in all)."""
    model, tok = load()
    draft = load(EMBEDDED_DRAFT)[0]
    return {m: run(model, tok, PROMPT, m, max_new_tokens=12, **({"draft_model": draft} if m == "speculative" else {}),
                   **kw) for m, kw in RUNS.items()}


def richest(tr: Trace) -> int:
    """The decode step with the most query tokens (where every per-step view has something to draw)."""
    return max(range(1, len(tr.steps)), key=lambda k: len(tr.steps[k].tokens))


# ---- static checks: what a browser would build from the page, and what plotly would read as markup

class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of every <script>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def assert_inert_html(page: str, where: str) -> None:
    """No element, event handler, script or javascript: link that a payload could have made (our own
    scripts, plotly.js and the step script, call no dialog: checked once below)."""
    p = Elements()
    p.feed(page)
    p.close()
    for tag, attrs in p.tags:
        assert tag not in ("img", "iframe", "object", "embed", "a", "base", "form", "image"), (where, tag, attrs)
        bad = [a for a in attrs if a.startswith("on")]
        assert not bad, (where, tag, attrs)
        links = [v for a, v in attrs.items() if a in ("href", "src", "xlink:href", "action") and v]
        assert not any(v.strip().lower().startswith("javascript:") for v in links), (where, tag, attrs)
    assert not any("alert(" in s for s in p.scripts), (where, [s[:200] for s in p.scripts if "alert(" in s])


# plotly reads <...> in its strings as markup (its own regex: <[^<>]*>); ours are only these
PLOTLY_TAG = re.compile(r"<[^<>]*>")
OURS = re.compile(r"</?(b|br|i|sub|sup|em|extra)>|<span style='[\w:;. -]*'>|</span>")


def assert_inert_figure(fig, where: str) -> None:
    """Every string plotly draws (names, text, hover, titles, ticks, customdata) holds only our markup."""
    def walk(v, path):
        if isinstance(v, str):
            for tag in PLOTLY_TAG.findall(v):
                assert OURS.fullmatch(tag), (where, path, tag, v[:200])
        elif isinstance(v, dict):
            for k, x in v.items():
                if k not in ("meta", "legendgroup", "uid"):  # identifiers and linking data, never drawn
                    walk(x, path + (k,))
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x, path)
    walk(fig.to_plotly_json(), ())


def test_the_page_scripts_hold_no_payload_shapes():
    """The static check removes our own scripts from each page, so check them once: no dialog calls."""
    assert "alert(" not in stepper.SCRIPT and "alert(" not in report.offline_plotlyjs()


def test_the_checks_catch_an_unescaped_write():
    """The checks are not vacuous: the review's payloads written raw are caught in every context."""
    for raw in (f"<span data-pos=\"{PAYLOADS[0]}\">", f"<title>{PAYLOADS[1]}</title>",
                f"<span data-step='{PAYLOADS[2]}'>", PAYLOADS[4]):
        with pytest.raises(AssertionError):
            assert_inert_html(raw, "raw")
    import plotly.graph_objects as go
    with pytest.raises(AssertionError):
        assert_inert_figure(go.Figure(go.Scatter(x=[1], y=[1], name=PAYLOADS[4])), "raw")
    assert_inert_html(viz.palette.legend_html([(ALL, ALL)], ALL), "legend")  # escaped: passes


# ---- every field of every method, every renderer

ORDER = ["lookahead", "speculative", "jacobi", "prompt_lookup", "medusa", "eagle", "greedy"]


@pytest.fixture(scope="module")
def owned(traces) -> dict[str, list[tuple]]:
    """Each field pattern once, with the first method in ORDER that has it (a shared field draws the same
    way in every method); the review's fields with every method."""
    seen: set[tuple] = set()
    out = {}
    for m in ORDER:
        pats = patterns(asdict(traces[m]))
        out[m] = [p for p in pats if p not in seen] + [p for p in REPORTED if p in seen]
        seen |= set(pats)
    return out


def render_all(tr: Trace, pattern: tuple, cost: list, k: int) -> list[tuple[str, object]]:
    """(renderer, output) for every drawing entry point that reads the field; a ValueError is the one
    allowed refusal."""
    jobs = [("report", lambda: report.report_html(tr, cost)), ("token text", lambda: tokens.html(tr, "step")),
            ("strips", lambda: side_by_side.html({str(tr.method): tr}))]
    if pattern[0] != "steps":  # the step views inside it are the report's; here: run names, title, model
        jobs += [("side by side", lambda: report.side_by_side_html({str(tr.method): tr}))]
    if pattern[0] in ("steps", "vocab", "config"):
        jobs += [(f.__module__, lambda f=f: f(tr, k)) for f in (window.figure, pool.figure, mask.figure, tree.figure,
                                                                trajectory.figure)]
    if pattern[0] in ("steps", "method", "config", "model"):
        jobs += [("pool run", lambda: pool.run_figure(tr)), ("heads", lambda: heads.figure(tr)),
                 ("latency", lambda: costs.latency_figure({str(tr.method): (tr, None)})),
                 ("race", lambda: race.race_figure({str(tr.method): tr})),
                 ("compare", lambda: costs.compare_figure({str(tr.method): (tr, {"steps": cost})})),
                 ("roofline", lambda: costs.roofline_figure({"steps": cost, "peaks": PEAKS, "method": tr.method}, tr))]
    out: list[tuple[str, object]] = []
    for name, job in jobs:
        try:
            out.append((name, job()))
        except ValueError as e:
            assert str(e), name
            out.append((name, e))
    return out


@pytest.fixture
def no_plotlyjs(monkeypatch):
    """Pages without the 4.7 MB plotly bundle (it is our own script, checked once above): a fast sweep."""
    monkeypatch.setattr(report, "offline_plotlyjs", lambda: "/* plotly.js */")


@pytest.mark.parametrize("method", ORDER)
def test_every_field_renders_inert_or_is_refused_with_a_value_error(traces, owned, no_plotlyjs, method):
    """Each field pattern of a real trace (single values and whole lists/dicts) set to markup: every renderer
    returns inert output or raises ValueError (never TypeError/KeyError...); the review's fields, the
    token texts and the run's names still draw."""
    clean = traces[method]
    cost, k = trace_costs(clean), richest(clean)
    refused = {}
    for pattern in owned[method]:
        tr = crafted(clean, [pattern])
        for name, out in render_all(tr, pattern, cost, k):
            where = f"{method} {'.'.join(map(str, pattern))} → {name}"
            if isinstance(out, ValueError):
                refused.setdefault(pattern, []).append(name)
            elif isinstance(out, str):
                assert_inert_html(out, where)
            else:
                assert_inert_figure(out, where)
    must_draw = REPORTED + [("vocab", "*"), ("method",), ("model", "name"), ("stop_reason",), ("text",),
                            ("steps", "[]", "roles", "[]"), ("steps", "[]", "origins", "[]")]
    for pattern in set(must_draw) & set(owned[method]):
        assert not {"report", "side by side"} & set(refused.get(pattern, [])), (pattern, refused.get(pattern))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_the_reviews_payloads_each_render_escaped(traces, payload):
    """positions, kv_len and index as the review set them: the step view carries them (as JSON data), the
    page has them only escaped, and the mask, tree and window figures draw or refuse cleanly."""
    for method in ("lookahead", "speculative"):
        tr = crafted(traces[method], REPORTED[:1] + REPORTED[2:], payload)
        page = report.report_html(tr)
        assert_inert_html(page, f"{method} {payload}")
        data = re.search(r'<div class="ds-data" hidden style="display:none">(.*?)</div>', page, re.S).group(1)
        assert safe_json(payload)[1:-1] in data
        assert "<" not in data and "&" not in data  # JSON with markup encoded: the element's text is the JSON


# ---- cycles: a walk up `parents` always ends

def cycle_trace(tr: Trace) -> tuple[Trace, int]:
    """tr with every parent of its richest step (and its tree record) set to 5: a cycle and self-loops."""
    k = richest(tr)
    d = copy.deepcopy(asdict(tr))
    s = d["steps"][k]
    s["parents"] = [5] * len(s["parents"])
    if (s["info"] or {}).get("tree"):
        s["info"]["tree"]["parents"] = [5] * len(s["info"]["tree"]["parents"])
    return build(d), k


@pytest.mark.parametrize("method", ["lookahead", "speculative", "medusa"])
def test_cyclic_parents_draw_in_python_without_looping(traces, method):
    tr, k = cycle_trace(traces[method])
    t0 = time.perf_counter()
    for f in (mask.figure, tree.figure, window.figure, pool.figure):
        assert_inert_figure(f(tr, k), method)
    assert 'class="ds-stepper"' in viz.step_view_html(tr)
    heads.figure(tr)
    assert time.perf_counter() - t0 < 10


# ---- headless Chromium: the pages, the side-by-side page and the exports run no script

def leaves(d: dict) -> list[tuple]:
    """The patterns of single values (numbers, strings, ids), not of lists or dicts."""
    pats = shapes(d)
    return [p for p in pats if not any(len(q) > len(p) and q[:len(p)] == p for q in pats)]


def browser_trace(clean: Trace) -> Trace:
    """Every single value the report can still draw set to the payload at once: all of them when the
    report draws that, else those that draw added one by one."""
    def draws(d: dict) -> bool:
        try:
            report.report_html(build(d), trace_costs(clean))
            return True
        except ValueError:
            return False
    base, every = asdict(clean), leaves(asdict(clean))
    d = base
    for p in every:
        d = put(d, p, ALL)
    if draws(d):
        return build(d)
    d, keep = copy.deepcopy(base), []
    for p in every:
        trial = put(d, p, ALL)
        if draws(trial):
            d, keep = trial, keep + [p]
    assert {REPORTED[1], REPORTED[2], REPORTED[3], ("vocab", "*")} <= set(keep), keep
    return build(d)


@pytest.fixture(scope="module")
def browser():
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    assert Path(CHROMIUM).exists(), "Chromium missing: apt-get install -y chromium"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


INJECTED = """() => {
  const all = [...document.querySelectorAll('*')];
  return {
    elements: document.querySelectorAll('img, iframe, object, embed, a[href], form, image').length,
    handlers: all.filter(e => [...e.attributes].some(a => a.name.toLowerCase().startsWith('on'))).map(e => e.outerHTML.slice(0, 200)),
    scripts: document.querySelectorAll('script').length,
    links: all.filter(e => [...e.attributes].some(a => /^\\s*javascript:/i.test(a.value))).length,
  };
}"""
# Every step in one round trip: click next n times, the page checked (as INJECTED) after each click.
EVERY_STEP = "([root, n]) => { const check = " + INJECTED + """;
  const out = [], next = document.querySelector(root + ' .ds-next');
  document.querySelector(root + ' .ds-first').click();
  for (let k = 0; k < n; k++) { out.push(check()); next.click(); }
  return out;
}"""


def open_page(browser, path: Path):
    """A page with a dialog listener (any alert/confirm/prompt is recorded and dismissed)."""
    page = browser.new_page(viewport={"width": 1300, "height": 900}, accept_downloads=True)
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.set_default_timeout(10_000)
    page.goto(path.as_uri())
    return page


def assert_clean(page, scripts: int, where: str) -> None:
    found = page.evaluate(INJECTED)
    assert not page.dialogs, (where, page.dialogs)
    assert found["elements"] == 0 and not found["handlers"] and found["links"] == 0, (where, found)
    assert found["scripts"] == scripts, (where, found)


def walk_steps(page, scripts: int, where: str, root: str = ".ds-stepper") -> None:
    """Every step (the page checked at each), then hovering what the views drew, clicking a token, the
    other colouring and the pool browser."""
    n = int(page.locator(f"{root} .ds-slider").first.get_attribute("max")) + 1
    for k, found in enumerate(page.evaluate(EVERY_STEP, [root, n])):
        assert found["elements"] == 0 and not found["handlers"] and found["links"] == 0, (where, k, found)
        assert found["scripts"] == scripts, (where, k, found)
    for sel in (".ds-plot [data-pos]", ".ds-tok", ".ds-plot td", ".ds-plot circle"):
        for t in page.locator(f"{root} {sel}").all()[:3]:
            t.hover(force=True)
    page.locator(f"{root} .ds-tok").last.click(force=True)
    page.locator(f"{root} .ds-mode[data-mode=step]").first.click()
    for d in page.locator(f"{root} details.ds-poolbrowse").all():
        d.locator("summary").click()
    page.wait_for_timeout(200)  # an injected image's error event (and its dialog) would come by now
    assert_clean(page, scripts, where)


def test_payload_pages_run_no_script_in_chromium(traces, browser, tmp_path):
    """The report of the lookahead payload trace, then every other method's step view put into that page
    the way the app's Replay tab puts it (innerHTML), and the side-by-side page of all of them: stepped
    through end to end with no dialog, no injected element or handler and no page error."""
    crafted_runs = {m: browser_trace(traces[m]) for m in ORDER}
    views = {m: (tr, traces[m]) for m, tr in crafted_runs.items()}
    for m in ("lookahead", "speculative"):  # the review's shape: whole fields replaced by a string
        views[f"{m} (whole fields)"] = (crafted(traces[m], REPORTED[:1] + REPORTED[2:]), traces[m])
    t0 = time.perf_counter()
    page = open_page(browser, report.write_report(crafted_runs["lookahead"], tmp_path / "report.html",
                                                  profile=trace_costs(traces["lookahead"])))
    for name, (tr, clean) in views.items():
        if name != "lookahead":
            page.evaluate("html => { document.querySelector('.ds-stepper').outerHTML = html; }",
                          viz.step_view_html(tr, trace_costs(clean)))
        page.wait_for_selector(".ds-stepper .ds-scroll > *")
        walk_steps(page, 2, name)  # 2 scripts: plotly.js and the step script
        assert not page.errors, (name, page.errors)
    page.close()
    names = {f"{m} {ALL}": tr for m, tr in crafted_runs.items()}
    path = report.write_side_by_side(names, tmp_path / "sbs.html")
    page = open_page(browser, path)
    page.wait_for_selector(".ds-sbs-col[data-side=right] .ds-stepper .ds-scroll > *")
    for cell in page.locator(".ds-sbs-cell").all()[:12]:
        cell.dispatch_event("click")  # (the long run names' sticky labels cover the first cells)
    page.select_option(".ds-sbs-pick[data-side=right]", index=3)
    walk_steps(page, 2, "side by side", ".ds-sbs-col[data-side=left] .ds-stepper")
    assert not page.errors, page.errors
    page.close()
    assert time.perf_counter() - t0 < 60


def test_exported_svg_png_and_slides_run_no_script(traces, browser, tmp_path):
    """↓ SVG, ↓ PNG and ↓ slides of a payload trace: the files hold the payload only escaped, and opened
    from disk they show no dialog and no injected element."""
    tr = browser_trace(traces["lookahead"])
    page = open_page(browser, report.write_report(tr, tmp_path / "r.html"))
    page.wait_for_selector(".ds-stepper .ds-scroll > *")
    page.locator(".ds-next").click()
    files = {}
    for button in ("ds-svg", "ds-png", "ds-slides"):
        with page.expect_download() as dl:
            page.locator(f".{button}").click()
        files[button] = tmp_path / dl.value.suggested_filename
        dl.value.save_as(files[button])
    assert not page.dialogs and not page.errors, (page.dialogs, page.errors)
    page.close()
    assert files["ds-png"].stat().st_size > 5000 and re.fullmatch(r"[\w.-]+", files["ds-png"].name)
    for button, scripts in (("ds-svg", 0), ("ds-slides", 1)):
        text = files[button].read_text(encoding="utf-8")
        assert "&lt;img src=x onerror=alert(1)&gt;" in text  # the payload is there, as text
        assert_inert_html(text, button)
        view = open_page(browser, files[button])
        view.wait_for_timeout(300)
        if button == "ds-slides":
            view.keyboard.press("End")
            view.keyboard.press("Home")
        hovered = 0  # the deck shows one slide (one view) at a time: its cells are hovered slide after slide
        for _ in range(view.locator(".slide").count() if button == "ds-slides" else 1):
            for t in view.locator("td:visible, rect:visible, circle:visible").all()[:40 - hovered]:
                t.hover(force=True)
                hovered += 1
            if hovered >= 40 or button != "ds-slides":
                break
            view.keyboard.press("ArrowRight")
        assert hovered >= 10, (button, hovered)
        assert_clean(view, scripts, button)
        view.close()


def test_cyclic_parents_render_and_step_in_seconds_in_chromium(traces, browser, tmp_path):
    """Parents all 5 (a cycle and self-loops) in the richest step: the mask and tree views draw and the
    stepper moves through every step within a few seconds, no page error (speculative's report, then
    lookahead's step view put into it)."""
    spec, k_spec = cycle_trace(traces["speculative"])
    page = open_page(browser, report.write_report(spec, tmp_path / "cycle.html"))
    page.set_default_timeout(5_000)  # a walk that never ends would hang the page: every wait fails fast
    for m in ("speculative", "lookahead"):
        tr, k = (spec, k_spec) if m == "speculative" else cycle_trace(traces[m])
        if m != "speculative":
            page.evaluate("html => { document.querySelector('.ds-stepper').outerHTML = html; }",
                          viz.step_view_html(tr))
        t0 = time.perf_counter()
        page.wait_for_selector('.ds-plot[data-view="mask"] svg')
        page.locator(".ds-first").click()
        for _ in range(len(tr.steps)):
            page.locator(".ds-next").click()
        page.locator(".ds-first").click()
        for _ in range(k):
            page.locator(".ds-next").click()
        assert page.locator(".ds-label").text_content().startswith(f"step {tr.steps[k].index} ")
        assert page.locator('.ds-plot[data-view="mask"] svg path').count() == 1
        if m == "speculative":  # every node drawn: the bad parents become roots
            assert page.locator('.ds-plot[data-view="tree"] svg circle').count() >= len(tr.steps[k].tokens)
        assert time.perf_counter() - t0 < 5, m
        assert not page.errors and not page.dialogs, (page.errors, page.dialogs)
    page.close()


# ---- the app's markdown status lines (Replay's stats line, the race summary)

def test_status_lines_of_a_crafted_trace_are_plain_text(traces):
    """stats_md (under a replay) and the race summary name a crafted trace's method, stop reason and model
    as text: read by a markdown reader with raw HTML on and links of any scheme allowed, no element,
    handler or link comes out."""
    from markdown_it import MarkdownIt

    from appkit.race import race as racekit
    from appkit.page.tables import stats_md
    md = MarkdownIt("commonmark", {"html": True})
    md.validateLink = lambda url: True  # stricter than any renderer: a link of any scheme would appear
    g = traces["greedy"]
    for payload in PAYLOADS + [ALL, "[x](javascript:alert(1))", "![x](x) `</code><img src=x onerror=alert(1)>`"]:
        tr = crafted(traces["lookahead"], [("method",), ("stop_reason",), ("model", "name"), ("model", "device"),
                                           ("model", "dtype")], payload)
        assert_inert_html(md.render(stats_md(tr)), f"stats_md {payload}")
        rows = [racekit.race_row("greedy", [g], [g], False), racekit.race_row(payload, [tr], [g], False)]
        rows[1]["config"] = payload
        reasons = [racekit.reason(r["method"], [t], [g], r["speedup vs greedy"], "cpu") for r, t in zip(rows, (g, tr))]
        assert_inert_html(md.render(racekit.summary(rows, reasons, True, dtype="float32")), f"race {payload}")
