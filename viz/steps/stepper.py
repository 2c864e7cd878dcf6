"""Shared step controls: prev / next / play / scrub, arrow keys, a plain-words caption, linked views.

Why lean: pre-rendering one plotly figure per step and view made a 91-step run's page 3.6 MB and 4.8 s
to build. Now the trace is sent ONCE (a compact copy: query arrays, the info fields the views read, one
caption per step, the vocabulary of the tokens used, the palette) and stepper.js draws every per-step
picture (window, pool, tree, mask, profile panel) in the browser. Run charts that do not change per step
(pool over the run, latency) are sent once as plotly JSON. The tree and the mask are computed once in
Python as view-models (tree.view, mask.view) that views.js and the plotly figures both only place; the
window, pool and trajectory figures (viz.window.figure, ...) still draw the same data a second time in
Python for gr.Plot and tests. The script must be on the page: the report inlines it; in
Gradio pass gradio_html_kwargs() to gr.HTML.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import asdict

from ..summaries import costs as cost_figs, step_profile
from . import mask, pool, retrieval, self_speculative, tokens, trajectory, tree, window
from ..common import TraceLike, as_trace, drawn, esc, number, safe_json, text_of
from ..counts import run_counts, step_counts
from ..describe import header_words
from ..palette import (STATE_COLORS, for_js, legend_html, mask_legend, method_pictures, origin_legend, pool_legend,
                      trajectory_legend, tree_legend, window_legend)
from ..page import SCRIPT
from ..page.stepper_css import CSS
from .stepper_text import caption
from ..exports.teach import slide_steps, teaching_step

MAX_STEPS = 2000   # the payload is compact now; this only guards against pathological traces
MAX_QUERY = 160    # a step's query is cut here for the mask (a long prompt's prefill)
ROLE_CODE = {"prompt": "p", "x0": "x", "window": "w", "candidate": "c", "draft": "d", "stage2": "s", "jacobi": "j"}
INFO_KEYS = ("window", "pool_key", "key", "candidates", "candidate_sources", "matched", "chosen", "pool_size",
             "accepted_path", "first_rejected", "pool_delta")

__all__ = ["CSS", "JS_ON_LOAD", "SCRIPT", "build", "caption", "gradio_html_kwargs", "head_html", "step_view_html"]


def views_for(tr) -> list[str]:
    """The per-step views that have something to show for this run: what the data holds, and the pictures
    its method's spec names (viz.palette.method_pictures; an unknown method gets a fallback)."""
    names, pictures = [], method_pictures(tr.method)
    if any(window.has_window(s) for s in tr.steps):
        names.append("window")
    if any("candidates" in s.info for s in tr.steps):
        names.append("pool")
    if "trajectory" in pictures and trajectory.has_trajectory(tr):
        names.append("trajectory")
    if any(s.info.get("tree") for s in tr.steps) or "tree" in pictures:
        names.append("tree")
    names.append("mask")
    return names


def _round(v):
    if isinstance(v, float):
        return round(v, 4)
    if isinstance(v, list):
        return [_round(x) for x in v]
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    return v


def compact_step(s, cap: str) -> dict:
    """One step as the script reads it: short keys, roles as one letter each, only the info it draws."""
    n = min(len(s.tokens), MAX_QUERY)
    info = {k: s.info[k] for k in INFO_KEYS if k in s.info}
    if s.info.get("window_next"):
        info["window_next"] = s.info["window_next"][-1]
    if s.info.get("harvested") is not None:
        info["harvested"] = len(s.info["harvested"])
    c = step_counts(s)
    return {"i": s.index, "k": s.kind, "g": c.guessed, "own": c.own, "kv": s.kv_len, "q": s.n_query, "a": s.accepted, "o": s.origins,
            "t": s.tokens[:n], "p": s.positions[:n], "par": s.parents[:n],
            "r": "".join(ROLE_CODE.get(r, "?") for r in s.roles[:n]), "sl": s.slots[:n], "kept": s.kept,
            "ms": round(number(s.wall_ms, 0.0), 3), "info": _round(info), "cap": cap}


def _view_model(make, st: dict) -> dict:
    """A step's view-model, or (a crafted field the view cannot place) a view that says so in one line, so
    the rest of the page still draws."""
    try:
        return make()
    except ValueError as e:
        return {"title": f"Step {st['i']}: {e}", "nodes": [], "edges": [], "rows": [], "n": 0, "depth": 0}


class _Table:
    """The page's shared tables: strings (labels, colours, tips) and styles (a node's or a mask row's
    everything-but-its-place), each stored once and referred to by index: a tree's nodes at one depth, and
    the same row of every step's mask, look alike."""

    def __init__(self) -> None:
        self.strs: dict[str, int] = {}
        self.styles: dict[str, int] = {}

    def s(self, text: object) -> int:
        return self.strs.setdefault(str(text), len(self.strs))

    def style(self, row: list) -> int:
        return self.styles.setdefault(json.dumps(row, separators=(",", ":")), len(self.styles))

    def page(self) -> dict:
        return {"strs": list(self.strs), "styles": [json.loads(k) for k in self.styles]}


def _tree_page(v: dict, t: _Table) -> dict:
    """The tree view-model as the page carries it (a 1,000-step run of 200-node trees stays a few MB): a row
    per node [x, y, style, parent, edge style]; a node style is [position, label, fill, stroke, stroke width,
    flags (1 rejected, 2 pruned), name (-1: "node <its index>"), tip], an edge style [colour, width, dashed],
    texts as indices into strs."""
    nodes = []
    for k, n in enumerate(v.get("nodes") or []):
        name = -1 if n["name"] == f"node {k}" else t.s(n["name"])
        flags = int(bool(n["rejected"])) | 2 * int(bool(n["pruned"]))
        nodes.append([n["x"], _round(n["y"]), t.style([n["pos"], t.s(n["label"]), t.s(n["fill"]), t.s(n["stroke"]),
                                                        n["stroke_width"], flags, name, t.s(n["tip"])]), -1, -1])
    for e in v.get("edges") or []:
        nodes[e["b"]][3:] = [e["a"], t.style([t.s(e["colour"]), e["width"], int(e["dashed"])])]
    return {"t": v["title"], "d": v.get("depth", 0), "r": v.get("rows", 0), "n": nodes}


def _mask_page(v: dict, t: _Table) -> dict:
    """The mask view-model as the page carries it: each row's runs as a style, labels and colours as strs."""
    return {"t": v["title"], "n": v.get("n", 0), "kv": v.get("kv", 0), "r": [t.style(r) for r in v.get("rows") or []],
            "l": [t.s(x) for x in v.get("labels") or []], "c": [t.s(x) for x in v.get("colours") or []],
            "p": v.get("positions") or []}


def _vocab(tr) -> dict[str, str]:
    ids = set(tr.prompt_ids) | set(tr.output_ids)
    for s in tr.steps:
        ids.update(s.tokens[:MAX_QUERY])
        info = s.info or {}
        for c in info.get("candidates") or []:
            ids.update(c)
        ids.update(t for lv in info.get("window_next") or [] for t in lv)
        ids.update((info.get("tree") or {}).get("tokens") or [])
        ids.update(((info.get("tree") or {}).get("pruned") or {}).get("tokens") or [])
        ids.update(t for op in info.get("pool_delta") or [] for t in op[1:])  # the pool browser's n-grams
        key = info.get("pool_key", info.get("key"))
        ids.update(key if isinstance(key, list) else [key] if key is not None else [])
    return {str(t): text_of(tr, t) for t in ids}


@drawn
def build(trace: TraceLike, costs: dict | list | None = None, max_steps: int = MAX_STEPS,
          peaks: dict | None = None) -> dict:
    """The page's data: compact steps with captions, vocabulary, palette, run charts, profile panel."""
    tr = as_trace(trace)
    names = views_for(tr)
    steps = [compact_step(s, caption(tr, k)) for k, s in enumerate(tr.steps[:max_steps])]
    table = _Table()  # labels, colours, tips and row styles repeat across nodes and steps: stored once
    for k, st in enumerate(steps):  # view-models, placed by views.js as by tree.figure / mask.figure (one drawing)
        st["mv"] = _mask_page(_view_model(lambda: mask.view(tr, k, MAX_QUERY), st), table)
        if "tree" in names:
            st["tv"] = _tree_page(_view_model(lambda: tree.view(tr, k), st), table)
    run, marks, points = {}, {}, {}
    if "pool" in names:
        run["pool_run"], marks["pool_run"] = json.loads(pool.run_figure(tr).to_json()), "xline"
    pictures = method_pictures(tr.method)
    if "draft_cost" in pictures:  # draft ms against the target's, per step (viz/steps/self_speculative.py)
        run["self_spec"], marks["self_spec"] = json.loads(self_speculative.run_figure(tr).to_json()), "xline"
    if "retrieval" in pictures:  # match length, trie size and tokens kept per step (viz/steps/retrieval.py)
        run["retrieval"], marks["retrieval"] = json.loads(retrieval.run_figure(tr).to_json()), "xline"
    lat = cost_figs.latency_data([(tr, costs if isinstance(costs, dict) else None)])[0]
    if lat["steps"]:
        fig = cost_figs.latency_figure([(tr, costs if isinstance(costs, dict) else None)])
        run["latency"], marks["latency"] = json.loads(fig.to_json()), "point"
        points["latency"] = {i: [q, w] for i, q, w in zip(lat["steps"], lat["n_query"], lat["wall_ms"])}
    traj = None
    if "trajectory" in names:
        t = trajectory.data(tr)
        code = {"wrong": "w", "converges": "n", "converged": "c"}
        traj = {"cells": t["cells"], "right": t["right"], "what": t["what"],
                "rows": [{"s": r["step"], "a": r["accepted_cells"], "p": r["from_pool"], "pw": r["pool_words"], "c": [[c["pos"], c["token"], code[c["state"]]] for c in r["cells"]]}
                         for r in t["rows"] if number(r["step"]) is None or r["step"] < max_steps]}
    return {"views": names, "steps": steps, "counts": asdict(run_counts(tr)), "pick": teaching_step(tr),
            "slides": slide_steps(tr), "trajectory": traj, "run": run, "marks": marks, "points": points,
            "index_of": {s["i"]: k for k, s in enumerate(steps)}, **table.page(), "vocab": _vocab(tr), "palette": for_js(),
            "method": tr.method, "pictures": list(pictures),
            "pool_source": pool.default_source(tr.method), "cutoff": tr.config.get("confidence"),
            "prompt_len": len(tr.prompt_ids),
            "profile": _round(step_profile.data(tr, costs, peaks)), "truncated": len(tr.steps) > max_steps}


def _present(tr) -> dict:
    """What this run has, so every legend lists only that: the query roles, the tree nodes' origins, pruning."""
    roles, origins, pruned = set(), set(), False
    for s in tr.steps:
        roles.update(r for r in s.roles if isinstance(r, str))
        tree = s.info.get("tree") if isinstance(s.info, dict) else None
        if isinstance(tree, dict):
            origins.update(o for o in tree.get("origin") or [] if isinstance(o, str))
            pruned = pruned or bool((tree.get("pruned") or {}).get("tokens"))
    return {"roles": roles, "origins": origins, "pruned": pruned}


LEGENDS = {"window": lambda p: legend_html(window_legend() + [("harvested into the pool (green outline)", STATE_COLORS["matched"])]),
           "pool": lambda p: legend_html(pool_legend()),
           "tree": lambda p: legend_html(tree_legend(p["pruned"], p["origins"] or None)),
           "trajectory": lambda p: legend_html(trajectory_legend()),
           "mask": lambda p: legend_html(_mask_items(p))}


def _mask_items(p: dict) -> list[tuple[str, str]]:
    """The mask's role strip colours a drafted node by its tree origin (views.js): heads' teal, EAGLE's red,
    so a run whose trees hold no draft-model node lists those origins instead of the orange draft role."""
    heads = {o for o in p["origins"] if o not in ("target", "draft", "stage2")}
    roles = p["roles"] - {"draft"} if heads and "draft" not in p["origins"] else p["roles"]
    return mask_legend(roles=roles) + [(f"role: {label}", c) for label, c in origin_legend(heads)]
TITLES = {"window": "Jacobi window", "pool": "Pool lookup", "tree": "Token tree", "mask": "Attention mask",
          "trajectory": "Jacobi trajectory"}


def _view_box(name: str, present: dict) -> str:
    return (f"<div class='ds-plot' data-view='{esc(name)}'><div class='ds-vt'></div>"
            f"<div class='ds-scroll' data-draw='{esc(name)}'></div>{LEGENDS[name](present)}</div>")


@drawn
def step_view_html(trace: TraceLike, profile: dict | list | None = None, initial_step: int | str = 0,
                   max_steps: int = MAX_STEPS, peaks: dict | None = None) -> str:
    """The linked step-through fragment (needs plotly.js and SCRIPT on the page: see gradio_html_kwargs).

    profile: profiling's profile dict or profiling.trace_costs(trace) (a list); with it the profile panel
    shows the selected step on the roofline and cumulative FLOPs against greedy's. initial_step: a list position,
    or "best": the step viz.teach picks for the method's point, with its note (the Run tab)."""
    tr = as_trace(trace)
    d = build(tr, profile, max_steps, peaks)
    trunc = f" (first {max_steps} steps shown)" if d["truncated"] else ""
    present = _present(tr)
    views = "".join(_view_box(v, present) for v in d["views"])
    prof = ("<div class='ds-prof'><div class='ds-vt'>Cost of this step</div><div class='ds-prof-num'></div>"
            "<div class='ds-grid'><div class='ds-run-plot' data-view='roofline'></div>"
            "<div class='ds-run-plot' data-view='cumflops'></div></div></div>") if d["profile"] else ""
    runs = "".join(f"<div class='ds-run-plot' data-view='{esc(v)}'></div>" for v in d["run"])
    return f"""<div class="ds-stepper" id="ds-{uuid.uuid4().hex[:8]}" tabindex="0" data-initial="{esc(initial_step)}">
<style>{CSS}</style>
<div class="ds-head">{esc(header_words(tr))}{esc(trunc)}</div>
<div class="ds-controls"><button class="ds-first" title="first step (Home)">|◀</button>
<button class="ds-prev" title="previous step (←)">◀ prev</button><button class="ds-play" title="play (space)">▶ play</button>
<button class="ds-next" title="next step (→)">next ▶</button><button class="ds-last" title="last step (End)">▶|</button>
<input class="ds-slider" type="range" min="0" max="0" value="0" aria-label="step"><span class="ds-label"></span>
<span>colour by</span><button class="ds-mode ds-on" data-mode="origin">origin</button><button class="ds-mode" data-mode="step">step</button>
<button class="ds-svg" title="download this step's views as an SVG file">↓ SVG</button><button class="ds-png" title="download this step's views as a PNG image">↓ PNG</button>
<button class="ds-slides" title="download the run as one HTML slide deck for a projector: one view of a step per slide (← → move)">↓ slides</button>
<button class="ds-present" title="presentation mode: full screen, large type; ← → space Home End, Esc leaves">present</button></div>
<div class="ds-caption"></div>
<div class="ds-pick" hidden></div>
{tokens.html(tr, "origin")}
<div class="ds-selinfo"></div>
{tokens.legend_html(tr)}
<div class="ds-grid">{views}</div>
{prof}
<div class="ds-run">{runs}</div>
<div class="ds-data" hidden style="display:none">{safe_json(d)}</div>
</div>"""


def head_html(include_plotly: bool = True) -> str:
    """<script> tags for the page head: plotly.js (inline, offline) and the step-control script."""
    from ..page.plotlyjs import offline_plotlyjs
    js = f"<script>{offline_plotlyjs()}</script>" if include_plotly else ""
    return js + f"<script>{SCRIPT}</script>"


JS_ON_LOAD = ("(function m(){ if (window.DecodeScope) { window.DecodeScope.watch(element); }"
              " else { setTimeout(m, 100); } })();")


def gradio_html_kwargs(include_plotly: bool = True) -> dict:
    """Keyword arguments for gr.HTML so step_view_html() runs inside Gradio 6 (head + js_on_load)."""
    return {"head": head_html(include_plotly), "js_on_load": JS_ON_LOAD}
