"""Shared step controls: prev / next / play / scrub, arrow keys, a plain-words caption, linked views.

step_view_html() returns one HTML fragment: the controls, the coloured text, one plot per step view
and the run-level plots, plus the data as JSON. Per-step figures are built here in Python by the same
functions the Gradio app uses for gr.Plot, so both show identical pictures; stepper.js only swaps
them (plotly animation frames do not play inside gr.Plot, see REFERENCE.md). The script must be on the
page: the report inlines it; in Gradio pass gradio_html_kwargs() to gr.HTML.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import plotly.graph_objects as go

from . import costs as prof, mask, pool, tokens, tree, window
from .common import TraceLike, as_trace, esc, safe_json, text_of

SCRIPT = (Path(__file__).parent / "stepper.js").read_text()
MAX_STEPS = 400  # per-step figures are embedded; beyond this the page would get too heavy

CSS = """
.ds-stepper{font-family:system-ui,sans-serif;font-size:14px;color:#222;outline:none}
.ds-controls{display:flex;gap:6px;align-items:center;flex-wrap:wrap;margin:4px 0}
.ds-controls button{padding:3px 9px;border:1px solid #bbb;border-radius:4px;background:#f7f7f7;cursor:pointer}
.ds-slider{flex:1;min-width:160px}
.ds-label{font-variant-numeric:tabular-nums;min-width:90px}
.ds-caption{background:#f3f7fb;border-left:4px solid #3182bd;padding:6px 10px;margin:6px 0;min-height:1.4em}
.ds-text{line-height:1.9;white-space:pre-wrap;border:1px solid #ddd;padding:8px;border-radius:4px;max-height:220px;overflow:auto}
.ds-tok{padding:1px 0;border-radius:3px;cursor:pointer;border-bottom:3px solid transparent}
.ds-tok.ds-future{opacity:.18}
.ds-tok.ds-cur{border-bottom-color:#d62728;box-shadow:0 0 0 1px #d62728}
.ds-tok.ds-sel{outline:2px solid #000}
.ds-legend{margin:4px 0;font-size:12px}
.ds-selinfo{font-size:12px;color:#a50f15;min-height:1em}
.ds-mode.ds-on{background:#dbe9f6;font-weight:600}
.ds-grid{display:flex;flex-wrap:wrap;gap:8px}
.ds-plot{flex:1 1 460px;min-width:320px}
.ds-run{display:flex;flex-wrap:wrap;gap:8px;margin-top:8px}
.ds-run-plot{flex:1 1 460px;min-width:320px}
"""


def _q(trace, tokens_: list[int]) -> str:
    return repr("".join(text_of(trace, t) for t in tokens_))


def caption(trace: TraceLike, step_index: int) -> str:
    """One line in plain words: what went into this step's forward pass and what came out."""
    tr = as_trace(trace)
    s = tr.steps[step_index]
    got = f"{len(s.accepted)} new token{'s' if len(s.accepted) != 1 else ''} {_q(tr, s.accepted)}"
    if s.kind == "prefill":
        return f"Step {s.index} (prefill): the model read the {s.n_query}-token prompt in one pass and chose {got}."
    info, head = s.info, f"Step {s.index}: one forward pass over {s.n_query} query token{'s' if s.n_query != 1 else ''}"
    if "window" in info:
        levels, n1 = len(info["window"]), (tr.config.get("ngram") or 0) - 1
        warm = f" (warm-up: level {levels} of {n1} filled)" if n1 > 0 and levels < n1 else ""
        cands = info.get("candidates") or []
        key = _q(tr, [info["pool_key"]]) if info.get("pool_key") is not None else "x0"
        look = (f"{len(cands)} pool candidate(s) for {key}" if cands else f"no pool n-gram starts with {key}")
        return f"{head} — x0, a {levels}-level window of guesses{warm} and {look} — gave {got}; {_verdict(info)}."
    if "candidates" in info:
        cands = info["candidates"]
        if not cands:
            return f"{head}: the recent text never occurred earlier, so no copy was tried; the model gave {got}."
        return (f"{head}: {_q(tr, info.get('key') or [])} occurred earlier, so {len(cands)} continuation(s) were "
                f"checked; {_verdict(info)} — {got}.")
    t = info.get("tree")
    if t or any(r in ("draft", "stage2") for r in s.roles):
        n = len((t or {}).get("tokens") or s.tokens) - 1
        drafted = sum(1 for o in s.origins if o in ("draft", "stage2"))
        rej = info.get("first_rejected")
        rej_s = ""
        if rej is not None and rej < len(s.tokens):
            rej_s = f", first rejected node {rej} ({_q(tr, [s.tokens[rej]])})"
        return (f"{head}: the target checked {n} drafted token(s), accepted {drafted}{rej_s}, "
                f"and added its own token — {got}.")
    return f"{head} (plain next-token decoding) gave {got}."


def _verdict(info: dict) -> str:
    chosen, matched = info.get("chosen"), info.get("matched") or []
    if chosen is None or not matched or matched[chosen] == 0:
        return "no candidate matched, the model's own token was kept"
    return f"candidate {chosen} matched {matched[chosen]} token(s) and the model added one more"


def views_for(tr) -> list[str]:
    """The per-step views that have something to show for this run."""
    names = []
    if any(window.has_window(s) for s in tr.steps):
        names.append("window")
    if any("candidates" in s.info for s in tr.steps):
        names.append("pool")
    if any(s.info.get("tree") for s in tr.steps) or tr.method not in ("lookahead", "greedy"):
        names.append("tree")
    names.append("mask")
    return names


def _fig_json(fig: go.Figure) -> dict:
    return json.loads(fig.to_json())


def _point_trace(fig: go.Figure) -> go.Figure:
    """The last trace of a run figure is the 'current step' marker the script moves."""
    fig.add_trace(go.Scatter(x=[], y=[], mode="markers", name="current step", hoverinfo="skip",
                             marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(color="#d62728", width=3))))
    return fig


def build(trace: TraceLike, profile: dict | None = None, max_steps: int = MAX_STEPS) -> dict:
    """Everything the page draws: per-step figures and captions, run figures, text in both colourings."""
    tr = as_trace(trace)
    makers = {"window": window.figure, "pool": pool.figure, "tree": tree.figure, "mask": mask.figure}
    names = views_for(tr)
    steps = [{"index": s.index, "caption": caption(tr, k), "figs": {v: _fig_json(makers[v](tr, k)) for v in names}}
             for k, s in enumerate(tr.steps[:max_steps])]
    run, marks, points = {}, {}, {}
    if "pool" in names:
        run["pool_run"], marks["pool_run"] = _fig_json(pool.run_figure(tr)), "xline"
    lat = prof.latency_data([(tr, profile)])[0]
    run["latency"] = _fig_json(_point_trace(prof.latency_figure([(tr, profile)])))
    marks["latency"] = "point"
    points["latency"] = {i: [q, w] for i, q, w in zip(lat["steps"], lat["n_query"], lat["wall_ms"])}
    if profile:
        rf = prof.roofline_data(profile, tr)
        run["roofline"] = _fig_json(_point_trace(prof.roofline_figure(profile, tr)))
        marks["roofline"] = "point"
        points["roofline"] = {i: [x, y] for i, x, y in zip(rf["steps"], rf["intensity"], rf["achieved_flops"])}
        run["flops"], marks["flops"] = _fig_json(prof.compare_figure([(tr, profile)])), "xline"
    return {"views": names, "steps": steps, "run": run, "marks": marks, "points": points,
            "index_of": {s["index"]: k for k, s in enumerate(steps)},
            "text_html": {m: tokens.html(tr, m) for m in ("origin", "step")}, "method": tr.method,
            "truncated": len(tr.steps) > max_steps}


def step_view_html(trace: TraceLike, profile: dict | None = None, initial_step: int = 0,
                   max_steps: int = MAX_STEPS) -> str:
    """The linked step-through fragment (needs plotly.js and SCRIPT on the page: see gradio_html_kwargs)."""
    tr = as_trace(trace)
    d = build(tr, profile, max_steps)
    stats = tr.stats()
    config = json.dumps({k: v for k, v in tr.config.items() if k != "sampling"})
    head = (f"<b>{esc(tr.method)}</b> · {stats['new_tokens']} tokens in {stats['steps']} steps "
            f"(compression {stats['compression']:.2f}) · config {esc(config)}")
    trunc = f" (first {max_steps} steps shown)" if d["truncated"] else ""
    views = "".join(f"<div class='ds-plot' data-view='{v}'></div>" for v in d["views"])
    runs = "".join(f"<div class='ds-run-plot' data-view='{v}'></div>" for v in d["run"])
    return f"""<div class="ds-stepper" id="ds-{uuid.uuid4().hex[:8]}" tabindex="0" data-initial="{initial_step}">
<style>{CSS}</style>
<div class="ds-head">{head}{trunc}</div>
<div class="ds-controls"><button class="ds-first" title="first step (Home)">|◀</button>
<button class="ds-prev" title="previous step (←)">◀ prev</button><button class="ds-play" title="play (space)">▶ play</button>
<button class="ds-next" title="next step (→)">next ▶</button><button class="ds-last" title="last step (End)">▶|</button>
<input class="ds-slider" type="range" min="0" max="0" value="0" aria-label="step"><span class="ds-label"></span>
<span>colour by</span><button class="ds-mode ds-on" data-mode="origin">origin</button><button class="ds-mode" data-mode="step">step</button></div>
<div class="ds-caption"></div>
{d['text_html']['origin']}
<div class="ds-selinfo"></div>
{tokens.legend_html()}
<div class="ds-grid">{views}</div>
<div class="ds-run">{runs}</div>
<div class="ds-data" hidden style="display:none">{safe_json(d)}</div>
</div>"""


def head_html(include_plotly: bool = True) -> str:
    """<script> tags for the page head: plotly.js (inline, offline) and the step-control script."""
    from .report import offline_plotlyjs
    js = f"<script>{offline_plotlyjs()}</script>" if include_plotly else ""
    return js + f"<script>{SCRIPT}</script>"


JS_ON_LOAD = ("(function m(){ if (window.DecodeScope) { window.DecodeScope.mountAll(element); }"
              " else { setTimeout(m, 100); } })();"
              " if (typeof watch === 'function')"
              " watch('value', () => window.DecodeScope && window.DecodeScope.mountAll(element));")


def gradio_html_kwargs(include_plotly: bool = True) -> dict:
    """Keyword arguments for gr.HTML so step_view_html() runs inside Gradio 6 (head + js_on_load)."""
    return {"head": head_html(include_plotly), "js_on_load": JS_ON_LOAD}
