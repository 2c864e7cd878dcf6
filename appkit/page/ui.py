"""The app's page: every Gradio component, laid out once, kept by name on a `Page`. app.py wires events.

Why apart from app.py: the layout is long and declarative, the wiring is short and is the logic. The
settings components carry the names of appkit.run.settings.Settings' fields, so `page.inputs()` is built
from the dataclass, never from a hand-kept positional list. Every number is a plain gr.Number without
minimum/maximum: the browser must not clamp 0 to 1 silently; the handlers say what is wrong.
"""
from __future__ import annotations

import gradio as gr

import viz

from . import lesson
from .examples import EDIT_EXAMPLES, EXAMPLES, VECTOR, example_labels  # noqa: F401 - VECTOR: the tests' code prompt
from .explain import explain
from decoding.fast.cpu_gemm import KERNELS, kernel_wanted
from .hints import DTYPE_INFO, kernel_info, prompt_info
from .autofields import first, first_note
from .method_controls import DATASTORES, SPEC_MODES, initial, method_controls, method_css  # noqa: F401
from ..run.method_fields import DEFAULT_METHOD, method_choices, needing
from ..models.model_card import card_md
from ..public.limits import TEMPERATURE, Limits
from ..race.race import MAX_REPEATS, REPEATS
from ..race.replay import shipped
from ..run.settings import FIELDS, Settings, budget_line
from ..race.tabs import RACE_CHOICES, RACE_DEFAULT
from .widgets import Int, Text
from .run_status import RUN_STATUS_CSS, RUN_STATUS_HEAD  # noqa: F401 - the head script: app.launch_kwargs

METHOD_CHOICES = method_choices()  # (label, name) per method of the registry, in its order
# short enough for one line of the settings column at 1920 px (the radio's info says the rest)
PRESETS = [("auto: tuned for speed", "auto"), ("manual: the values below", "manual"),
           ("teaching: the lesson's values", "teach")]
# The intro's second half, in the "About" accordion beside Model and Model card (one closed line, not three).
ABOUT = ("In fp32, greedy modes return exactly greedy's tokens — in fewer forward passes (in bf16/fp16 the race "
         "measures and says how far they agree; on the int8 CPU kernel, the int8 greedy's tokens; each result line "
         "names the kernel that ran). **Start the lesson** walks through every method on one request; **Run** shows "
         "one method step by step, **Race** compares them, **Profile** and **Sweep** show their cost, **Replay** "
         "steps through a saved trace.")
CSS = """
#ds-header h1{display:inline;font-size:1.6em;margin:0 .5em 0 0}#ds-header p{display:inline;margin:0}
#ds-top-row>*{min-width:min(100%,300px)}
#ds-stats table,#ds-race-md table{display:block;overflow-x:auto;max-width:100%}
#ds-stats th,#ds-stats td{white-space:nowrap}
.ds-badge{font-weight:600}
#ds-output textarea{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
.ds-msg-error{border-left:4px solid #d62728;background:#fdf0f0;padding:6px 10px;border-radius:4px}
#ds-stepview .ds-plot,#ds-stepview .ds-run-plot,#ds-replay .ds-plot,#ds-replay .ds-run-plot{min-width:0;max-width:100%}
.ds-stepper .js-plotly-plot,.ds-stepper .plot-container{max-width:100%}
.ds-stepper,.ds-controls{min-width:0;max-width:100%}
.ds-slider{min-width:80px}
#ds-card table{display:table;width:100%;table-layout:auto}#ds-card td,#ds-card th{white-space:normal;overflow-wrap:anywhere}
.gradio-container{overflow:clip !important}  /* clips like hidden but is no scroll box: the step controls can stick */
#ds-stepview.ds-stale>*{opacity:.55}
#ds-stepview.ds-stale::before{content:"⟲ previous run — a new run is streaming; its step view replaces this one when it finishes";
  display:block;background:#fff4d6;border-left:4px solid #e6a700;padding:4px 8px;margin-bottom:4px;font-size:13px}
@media (pointer:coarse),(max-width:700px){.js-plotly-plot .modebar-container{display:none !important}}
""" + lesson.CSS
CSS += RUN_STATUS_CSS + method_css()
# run on the click in the browser: the step view on the page now belongs to the previous run
UNMARK_STALE_ON_ERROR = ("(m) => { const e = document.querySelector('#ds-stepview'); if (m && e) "
                         "e.classList.remove('ds-stale'); }")
MARK_STALE = ("(...args) => { document.body.classList.remove('ds-lesson-on'); const t = document.querySelector("
              "'button[role=tab][data-tab-id=run]'); if (t && t.getAttribute('aria-selected') !== 'true') t.click(); "
              "const e = document.querySelector('#ds-stepview'); "
              "if (e && e.querySelector('.ds-stepper')) e.classList.add('ds-stale'); return args; }")


class Page:
    """Every component by name (attributes set in layout())."""

    def inputs(self, *extra) -> list:
        """The Settings fields' components, in the dataclass's order, then `extra`."""
        return [getattr(self, f) for f in FIELDS] + list(extra)


def layout(page: Page, lim: Limits, target0: str, draft0: str, target_choices: list, draft_choices: list,
           positions: int | None, examples: tuple[list, str] | None = None,
           race_methods: list[str] | None = None, preset_target: str | None = None) -> Page:
    """Build the page inside an open gr.Blocks; examples: (rows, label) for the default model (examples.py);
    race_methods: the Race's default selection (RACE_DEFAULT less what cannot run on the default target);
    preset_target: the target as the run loads it (its name, not the page's display name), whose auto preset
    the method fields show on first load."""
    shown, shown_label = examples or (EXAMPLES, "examples: code with repetition")
    p = page
    # one line above the lesson, so the tabs are on the first screen at 1920x1080; the rest sits in "About"
    gr.Markdown("# DecodeScope\nSee what **lookahead** and **speculative decoding** really do, step by step, on a "
                "real model." + (" *Public mode: allow-listed models and tighter limits.*" if lim.public else ""),
                elem_id="ds-header")
    p.last = gr.State(None)  # per session: the last finished run's trace
    p.lesson_at = gr.State(-1)  # per session: the lesson stop shown (-1: none)
    with gr.Group(elem_id="ds-lesson-box"):
        with gr.Row():
            p.lesson_start = gr.Button(lesson.start_label(target0), elem_id="ds-lesson-start", scale=3, min_width=200)
            p.lesson_prev = gr.Button("◀ previous stop", visible=False, elem_id="ds-lesson-prev", min_width=120)
            p.lesson_next = gr.Button("next stop ▶", visible=False, elem_id="ds-lesson-next", min_width=120)
        # "running…" at once on a lesson click, in view at 1280x720 (appkit/page/run_status.py fills it)
        gr.HTML("<div id='ds-lesson-status' role='status' aria-live='polite'></div>", padding=False)
        p.lesson_md = gr.Markdown("", elem_id="ds-lesson")
    with gr.Row(equal_height=False, elem_id="ds-top-row"):  # three closed accordions on one line
        with gr.Accordion("About: exact decoding, what each result line names", open=False, elem_id="ds-about"):
            gr.Markdown(ABOUT)
        with gr.Accordion("Model", open=False, elem_id="ds-model-box"):
            with gr.Row():
                p.target = gr.Dropdown(target_choices, value=target0, label="target model", allow_custom_value=True,
                                       info="hub id" + (" (allow list only)" if lim.public else " or local directory"))
                p.draft = gr.Dropdown(draft_choices, value=draft0, label="draft model (speculative)",
                                      allow_custom_value=True, info="must share the target's tokenizer")
                p.device = gr.Radio(["auto", "cpu", "cuda"], value="auto", label="device", interactive=not lim.public)
                p.dtype = gr.Radio(["auto", "fp32", "bf16", "fp16"], value="auto", label="dtype",
                                   info=DTYPE_INFO)
                p.kernel = gr.Radio(list(KERNELS), value=kernel_wanted(), label="CPU kernel", info=kernel_info(),
                                    elem_id="ds-kernel")
            with gr.Row():
                p.load_btn = gr.Button("Load models", size="sm")
                p.model_info = gr.Markdown("Models load on first use and stay cached.")
        with gr.Accordion("Model card: where the weights come from, licences", open=False, elem_id="ds-card"):
            gr.Markdown(card_md())
    # the fields show what the first auto run runs: the run's own preset lookup for the page's target
    shown0 = initial(Settings, preset_target or target0)
    # made here, placed in the settings column: the edit task's examples (under the prompt's column) set it
    p.method = gr.Radio(METHOD_CHOICES, value=DEFAULT_METHOD, label="method", elem_id="ds-method", render=False)
    with gr.Row():
        with gr.Column(scale=3, min_width=280):
            p.prompt = Text(shown[0][0], label="prompt", lines=5, max_lines=14, elem_id="ds-prompt",
                                  info=prompt_info(positions, target0))
            with gr.Row():  # under the prompt: above the fold at 1280x900 (a run shows in the Run tab, selected on click)
                p.run_btn = gr.Button("Run", variant="primary", elem_id="ds-run", min_width=100)
                p.stop_btn = gr.Button("Stop", variant="stop", elem_id="ds-stop", min_width=100)
            gr.HTML("<div id='ds-run-status' role='status' aria-live='polite'></div>", padding=False)
            p.examples = gr.Examples(shown, inputs=[p.prompt], label=shown_label, example_labels=example_labels(shown))
            p.reference = Text("", label="reference text (prompt lookup also copies from it)", lines=3,
                                     max_lines=10, elem_id="ds-reference",
                                     info="reference lookup (LLMA); the input of an edit = aggressive decoding. "
                                          "Empty = plain prompt lookup")
            gr.Examples(EDIT_EXAMPLES, inputs=[p.prompt, p.reference, p.method],  # one button, not a table
                        label="edit task (aggressive decoding): fix the typos; the module is the reference text",
                        example_labels=["fix the typos in a codec module"])
        with gr.Column(scale=2, min_width=280):
            p.method.render()
            p.preset = gr.Radio(PRESETS, value="auto", label="parameters", elem_id="ds-preset",
                                info="auto: the autotuner's choice for this model and device (cached; shipped for "
                                     "the default and embedded models on a CPU); teaching: chosen for the picture, "
                                     "not for speed. Editing a value below switches to manual.")
            p.preset_md = gr.Markdown(first_note(first(preset_target or target0)), elem_id="ds-preset-md")
            p.max_new = Int(128, "max new tokens", lim, "max_new_tokens", elem_id="ds-max-new")
            method_controls(p, lim, shown0)  # one group per method's controls, from its spec (method_controls.py)
            p.budget_md = gr.Markdown(budget_line(Settings(**{**shown0, "method": DEFAULT_METHOD}), lim),
                                      elem_id="ds-budget")
            with gr.Accordion("sampling (temperature 0 = greedy, exact)", open=False):
                with gr.Row():
                    p.temperature = Int(0.0, "temperature", info=f"{TEMPERATURE[0]}–{TEMPERATURE[1]}")
                    p.top_k = Int(0, "top-k (0 = off)", lim, "top_k")
                    p.top_p = Int(1.0, "top-p", info="in (0, 1]")
                    p.seed = Int(0, "seed", info=f"0–{2**31 - 1}")
    p.msg = gr.Markdown("", elem_id="ds-msg")  # the persistent message of the last failed event
    with gr.Tabs() as p.tabs:
        run_tab(p)
        race_tab(p, RACE_DEFAULT if race_methods is None else race_methods)
        profile_tab(p, lim)
        sweep_tab(p, lim)
        replay_tab(p)
    return p


def run_tab(p: Page) -> None:
    with gr.Tab("Run", id="run"):
        with gr.Row(equal_height=False, elem_id="ds-run-row"):
            with gr.Column(scale=2, min_width=300, elem_id="ds-run-left"):
                p.stats = gr.Markdown("Press **Run**: the text streams; the step view follows at the end "
                                      "(and at Stop).", elem_id="ds-stats")
                p.output = gr.Textbox(label="output (new tokens)", lines=8, max_lines=20, elem_id="ds-output",
                                      interactive=False)
                p.trace_file = gr.File(label="trace JSON (replay it anywhere)", interactive=False,
                                       elem_id="ds-trace-file")
                with gr.Accordion("How this method works", open=False):
                    p.explain_md = gr.Markdown(explain(DEFAULT_METHOD), elem_id="ds-explain")
            with gr.Column(scale=3, min_width=300, elem_id="ds-run-right"):
                gr.Markdown("#### Step through the run\n◀ ▶ or the arrow keys; click a token to jump to the "
                            "step that produced it. The profile plots follow the selected step.", elem_id="ds-step-intro")
                p.step_view = gr.HTML("", js_on_load=viz.stepper.JS_ON_LOAD, elem_id="ds-stepview")


def race_tab(p: Page, selected: list[str]) -> None:
    with gr.Tab("Race", id="race"):
        gr.Markdown("The same prompt and settings through greedy and the methods you pick. In greedy "
                    "mode (temperature 0) every method must give **identical tokens**: checked here.")
        with gr.Row():
            p.race_methods = gr.CheckboxGroup(RACE_CHOICES, value=list(selected), scale=3,
                                              label="accelerated methods", elem_id="ds-race-methods")
            p.race_repeats = Int(REPEATS, "repeats", elem_id="ds-race-repeats", min_width=120, scale=1,
                                 info=f"1–{MAX_REPEATS}: each repeat runs every method once, interleaved; "
                                      "the race shows the median and the spread")
            p.race_history = gr.Checkbox(False, label="retrieval drafts from this session's earlier runs",
                                         elem_id="ds-race-history", scale=1, min_width=160,
                                         info="off: every method starts from a fresh history, so retrieval "
                                              "cannot copy an answer you already ran")
        with gr.Row():
            p.race_btn = gr.Button("Race", variant="primary", elem_id="ds-race", min_width=100)
            p.race_stop = gr.Button("Stop", variant="stop", min_width=100)
        p.race_md = gr.Markdown(elem_id="ds-race-md")
        # every method's token strip aligned by output position, and two linked step views
        p.race_sbs = gr.HTML("", elem_id="ds-race-sbs", js_on_load=viz.stepper.JS_ON_LOAD)
        p.race_table = race_results()
        with gr.Row():
            p.race_plot = gr.Plot(label="tokens over time", min_width=300)
            p.race_lat = gr.Plot(label="step latency vs query tokens", min_width=300)


def race_results(value=None) -> gr.Dataframe:
    """The Race's results table: its columns (appkit/page/tables.py RACE_COLUMNS) fit 1920 px with a 10-method
    race's configs; 14 columns pushed "exact", the last, past the table's edge ("identi", "referenc")."""
    return gr.Dataframe(value, label="results", interactive=False, elem_id="ds-race-table")


def profile_tab(p: Page, lim: Limits) -> None:
    with gr.Tab("Profile", id="profile"):
        gr.Markdown("Profiles greedy and the chosen method with torch.profiler: roofline (where each step sits between "
                    "memory- and compute-bound), FLOPs vs steps, step latency vs query tokens, operator breakdown. "
                    "Downloads: trace JSON, Perfetto trace (ui.perfetto.dev), standalone HTML report.")
        with gr.Row():
            p.prof_btn = gr.Button("Profile", variant="primary", min_width=100)
            p.prof_stop = gr.Button("Stop", variant="stop", min_width=100)
        p.prof_md = gr.Markdown()
        with gr.Row():
            # each figure carries its own title in its top-left corner: a component label there would sit on it
            p.roof_plot = gr.Plot(label="roofline", show_label=False, min_width=300)
            p.lat_plot = gr.Plot(label="step latency vs query tokens", show_label=False, min_width=300)
        with gr.Row():
            p.flops_plot = gr.Plot(label="FLOPs vs steps", show_label=False)
            p.ops_plot = gr.Plot(label="operator breakdown (roofline bound)", show_label=False)
        p.prof_files = gr.Files(label="downloads", interactive=False)


def sweep_tab(p: Page, lim: Limits) -> None:
    with gr.Tab("Sweep", id="sweep"):
        gr.Markdown("The lookahead paper's scaling picture on the current target model and prompt: "
                    "compression (tokens per step) vs per-step FLOPs, one line per N, one point per "
                    "W (G = W). More FLOPs per step buy fewer steps — until steps stop being free. "
                    "Pick a heads method for the same picture of Medusa's / EAGLE's tree size.")
        with gr.Row():
            p.sw_n = gr.CheckboxGroup([(str(n), n) for n in (2, 3, 4, 5, 7)] + [("Jacobi (block K = W)", 0)],
                                      value=[3, 5], label="N (n-gram sizes)",
                                      info="Jacobi: plain Jacobi decoding, the flat line lookahead improves on")
            p.sw_w = gr.CheckboxGroup([1, 2, 4, 8, 16], value=[1, 2, 4, 8], label="W (window sizes)")
            p.sw_max = Int(48, "new tokens per run", lim, "max_new_tokens")
        with gr.Row():
            p.sw_heads = gr.CheckboxGroup(list(needing("heads")), value=[], label="heads methods (tree-size sweep)",
                                          info="self-drafting heads (the heads folder of the Run tab; the shipped "
                                               "ones for the embedded model): one line per method")
            p.sw_budget = gr.CheckboxGroup([4, 8, 16, 24, 32], value=[4, 8, 16, 32], label="tree budgets",
                                           info="nodes verified per step: more accepted tokens, a wider forward")
        with gr.Row():
            p.sw_btn = gr.Button("Run sweep", variant="primary", min_width=100)
            p.sw_stop = gr.Button("Stop", variant="stop", min_width=100)
        p.sw_status = gr.Markdown()
        p.sw_plot = gr.Plot(label="compression vs log per-step FLOPs")
        p.sw_table = gr.Dataframe(label="runs", interactive=False)


def replay_tab(p: Page) -> None:
    with gr.Tab("Replay", id="replay"):
        gr.Markdown("Step through a trace recorded elsewhere (e.g. on a GPU with a big model) — no "
                    "model needed. Pick a recorded trace, upload your own (`--json` of the CLI or the "
                    "Run tab's download), or replay your last run.")
        with gr.Row():
            p.rp_pick = gr.Dropdown(shipped(), value=None, label="recorded traces (assets/traces)")
            p.rp_upload = gr.File(label="upload trace JSON", file_types=[".json"], type="filepath", elem_id="ds-rp-upload")
            p.rp_btn = gr.Button("Replay", variant="primary", min_width=100)
        p.rp_msg = gr.Markdown()
        p.rp_stats = gr.Markdown(elem_id="ds-rp-stats")
        p.rp_view = gr.HTML("", js_on_load=viz.stepper.JS_ON_LOAD, elem_id="ds-replay")
        p.rp_text = gr.Textbox(label="text of the replayed run", lines=4, interactive=False)
