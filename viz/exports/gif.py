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
from ..palette import exact_colours
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
    """The steps' frames as one looping GIF, `ms` per frame, in the palette's exact colours (encode_gif)."""
    return encode_gif(frames(trace, steps, width), out, ms)


def gif_palette(imgs: list) -> list[tuple[int, int, int]]:
    """256 colours: first every colour of viz/palette.py, exactly, then the colours the frames need for text
    and anti-aliased edges (a median cut of the frames' other pixels). Why: an adaptive palette alone merged
    "first mismatch" red into a brown and "reference text" teal into the model's own blue."""
    import numpy as np
    from PIL import Image
    fixed = [tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in exact_colours()]
    rgb = np.concatenate([np.asarray(i, dtype=np.uint8).reshape(-1, 3) for i in imgs])
    codes = (rgb[:, 0].astype(np.int64) << 16) | (rgb[:, 1].astype(np.int64) << 8) | rgb[:, 2]
    rest = rgb[~np.isin(codes, [(r << 16) | (g << 8) | b for r, g, b in fixed])]
    if not len(rest):
        return fixed
    rest = rest[::max(1, len(rest) // 500_000)]  # a sample is enough to place the text's greys
    strip = Image.fromarray(np.ascontiguousarray(rest[None, :, :]), "RGB")
    extra = strip.quantize(colors=256 - len(fixed), method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    pal = extra.getpalette()
    more = [tuple(pal[3 * i:3 * i + 3]) for _, i in sorted(extra.getcolors(256) or [])]
    return fixed + [c for c in dict.fromkeys(more) if c not in fixed][:256 - len(fixed)]


def to_palette(img, palette: list[tuple[int, int, int]]):
    """A "P" image: a pixel of a palette colour gets that colour's entry (exact), any other pixel the nearest
    entry (numpy, no dithering: a flat fill stays one colour)."""
    import numpy as np
    from PIL import Image
    rgb = np.asarray(img, dtype=np.int32).reshape(-1, 3)
    pal = np.asarray(palette, dtype=np.int32)
    codes = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    uniq, inv = np.unique(codes, return_inverse=True)
    colours = np.stack([uniq >> 16, (uniq >> 8) & 255, uniq & 255], axis=1)
    nearest = np.empty(len(uniq), dtype=np.uint8)
    for a in range(0, len(uniq), 4096):  # distinct colours only: a frame has a few thousand
        d = ((colours[a:a + 4096, None, :] - pal[None, :, :]) ** 2).sum(axis=2)
        nearest[a:a + 4096] = d.argmin(axis=1)  # an exact colour is at distance 0: its own entry
    out = Image.fromarray(nearest[inv.reshape(-1)].reshape(img.height, img.width), "P")
    flat = [v for c in palette for v in c]
    out.putpalette(flat + [0] * (768 - len(flat)))
    return out


def encode_gif(pngs: list[bytes], out: str | Path, ms: int = 1200) -> Path:
    """Frames (PNG bytes) on one white canvas (the largest frame's size), one global palette (gif_palette),
    looping forever. Pillow writes the GIF; optimize stays off so no palette entry is dropped or merged."""
    from PIL import Image
    imgs = [Image.open(io.BytesIO(png)).convert("RGB") for png in pngs]
    w, h = max(i.width for i in imgs), max(i.height for i in imgs)
    canvas = []
    for im in imgs:
        c = Image.new("RGB", (w, h), "white")
        c.paste(im, (0, 0))
        canvas.append(c)
    palette = gif_palette(canvas)
    shown = [to_palette(c, palette) for c in canvas]
    out = Path(out)
    shown[0].save(out, save_all=True, append_images=shown[1:], duration=ms, loop=0, optimize=False)
    return out
