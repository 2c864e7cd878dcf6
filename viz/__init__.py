"""DecodeScope pictures. Input: a Trace (decoding.Trace, its to_dict(), or a JSON path) and optionally a
profile dict (keys documented in viz/profile.py). Nothing here re-runs decoding.

API for the app (wiring only):

    viz.step_view_html(trace, profile=None, initial_step=0) -> str
        Linked step-through fragment for gr.HTML: prev/next/play/scrub, arrow keys (Home/End, space = play,
        Esc = clear selection), one-line caption, coloured text, per-step views, run plots. Clicking a token
        jumps to its step and outlines its position in every view; a run-plot point jumps to its step.
        The page address may carry #step=6&pos=23 (initial step and selected token).
        gr.HTML(value=viz.step_view_html(tr), **viz.gradio_html_kwargs())  # head (plotly + script), js_on_load
    viz.report.write_report(trace, path, profile=None, title=None, compare=None) -> Path
        Standalone offline HTML report (plotly.js and data inline; no external URL).
    viz.report.report_html(...) -> str      the same page as a string
    viz.caption(trace, step_index) -> str   the plain-words caption of one step
    viz.head_html() -> str                  plotly.js + the step script, for launch(head=...) / gr.HTML(head=...)
    viz.stepper.JS_ON_LOAD                  js_on_load for gr.HTML (mounts the fragment when it changes)

Per-step plotly figures for gr.Plot (yield one per step; plotly animation frames do not play in gr.Plot):
    viz.window.figure(trace, i)   Jacobi window: token text, position, colour = producing step, harvest
    viz.pool.figure(trace, i)     key, candidates, matched prefix, chosen candidate, accepted tokens
    viz.mask.figure(trace, i)     attention mask (decoding.masks.tree_visibility) with role·position labels
    viz.tree.figure(trace, i)     draft tree: probabilities, accepted path, first rejected node, origins
Run figures:
    viz.pool.run_figure(trace)                pool size and hit rates over the run
    viz.profile.compare_figure(runs)          FLOPs per step | cumulative tokens vs FLOPs, per method
    viz.profile.roofline_figure(profile, trace=None)
    viz.profile.latency_figure(runs)          step latency vs query tokens (works without a profile)
      runs = {name: (trace, profile_or_None)} or [(trace, profile)]; the profile is profiling's dict
      (keys read: see viz/profile.py)
HTML: viz.tokens.html(trace, mode="origin"|"step") -> str. Each module also has data(...) returning the
plain numbers it draws (what the tests compare with the trace).
"""
from . import costs, describe, mask, palette, pool, race, report, stepper, sweep, tokens, tree, window
from . import costs as profile  # deprecated alias (app.py before the rename); use viz.costs
from .report import write_report
from .stepper import caption, gradio_html_kwargs, head_html, step_view_html

__all__ = ["caption", "costs", "describe", "gradio_html_kwargs", "head_html", "mask", "palette", "pool", "race",
           "report", "step_view_html", "stepper", "sweep", "tokens", "tree", "window", "write_report"]
