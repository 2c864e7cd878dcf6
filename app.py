"""DecodeScope: run, race, profile and replay exact lookahead / speculative decoding in the browser.

    python app.py            # http://127.0.0.1:7860 (PORT or GRADIO_SERVER_PORT to change)

Offline by default (the embedded models, no CDN); ready for Hugging Face Spaces (README front matter,
ZeroGPU through `spaces.GPU` when the package exists, one GPU queue for every model event). Public mode:
DECODESCOPE_PUBLIC=1 (allow-listed models only, tighter limits, no local paths).

Wiring only: the page is appkit/page/ui.py, the handlers appkit/run/handlers.py and appkit/race/tabs.py.
"""
from __future__ import annotations

try:  # ZeroGPU: `spaces` must be imported before anything touches CUDA
    import spaces
except ImportError:  # everywhere else the decorator is a no-op
    spaces = None

import json
import logging
import os
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

import viz  # noqa: E402
from appkit.api import label_outputs, named, preset_from_page  # noqa: E402
from appkit.page import autofields, lesson  # noqa: E402
from appkit.page.hints import hub_label, prompt_hint, prompt_info  # noqa: E402
from appkit.run.handlers import TMP_MAX_AGE_S  # noqa: E402
from appkit.public.clients import Admission, Places, Unread, no_forwarded_headers_by_default  # noqa: E402
from appkit.public.fair import TOTAL_JOBS  # noqa: E402
from appkit.public.limits import MAX_TRACE_BYTES, PUBLIC_MAX_TRACE_BYTES, Limits  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from appkit.models.model_cache import ModelCache  # noqa: E402
from appkit.run.settings import Settings, budget_line  # noqa: E402
from appkit.run.stream import gpu_seconds  # noqa: E402
from appkit.race.tabs import Tabs  # noqa: E402
from appkit.page.tables import display_name, no_server_paths  # noqa: E402
from appkit.page.method_controls import control_fields, on_method, on_shape, shape_fields  # noqa: E402
from appkit.run.method_fields import SHAPE, USER_KNOBS, field_of, tune_fields  # noqa: E402
from appkit.page.ui import CSS, MARK_STALE, RUN_STATUS_HEAD, UNMARK_STALE_ON_ERROR, Page, layout  # noqa: E402
from decoding import ModelError  # noqa: E402
from decoding.models import DEFAULT_MODEL, EMBEDDED_DRAFT, EMBEDDED_TARGET  # noqa: E402
from decoding.models.fetch import MODEL_NAME  # noqa: E402
from decoding.fast.cpu_gemm import build_in_background  # noqa: E402
from appkit.models.default_model import DefaultModel  # noqa: E402
from appkit.page.examples import example_labels, examples_for  # noqa: E402
from appkit.models import drafts  # noqa: E402
from appkit.race.tabs import RACE_DEFAULT  # noqa: E402

log = logging.getLogger("decodescope.app")
GPU = "gpu"  # one concurrency id: every event that runs a model waits in the same queue
# public mode: model events in flight at once. Above the server's job cap (fair.TOTAL_JOBS), so an event Gradio
# accepted starts at once and waits in the fair order of the model's turns (appkit/public/fair.py), never in
# Gradio's first-come queue behind other visitors' waiting handlers; a handler past the cap is refused in one line.
PUBLIC_SLOTS = TOTAL_JOBS + 16
PUBLIC_MODEL_CACHE_MB = 8192  # public mode: weights kept loaded (the 1.7B allow-listed model is 6.8 GB in fp32)
UNREAD_S = 10.0  # public mode: a job whose messages nobody has read for this long ends
RENDER = "render"  # replays of uploaded traces: one at a time (decoding/trace/check.py bounds each one)


def gpu(event: str):
    """spaces.GPU on ZeroGPU with a duration computed from the event's settings, identity elsewhere."""
    if spaces is not None:
        return spaces.GPU(duration=gpu_seconds(event))
    return lambda fn: fn


def build_demo(default_target: str | None = None, default_draft: str | None = None, public: bool | None = None,
               cache: ModelCache | None = None, queue_size: int | None = None,
               max_trace_bytes: int = MAX_TRACE_BYTES) -> gr.Blocks:
    """The whole app. default_target/default_draft: the models preselected; by default SmolLM2-135M-Instruct
    (fetched in the background on a first start, appkit/models/default_model.py) and the embedded draft."""
    dm = DefaultModel().start() if default_target is None else None
    target0 = default_target or dm.name
    local = dm.resolve_now() if dm else target0  # a folder to read the config and chat template from
    draft0 = default_draft or drafts.draft_for(target0 if dm and dm.pending else local) or EMBEDDED_DRAFT
    lim = Limits(public, target0, draft0)
    shown = {display_name(target0): target0, display_name(draft0): draft0}  # the page never carries server paths
    if target0 == DEFAULT_MODEL:  # the embedded target stays one pick away (and on a public Space's allow list)
        lim.allowed.append(EMBEDDED_TARGET)
        shown[display_name(EMBEDDED_TARGET)] = EMBEDDED_TARGET
    if draft0 != EMBEDDED_DRAFT and default_draft is None:  # a shipped draft preselected: the embedded one stays
        lim.allowed.append(EMBEDDED_DRAFT)
        shown[display_name(EMBEDDED_DRAFT)] = EMBEDDED_DRAFT
    # public: the cache holds at most PUBLIC_MODEL_CACHE_MB of weights unless DECODESCOPE_MODEL_CACHE_MB says
    cap = PUBLIC_MODEL_CACHE_MB * 2**20 if lim.public and not os.environ.get("DECODESCOPE_MODEL_CACHE_MB") else None
    h = Tabs(lim, cache or (ModelCache(loader=dm.loader, max_bytes=cap) if dm else ModelCache(max_bytes=cap)),
             aliases=shown)
    h.cache.pinned |= {target0, draft0}  # the page's default models are evicted last
    # a public Space replays smaller traces: parsing and drawing one costs the shared CPU ~0.6 s per MB
    h.max_trace_bytes = min(max_trace_bytes, PUBLIC_MAX_TRACE_BYTES) if lim.public else max_trace_bytes
    if dm is not None:  # a run on the default model shows the fetch's stage while it waits for it
        h.fetching = lambda: dm.stage if dm.pending else None
    hub = [m for m in lim.allowed if m not in (target0, draft0)]
    for m in hub:  # a local folder on the list is offered by its display name, never its server path
        if os.path.isabs(m):
            shown[display_name(m)] = m
    t0, d0 = display_name(target0), display_name(draft0)
    targets = ([(f"{MODEL_NAME} (default)", t0), (f"embedded target ({display_name(EMBEDDED_TARGET)})",
                                                   display_name(EMBEDDED_TARGET))] if target0 == DEFAULT_MODEL
               else [(f"embedded target ({t0})", t0)]) + [_choice(m) for m in hub if m != EMBEDDED_TARGET]
    drafts_shown = ([(f"embedded draft ({d0})", d0)] if draft0 == EMBEDDED_DRAFT else
                    [(f"shipped draft ({d0})", d0), (f"embedded draft ({display_name(EMBEDDED_DRAFT)})",
                                                     display_name(EMBEDDED_DRAFT))]) + \
        [_choice(m) for m in hub if m != EMBEDDED_DRAFT]
    # the default model's status line: a public page shows no server path (the cache folder is named, not placed)
    line = (lambda: no_server_paths(dm.line()) if lim.public else dm.line()) if dm else (lambda: "")
    with gr.Blocks(title="DecodeScope", analytics_enabled=False, delete_cache=(TMP_MAX_AGE_S, TMP_MAX_AGE_S)) as demo:
        status = gr.Markdown(line(), visible=bool(line()), elem_id="default-model-status")
        race0 = drafts.race_default(RACE_DEFAULT, target0 if dm and dm.pending else local, draft0)
        p = layout(Page(), lim, t0, d0, targets, drafts_shown, _positions(local), examples_for(local), race0,
                   preset_target=target0)  # the fields show the preset the first run on target0 finds
        if dm is not None:  # the page follows the default model when its fetch ends (examples, prompt, positions)
            follow = follower(dm, local, p.prompt.value, t0, line)
            outs = [status, p.prompt, p.examples.dataset]
            demo.load(follow, [p.prompt], outs, queue=False, show_progress="hidden", api_visibility="private")
        if dm is not None and dm.pending:  # the fetch's stages on the page, polled until it ends
            timer = gr.Timer(1.0)
            timer.tick(lambda prompt: (*follow(prompt), gr.Timer(active=dm.pending)), [p.prompt], [*outs, timer],
                       queue=False, show_progress="hidden", api_visibility="private")
        wire(p, h)
        h.downloads.others = [Path(demo.GRADIO_CACHE)]  # Gradio's copies of our downloads count against the cap
        label_outputs(p)  # the API's returns are named, not value_55
        preset_from_page(demo, p)  # no preset in an API call = the values it sends
    size = queue_size if queue_size is not None else int(os.environ.get("DECODESCOPE_QUEUE", "32"))
    if lim.public:  # places per client (appkit/public/clients.py, enforced by launch_kwargs' middleware); Gradio's
        # own cap sits above ours, so a client with nothing waiting never meets "Queue is full"
        h.places = Places(size)
        size += PUBLIC_SLOTS
    demo.queue(max_size=size, default_concurrency_limit=1)
    if lim.public and spaces is None:  # (a ZeroGPU worker is a fork: its copy of the queue is never read)
        h.sessions.abandoned = Unread(lambda session: _unread(demo, session), UNREAD_S)
    demo.decodescope = {"limits": lim, "cache": h.cache, "sessions": h.sessions, "handlers": h, "page": p}
    return demo


def wire(p: Page, h: Tabs) -> None:
    """Every event: model events share one GPU queue; one Stop handler serves every tab."""
    # public mode: several events in flight, so a session's job can be refused at once and the model's turns
    # (appkit/public/fair.py: one unit of work at a time, the least-served session first) decide who runs next;
    # ZeroGPU and local mode: one event at a time, as the queue serves them
    slots = PUBLIC_SLOTS if h.lim.public and spaces is None else 1
    model = dict(concurrency_id=GPU, concurrency_limit=slots)
    local = dict(api_visibility="private", queue=False)
    run_out = [p.msg, p.stats, p.output, p.step_view, p.trace_file, p.last]
    run_ev = p.run_btn.click(gpu("run")(named(h.run)), p.inputs(), run_out,
                    api_name="run", show_progress="hidden", js=MARK_STALE, **model)  # "previous run" label
    p.msg.change(None, [p.msg], None, js=UNMARK_STALE_ON_ERROR, **local)  # a refused run keeps the old view, unlabelled
    race_ev = p.race_btn.click(gpu("race")(named(h.race, ("methods", "repeats", "earlier_runs"))),
                               p.inputs(p.race_methods, p.race_repeats, p.race_history), [p.msg, p.race_md, p.race_table, p.race_plot,
                                                                 p.race_lat, p.race_sbs], api_name="race", **model)
    p.prof_btn.click(gpu("profile")(named(h.profile)), p.inputs(), [p.msg, p.prof_md, p.roof_plot, p.flops_plot, p.lat_plot,
                                                      p.prof_files, p.ops_plot], api_name="profile", **model)
    p.sw_btn.click(gpu("sweep")(named(h.sweep, ("sweep_n", "sweep_w", "sweep_max_new", "sweep_heads",
                                                "sweep_budgets"))),
                   p.inputs(p.sw_n, p.sw_w, p.sw_max, p.sw_heads, p.sw_budget), [p.msg, p.sw_status, p.sw_plot, p.sw_table],
                   api_name="sweep", **model)
    for btn in (p.stop_btn, p.race_stop, p.prof_stop, p.sw_stop):
        btn.click(h.stop, None, None, api_name="stop" if btn is p.stop_btn else None,
                  api_visibility="public" if btn is p.stop_btn else "private", queue=False)
    tune_ev = p.tune_btn.click(gpu("tune")(named(h.tune)), p.inputs(),
                               [p.msg, p.budget_md, *[getattr(p, f) for f in tune_fields()], p.preset],
                               api_name="tune", **model)
    load_ev = p.load_btn.click(gpu("load_models")(h.load_models), [p.target, p.draft, p.device, p.dtype, p.kernel], [p.msg, p.model_info],
                     api_name="load_models", **model)
    # replay needs no model, so it never waits behind one; it waits in the same queue, one at a time, so a
    # crowd of large uploads cannot hold several parsed traces and pages in memory at once
    p.rp_btn.click(h.replay, [p.rp_upload, p.rp_pick, p.last], [p.rp_msg, p.rp_stats, p.rp_view, p.rp_text],
                   api_name="replay", concurrency_id=RENDER, concurrency_limit=1)
    # live: the per-step query budget follows every method control (W, N, G, the draft shape); editing a
    # value the presets choose means "manual" (the draft cutoff is the user's under every preset)
    controls = [getattr(p, f) for f in control_fields()]
    for c in [p.method, *controls, p.max_new, p.temperature, p.top_k, p.top_p, p.seed]:  # checked as typed
        c.change(lambda *v: budget_line(Settings.from_values(v), h.lim), p.inputs(), [p.budget_md], **local)
    kept = {field_of(n) for n in USER_KNOBS}
    for f in control_fields():
        if f not in kept:
            getattr(p, f).input(lambda: "manual", None, [p.preset], **local)
    # lesson: a stop sets the page (prompt, method, teaching preset, values), then runs it
    lesson_out = [p.lesson_at, p.lesson_md, p.lesson_prev, p.lesson_next, p.tabs] + [getattr(p, f) for f in lesson.FIELDS]
    for btn, delta in ((p.lesson_start, None), (p.lesson_prev, -1), (p.lesson_next, 1)):
        btn.click(lesson_step(delta, p.target.value), [p.lesson_at], lesson_out, **local).then(
            gpu("run")(named(h.run)), p.inputs(), run_out, show_progress="hidden", js=lesson.RUN_JS, **model)
    # what the controls show is what runs: after each model event (and on picking "auto") the fields
    # take the auto preset's values for every method whose preset is known (appkit/page/autofields.py)
    fill = ([getattr(p, f) for f in autofields.FIELDS] + [p.preset_md])
    for ev in (run_ev, race_ev, tune_ev, load_ev):
        ev.then(lambda *v: autofields.shown(h, *v), p.inputs(), fill, **local)
    for c in (p.preset, p.method):  # shared controls (medusa, eagle) show the selected method's preset
        c.change(lambda *v: autofields.shown(h, *v), p.inputs(), fill, **local)
    for ev in (run_ev, load_ev):  # the prompt's room follows the model as loaded
        ev.then(lambda *v: prompt_hint(h, *v), [p.target, p.device, p.dtype, p.kernel], [p.prompt], **local)
    pick, shown = on_method(p)  # the method's control groups and explanation (appkit/page/method_controls.py)
    p.method.change(pick, [p.method], shown, **local)
    if SHAPE in control_fields():
        getattr(p, SHAPE).change(on_shape, [getattr(p, SHAPE)], [getattr(p, f) for f in shape_fields()], **local)


def follower(dm: DefaultModel, built_from: str, prompt0: str, target: str, status=None):
    """The update a page needs once the default model has arrived, for a page built before (a timer tick
    while the fetch runs, and every later page load: the page's first values are fixed when it is built):
    the fetch line, the examples and their label, the prompt box's positions, and the prompt itself
    where it still holds the first example (an edited prompt is kept)."""
    seen: dict[str, tuple] = {}  # the arrived model's examples, read once (a tokenizer load), not per page load

    status = status or dm.line  # the fetch line as the page shows it (public: without server paths)

    def follow(prompt: str):
        line = gr.update(value=status(), visible=bool(status()))
        now = dm.resolve_now()
        if now == built_from:
            return line, gr.skip(), gr.skip()
        rows, label = seen.get(now) or seen.setdefault(now, examples_for(now))
        box = gr.update(info=prompt_info(_positions(now), target),
                        **({"value": rows[0][0]} if prompt in (prompt0, None, "") else {}))
        return line, box, gr.Dataset(samples=rows, sample_labels=example_labels(rows), label=label)
    return follow


def lesson_step(delta: int | None, default: str):
    """The handler of a lesson button: None starts at the first stop, -1/+1 move; default: the page's default
    target (the lesson teaches on the default model, or on the embedded pair when that is the default)."""
    return lambda at: lesson.go(-1 if delta is None else at, delta or 0, default)


def _unread(demo: gr.Blocks, session: str | None) -> int:
    """Messages Gradio holds for a session that nobody has read (its stream is not open): many means a job
    whose results nobody will read (a fire-and-forget `/gradio_api/call/...`)."""
    queue = getattr(getattr(demo, "_queue", None), "pending_messages_per_session", None)
    pending = queue.get(session) if queue is not None and session else None
    return pending.qsize() if pending is not None else 0


def _choice(name: str) -> tuple[str, str]:
    """A model list entry: a hub id as hub_label shows it, a local folder by its display name (both the label
    and the value the page sends back: build_demo's aliases map it to the folder)."""
    if os.path.isabs(name):
        return display_name(name), display_name(name)
    return hub_label(name), name


def _positions(name: str) -> int | None:
    """The default model's positions, read from its config.json without loading it (for the prompt box)."""
    try:
        cfg = json.loads((Path(name) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg.get("max_position_embeddings") or cfg.get("n_positions")


def launch_kwargs(demo: gr.Blocks | None = None) -> dict:
    """What launch() needs in Gradio 6: the offline plotly.js + step-control script in <head>, the CSS; for a
    public demo the queue's admission per client (a middleware in front of Gradio's routes)."""
    kw = {"head": viz.head_html() + RUN_STATUS_HEAD, "css": CSS, "max_file_size": "25mb"}
    h = demo.decodescope["handlers"] if demo is not None else None
    if h is not None and h.places is not None:  # public: the upload route takes what Replay takes, no more
        kw["max_file_size"] = h.max_trace_bytes
        kw["app_kwargs"] = {"middleware": [Middleware(Admission, places=h.places, downloads=h.downloads)]}
        # every model event in flight may wait for its turn in a worker thread: room for all of them besides
        # Gradio's default 40 for everything else (Stop, the page's checks)
        kw["max_threads"] = 40 + PUBLIC_SLOTS
        no_forwarded_headers_by_default()  # uvicorn trusts X-Forwarded-For from loopback unless told otherwise
    return kw


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    port = int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    build_in_background()  # the CPU kernel builds while the page starts and the model downloads, not on a first click
    demo = build_demo()
    if spaces is not None and os.environ.get("SPACES_ZERO_GPU"):
        # ZeroGPU: weights are placed at start-up (spaces defers the real CUDA move to each GPU call), so
        # the embedded pair is not reloaded inside every @spaces.GPU call.
        cache = demo.decodescope["cache"]
        for name in (demo.decodescope["limits"].default_target, EMBEDDED_DRAFT):
            try:
                cache.get(name, "cuda", None)
            except ModelError as e:
                log.warning("could not preload %s: %s", name, e)
    demo.launch(server_port=port, **launch_kwargs(demo))


if __name__ == "__main__":
    main()
