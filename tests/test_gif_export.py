"""GIF export of a run's steps: one frame per teaching step (no prefill), rendered by real Chromium and
written by Pillow; bad input from the command line gets one line and exit status 2."""
from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageSequence

from viz.common import as_trace
from viz.__main__ import main as viz_main
from viz.exports.gif import write_gif
from viz.exports.teach import slide_steps

TRACE = Path(__file__).resolve().parent / "fixtures" / "speculative_chain.json"


def main(argv: list[str]) -> int:
    """python -m viz gif ...: the command lives in viz/__main__.py, not in the picture module."""
    return viz_main(["gif", *argv])


def test_gif_has_one_frame_per_teaching_step(tmp_path):
    tr = as_trace(TRACE)
    out = write_gif(tr, tmp_path / "run.gif", width=800, ms=700)
    im = Image.open(out)
    got = [f.copy().convert("RGB") for f in ImageSequence.Iterator(im)]
    assert im.format == "GIF" and len(got) == len(slide_steps(tr)) >= 2 and im.info["duration"] == 700
    assert got[0].width >= 600 and got[0].height > 150
    assert len(got[0].getcolors(1 << 16) or range(1 << 16)) > 8, "a blank frame"
    assert got[0].tobytes() != got[1].tobytes(), "every frame shows the same step"


def test_cli_picks_steps_and_refuses_bad_ones(tmp_path, capsys):
    assert main([str(TRACE), "-o", str(tmp_path / "a.gif"), "--steps", "1,2", "--width", "600"]) == 0
    assert Image.open(tmp_path / "a.gif").n_frames == 2
    assert main([str(TRACE), "-o", str(tmp_path / "b.gif"), "--steps", "1,999"]) == 2
    assert "steps not in this run: [999]" in capsys.readouterr().err
    assert main([str(TRACE), "--steps", "x"]) == 2


def test_without_playwright_the_command_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # as where it is not installed
    assert main([str(TRACE), "-o", str(tmp_path / "c.gif")]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install playwright" in err and len(err.splitlines()) == 1, err


def test_frames_draw_wide_panels_whole_without_a_scroll_cue():
    """At a narrow width the page scrolls a wide panel and says "scroll →"; a GIF frame cannot scroll, so it
    draws every panel whole: the frame is wider than the page width asked for, and says nothing of scrolling."""
    from viz.exports.gif import frames
    tr = as_trace(TRACE)
    import io
    shots = frames(tr, [tr.steps[slide_steps(tr)[0]].index], width=360)
    im = Image.open(io.BytesIO(shots[0]))
    assert im.width > 360, im.size  # the old frames were cut at the page's width


def test_presentation_mode_and_slides_draw_tree_and_mask_labels_large(tmp_path):
    """In presentation mode a tree or mask label is read from the back of a room: at least 18 px tall on a
    1920x1080 screen, where the page draws 12 px (presentation mode redraws the pictures in projector type when it
    starts; the slide deck sets its own type: tests/test_slides_deck.py)."""
    from playwright.sync_api import sync_playwright
    from viz.exports.gif import CHROMIUM_ARGS, chromium
    from viz.summaries.report import write_report
    tr = as_trace(TRACE)
    page_file = write_report(tr, tmp_path / "run.html")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": 1920, "height": 1080})
        page.goto(page_file.as_uri() + "#step=2")
        page.locator(".ds-stepper .ds-plot svg text").first.wait_for(timeout=30000)
        size = "Math.min(...[...document.querySelectorAll('.ds-stepper .ds-plot svg text')].map(t => t.getBoundingClientRect().height).filter(h => h > 0))"
        plain = page.evaluate(size)
        page.locator(".ds-stepper .ds-controls .ds-present").click()  # the page's own button: it redraws
        page.wait_for_function("document.querySelector('.ds-stepper').classList.contains('ds-present')")
        page.wait_for_timeout(500)
        shown = page.evaluate(size)
        b.close()
    assert plain < 18 <= shown, (plain, shown)


def test_gif_keeps_every_palette_colour_exactly(tmp_path):
    """The GIF's palette holds each colour of viz/palette.py exactly, and every pixel the page drew in one of
    them (a rejected node's red, a draft node's orange, the model's blue, ...) is that colour in the decoded
    frame: an adaptive palette turned "first mismatch" red into brown and a reference copy into blue."""
    import io

    import numpy as np

    from viz.exports.gif import encode_gif, frames
    from viz.palette import STATE_COLORS, ORIGIN_COLORS, exact_colours
    tr = as_trace(TRACE)
    pngs = frames(tr, [tr.steps[k].index for k in slide_steps(tr)[:2]], width=800)
    im = Image.open(encode_gif(pngs, tmp_path / "exact.gif", ms=500))
    pal = im.getpalette()
    entries = {"#%02x%02x%02x" % tuple(pal[k:k + 3]) for k in range(0, len(pal), 3)}
    assert not [c for c in exact_colours() if c not in entries], "a palette colour is missing from the GIF"
    code = lambda a: (a[..., 0].astype(np.int64) << 16) | (a[..., 1].astype(np.int64) << 8) | a[..., 2]  # noqa: E731
    exact = [int(c[1:], 16) for c in exact_colours()]
    for png, frame in zip(pngs, ImageSequence.Iterator(im)):
        src = code(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
        got = code(np.asarray(frame.convert("RGB")))[:src.shape[0], :src.shape[1]]
        drawn = np.isin(src, exact)
        for must in (STATE_COLORS["rejected"], ORIGIN_COLORS["draft"], ORIGIN_COLORS["target"]):
            assert (src == int(must[1:], 16)).sum() > 20, f"the frame draws no {must}: the check would prove nothing"
        wrong = drawn & (got != src)
        assert not wrong.any(), f"{wrong.sum()} pixels of palette colours changed, e.g. #{src[wrong][0]:06x} -> #{got[wrong][0]:06x}"
