"""Render DecodeScope's views in headless Chromium and save PNGs under docs/screenshots/.

    python scripts/screenshots.py [--out docs/screenshots] [--only report_lookahead ...] [--gradio] [--app]
                                  [--lesson 3]

Pages are built from the recorded fixtures in tests/fixtures/ (plotly.js inline, no network), opened from
disk by /usr/bin/chromium (Debian `apt-get install -y chromium`), and screenshotted. The step shown is
chosen with the report's #step=N address.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import viz  # noqa: E402
from viz.common import PLOTLY_CONFIG, as_trace  # noqa: E402
from viz.summaries.report import offline_plotlyjs  # noqa: E402

FIX = ROOT / "tests" / "fixtures"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--mute-audio",
                  "--no-first-run", "--virtual-time-budget=10000"]


# A run on the default model (SmolLM2-135M-Instruct; the first one may tune the auto preset) on a busy CPU.
WAIT_MS = 600_000


def chromium() -> str:
    exe = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).exists():
        raise SystemExit("chromium not found: apt-get install -y chromium chromium-driver")
    return exe


def shoot(page: Path | str, png: Path, size: tuple[int, int], step: int | str | None = None,
          timeout: int = 60) -> Path:
    """One page (file or URL) → one PNG. A throwaway browser profile, so nothing persists between shots."""
    url = page if isinstance(page, str) else page.resolve().as_uri() + (f"#step={step}" if step is not None else "")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as prof:
        subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={prof}", f"--screenshot={png}",
                        f"--window-size={size[0]},{size[1]}", url],
                       check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot for {url}")
    return png


def figure_page(fig, title: str) -> str:
    """A single-figure offline page (plotly.js inline)."""
    body = fig.to_html(full_html=False, include_plotlyjs=False, config=PLOTLY_CONFIG)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
            f"<script>{offline_plotlyjs()}</script></head><body style='margin:8px'>{body}</body></html>")


def html_page(fragment: str, title: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body style='margin:12px;font-family:system-ui,sans-serif'>{fragment}</body></html>")


def load(name: str):
    return as_trace(FIX / f"{name}.json")


def profile(name: str) -> dict:
    return json.loads((FIX / f"profile_{name}.json").read_text())


def _first_pos(tr, step: int) -> int:
    """Absolute position of the first token a step accepted (to preselect it with #pos=)."""
    return len(tr.prompt_ids) + sum(len(s.accepted) for s in tr.steps[:step])


def jobs() -> dict:
    """name → (page html builder, window size, step)."""
    la, pl, gr = load("lookahead"), load("prompt_lookup"), load("greedy")
    runs = {n: (load(n), profile(n)) for n in ("greedy", "lookahead", "prompt_lookup", "speculative_recorded")}
    sr = load("speculative_recorded")
    sr_step = max(range(len(sr.steps)), key=lambda i: (len(sr.steps[i].accepted), i))
    return {
        "report_lookahead": (lambda: viz.report.report_html(la, profile("lookahead"), compare=runs), (1400, 2600), 6),
        "report_lookahead_selected_token": (lambda: viz.report.report_html(la), (1400, 1500),
                                            f"{6}&pos={_first_pos(la, 6)}"),
        "report_speculative_staged": (lambda: viz.report.report_html(load("speculative_staged")), (1400, 1900), 4),
        "report_speculative_recorded": (lambda: viz.report.report_html(sr, profile("speculative_recorded")),
                                        (1400, 2200), sr_step),
        "tree_speculative_recorded": (lambda: figure_page(viz.tree.figure(sr, sr_step), "tree"), (760, 460), None),
        "report_prompt_lookup": (lambda: viz.report.report_html(pl), (1400, 1900), 7),
        "window_lookahead": (lambda: figure_page(viz.window.figure(la, 6), "window"), (760, 520), None),
        "pool_lookahead": (lambda: figure_page(viz.pool.figure(la, 6), "pool"), (760, 260), None),
        "mask_lookahead_21x21": (lambda: figure_page(viz.mask.figure(la, 6), "mask"), (620, 620), None),
        "tree_speculative_tree": (lambda: figure_page(viz.tree.figure(load("speculative_tree"), 4), "tree"),
                                  (760, 420), None),
        "tree_speculative_staged": (lambda: figure_page(viz.tree.figure(load("speculative_staged"), 4), "tree"),
                                    (760, 420), None),
        "tokens_prompt_lookup": (lambda: html_page(viz.tokens.html(pl) + viz.tokens.legend_html(), "tokens"),
                                 (900, 220), None),
        "profile_compare": (lambda: figure_page(viz.costs.compare_figure(runs), "flops"), (1100, 400), None),
        "profile_roofline": (lambda: figure_page(viz.costs.roofline_figure(profile("lookahead"), la), "roofline"),
                             (760, 420), None),
        "profile_latency": (lambda: figure_page(viz.costs.latency_figure(runs), "latency"), (760, 380), None),
        "pool_run_lookahead": (lambda: figure_page(viz.pool.run_figure(la), "pool"), (760, 340), None),
        "greedy_mask": (lambda: figure_page(viz.mask.figure(gr, 5), "mask"), (420, 300), None),
    }


def gradio_shot(out: Path) -> Path:
    """The step view inside a live Gradio 6 app (gr.HTML + gradio_html_kwargs), next to a per-step gr.Plot."""
    import gradio as gr
    tr = load("lookahead")
    with gr.Blocks() as demo:
        gr.HTML(value=viz.step_view_html(tr, initial_step=6), **viz.gradio_html_kwargs())
        gr.Plot(value=viz.mask.figure(tr, 6))
    demo.launch(prevent_thread_lock=True, quiet=True)
    try:
        return shoot(demo.local_url, out / "gradio_step_view.png", (1400, 2200), timeout=120)
    finally:
        demo.close()


def app_shots(out: Path) -> list[Path]:
    """The real app (embedded models) after a default Run, wide and at a phone's 400 px (Playwright drives
    Debian's Chromium; the same flags as the browser tests)."""
    from playwright.sync_api import sync_playwright

    import app as app_module
    demo = app_module.build_demo(public=False)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True,
                            **app_module.launch_kwargs())
    shots = []
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium(), headless=True, args=CHROMIUM_FLAGS[:-1])
            for name, width in (("app_run", 1400), ("app_run_400px", 400)):
                page = b.new_page(viewport={"width": width, "height": 1000})
                page.goto(url, wait_until="load", timeout=60000)
                page.locator("#ds-run").click()
                page.locator("#ds-stepview .ds-stepper .main-svg").first.wait_for(timeout=WAIT_MS)
                page.wait_for_timeout(1000)
                out.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out / f"{name}.png"), full_page=True)
                shots.append(out / f"{name}.png")
                page.close()
            b.close()
    finally:
        demo.close()
    return shots


def lesson_shots(out: Path, stops: int = 3) -> list[Path]:
    """The real app's first lesson stops at a projector's 1280x900 and a phone's 400x800: the narration
    beside (or above) the step view, opened on the step the narration points at."""
    from playwright.sync_api import sync_playwright

    import app as app_module
    demo = app_module.build_demo(public=False)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True,
                            **app_module.launch_kwargs())
    shots, out = [], Path(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium(), headless=True, args=CHROMIUM_FLAGS[:-1])
            for w, h in ((1280, 900), (400, 800)):
                page = b.new_page(viewport={"width": w, "height": h})
                page.goto(url, wait_until="load", timeout=60000)
                for k in range(stops):
                    page.locator("#ds-lesson-start" if k == 0 else "#ds-lesson-next").click()
                    side = page.locator("#ds-stepview .ds-stepper .ds-side")
                    side.wait_for(timeout=WAIT_MS)
                    page.wait_for_function("!document.querySelector('#ds-stepview').classList.contains('ds-stale')",
                                           timeout=WAIT_MS)
                    page.wait_for_timeout(800)
                    side.scroll_into_view_if_needed()
                    shots.append(out / f"app_lesson_stop{k + 1}_{w}x{h}.png")
                    page.screenshot(path=str(shots[-1]))
                page.close()
            b.close()
    finally:
        demo.close()
    return shots


def main(argv: list[str] | None = None) -> list[Path]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--only", nargs="*", help="names of the shots to take (default: all)")
    ap.add_argument("--gradio", action="store_true", help="also shoot the step view inside a Gradio app")
    ap.add_argument("--app", action="store_true", help="also shoot the real app after a default run (1400 and 400 px)")
    ap.add_argument("--lesson", type=int, default=0, metavar="N",
                    help="also shoot the app's first N lesson stops at 1280x900 and 400x800")
    args = ap.parse_args(argv)
    out, done = Path(args.out), []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (build, size, step) in jobs().items():
            if args.only and name not in args.only:
                continue
            page = Path(tmp) / f"{name}.html"
            page.write_text(build(), encoding="utf-8")
            done.append(shoot(page, out / f"{name}.png", size, step))
            print("wrote", done[-1])
    if args.gradio:
        done.append(gradio_shot(out))
        print("wrote", done[-1])
    if args.app:
        for shot in app_shots(out):
            done.append(shot)
            print("wrote", shot)
    if args.lesson:
        for shot in lesson_shots(out, args.lesson):
            done.append(shot)
            print("wrote", shot)
    return done


if __name__ == "__main__":
    main()
