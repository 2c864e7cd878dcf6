"""DecodeScope pictures. Input: a Trace (decoding.Trace, its to_dict(), or a JSON path) and optionally the
per-step costs from profiling (profiling.profile_run()'s dict, or profiling.trace_costs(trace)'s list;
keys read: see viz/summaries/costs.py and viz/summaries/step_profile.py). Nothing here re-runs decoding.
Every colour comes from viz/palette.py (one colour per meaning, one per method) and every coloured view has a legend.

API for the app (wiring only):

    viz.step_view_html(trace, profile=None, initial_step=0, max_steps=2000, peaks=None) -> str
        Linked step-through fragment for gr.HTML: prev/next/play/scrub, arrow keys (Home/End, space = play,
        Esc = clear selection), one-line caption, coloured text, window/pool/tree/mask views, run plots.
        The trace is sent once; stepper.js draws each step in the browser (a 91-step run: ~190 kB, 0.1 s).
        profile = profiling's profile dict or profiling.trace_costs(trace) (a list; then pass
        peaks={"flops": FLOP/s, "bandwidth": byte/s, "device": name} for the roof) adds the cost panel:
        the selected step on the roofline, its FLOPs/bytes/ms, cumulative FLOPs vs tokens beside greedy's.
        Clicking a token jumps to its step and outlines its position in every view; a run-plot point jumps
        to its step. The page address may carry #step=6&pos=23 (initial step and selected token).
        gr.HTML(value=viz.step_view_html(tr, prof), **viz.gradio_html_kwargs())  # head (plotly + script), js_on_load
    viz.report.write_report(trace, path, profile=None, title=None, compare=None) -> Path
        Standalone offline HTML report (plotly.js and data inline; no external URL; no server paths).
    viz.report.report_html(...) -> str      the same page as a string
    viz.caption(trace, step_index) -> str   the plain-words caption of one step
    viz.describe.header_words(trace) -> str "lookahead · W 5 · N 4 · G 5 · text span 7 · ... · recorded on cpu"
    viz.describe.short_name(path_or_id)     a model name without the server's absolute path
    viz.head_html() -> str                  plotly.js + the step script, for launch(head=...) / gr.HTML(head=...)
    viz.stepper.JS_ON_LOAD                  js_on_load for gr.HTML (mounts the fragment when it changes)

Per-step plotly figures for gr.Plot (yield one per step; plotly animation frames do not play in gr.Plot):
    viz.window.figure(trace, i)   Jacobi window: token text, position, colour = age (gold scale), harvest
    viz.pool.figure(trace, i)     key, candidates, matched prefix (origin colour), chosen candidate
    viz.mask.figure(trace, i)     attention mask (decoding.engine.masks.tree_visibility) with role·position labels
    viz.tree.figure(trace, i)     draft tree: probabilities, accepted path, first rejection, pruned nodes
      The tree and the mask are drawn one way: viz.tree.view(trace, i) / viz.mask.view(trace, i) compute the
      view-model (placed nodes, colours, labels, tips, titles; the mask's visible cells), and both the page
      (views.js) and these figures only place what it says.
    viz.trajectory.figure(trace, i)  Jacobi trajectory (jacobi block or lookahead window): positions x
                                  iterations, green once a guess equals its final token, accepted outlined
                                  (Medusa/EAGLE trees too: origin "head k" / "eagle draft", rank in the hover)
Run figures (method colours from viz.palette.method_color, log axes labelled by decades only):
    viz.race.race_figure(runs)                tokens over engine time; runs = {name: trace}
    viz.side_by_side.html(runs)               token strips of several runs aligned by output position
    viz.side_by_side.linked_html(runs, best)  the strips + two step views linked by output position (race tab)
    viz.report.write_side_by_side(runs, path) the same as an offline page (python -m viz side-by-side A B)
    viz.sweep.figure(points, title="")        lookahead scaling: compression vs FLOPs per step
    viz.pool.run_figure(trace)                pool size and hit rates over the run
    viz.heads.figure(trace)                   Medusa per-head / EAGLE per-depth acceptance, tokens per step
    viz.retrieval.figure(trace, i)            retrieval step: matched suffix, where it matched, trie with counts
    viz.costs.compare_figure(runs)            FLOPs per step | cumulative tokens vs FLOPs, per method
    viz.costs.roofline_figure(profile, trace=None)
    viz.costs.latency_figure(runs)            step latency vs query tokens (works without a profile)
      runs = {name: (trace, profile_or_None)} or [(trace, profile)]
    viz.step_profile.data(trace, costs, peaks=None)  the cost panel's numbers (also drawn by stepper.js)
HTML: viz.tokens.html(trace, mode="origin"|"step") -> str. Each module also has data(...) returning the
plain numbers it draws (what the tests compare with the trace).

Rooms: viz/steps/ (per-step views and the stepper), viz/summaries/ (run summaries and the report), viz/exports/
(teaching steps, slides, GIF), viz/page/ (the page's JS, CSS and plotly.js); common, escape, palette, counts
and describe here are shared by all of them. The CLI is viz/__main__.py (python -m viz ...); the modules
above are library code only. The names above (viz.tree, viz.costs, ...) stay importable from viz.
"""
from . import counts, describe, palette
from .exports import teach
from .summaries import costs, race, report, side_by_side, step_profile, sweep
from .steps import heads, mask, pool, retrieval, self_speculative, stepper, tokens, trajectory, tree, window
from .summaries.report import write_report
from .steps.stepper import caption, gradio_html_kwargs, head_html, step_view_html

__all__ = ["caption", "costs", "counts", "describe", "gradio_html_kwargs", "head_html", "heads", "mask", "palette",
           "pool", "race", "report", "retrieval", "self_speculative", "side_by_side", "step_profile", "step_view_html",
           "stepper", "sweep", "teach", "tokens", "trajectory", "tree", "window", "write_report"]
