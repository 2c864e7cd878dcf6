"""An animated GIF of a run's steps, for slides that cannot embed HTML.

    python -m viz gif TRACE.json -o run.gif [--steps 3,5,8] [--width 1100] [--ms 1200]

Why rendered frames: the step view is drawn by the browser (views.js), so the frames are screenshots of the
real step view in headless Chromium (Playwright driving /usr/bin/chromium), one per step, and Pillow
(a maintained library, already a dependency of the project's image checks) writes the GIF. By default the
frames are the steps a slide deck shows (viz.teach.slide_steps: no prefill, the steps that teach).
"""
from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

from ..common import TraceLike, as_trace
from .teach import slide_steps

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
MAX_FRAMES = 60  # a GIF for a slide: a minute at one frame a second


# A frame is a picture, not a page: no controls, and every panel at its full width (a GIF cannot scroll, so a
# wide window or tree is drawn whole, stacked, without the page's "scroll →" cue).
def frame_css(width: int) -> str:
    """The frame's style: the words wrap at `width`, the pictures take the width they need."""
    return (".ds-controls,.ds-run,.ds-prof,.ds-text,.ds-selinfo{display:none !important}"
            f".ds-stepper{{width:max-content !important;min-width:{width - 20}px;max-width:none !important}}"
            f".ds-head,.ds-caption,.ds-pick,.ds-legend{{max-width:{width - 20}px}}"
            ".ds-grid{display:block !important}.ds-plot{width:max-content !important;max-width:none !important;"
            "margin-bottom:8px}.ds-scroll{overflow:visible !important;max-width:none !important}"
            ".ds-plot.ds-overflows>.ds-vt::after{content:none !important}")


def chromium() -> str:
    exe = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).exists():
        raise OSError("chromium not found: apt-get install -y chromium")
    return exe


def frames(trace: TraceLike, steps: list[int] | None = None, width: int = 1100) -> list[bytes]:
    """PNG screenshots of the step view's caption and pictures, one per step index in `steps`."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # a dev dependency: the command says so in one line, not a traceback
        raise OSError("the GIF export drives Chromium with playwright, which is not installed: "
                      "pip install playwright, and a chromium (apt-get install chromium; docs/install.md)") from None

    from ..summaries.report import write_report
    tr = as_trace(trace)
    index = [s.index for s in tr.steps]
    want = steps if steps is not None else [index[k] for k in slide_steps(tr)]
    bad = [i for i in want if i not in index]
    if bad:
        raise ValueError(f"steps not in this run: {bad[:5]} (it has steps {index[0]}–{index[-1]})")
    if not 0 < len(want) <= MAX_FRAMES:
        raise ValueError(f"a GIF takes 1 to {MAX_FRAMES} steps, got {len(want)}")
    shots = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        page_file = write_report(tr, Path(tmp) / "run.html")
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": width, "height": 900})
        page.goto(page_file.as_uri())
        page.locator(".ds-stepper .ds-caption").first.wait_for(timeout=30000)
        page.add_style_tag(content=frame_css(width))
        root = page.locator(".ds-stepper").first
        for i in want:
            root.evaluate("(r, i) => r.__ds_goto(i)", i)
            page.wait_for_function("([r, i]) => r.dataset.step === String(i)", arg=[root.element_handle(), i])
            shots.append(root.screenshot())
        b.close()
    return shots


def write_gif(trace: TraceLike, out: str | Path, steps: list[int] | None = None, width: int = 1100,
              ms: int = 1200) -> Path:
    """Frames on one white canvas (the largest frame's size), `ms` per frame, looping forever."""
    from PIL import Image
    imgs = [Image.open(io.BytesIO(png)).convert("RGB") for png in frames(trace, steps, width)]
    w, h = max(i.width for i in imgs), max(i.height for i in imgs)
    canvas = []
    for im in imgs:
        c = Image.new("RGB", (w, h), "white")
        c.paste(im, (0, 0))
        canvas.append(c.convert("P", palette=Image.Palette.ADAPTIVE, colors=255))
    out = Path(out)
    canvas[0].save(out, save_all=True, append_images=canvas[1:], duration=ms, loop=0, optimize=True)
    return out
