"""The app's page: every Gradio component, laid out once. app.py wires events to them.

Why apart from app.py: the layout is long and declarative, the wiring is short and is the logic; reading
either should not mean scrolling through the other.
"""
from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

import viz

from .explain import explain
from .limits import TEMPERATURE, Limits
from .replay import shipped

METHOD_CHOICES = [("greedy", "greedy"), ("lookahead (W, N, G)", "lookahead"), ("prompt lookup", "prompt_lookup"),
                  ("speculative (draft model)", "speculative")]
RACE_CHOICES = ["lookahead", "prompt_lookup", "speculative"]
SPEC_MODES = [("chain (K tokens)", "chain"), ("tree (widths per depth)", "tree"), ("dynamic tree (budget)", "budget")]
EXAMPLES = [  # code completion (what the embedded models know: the Python standard library), then chat
    ["def fibonacci(n):"],
    ["import os\n\n\ndef list_python_files(root):\n    \"\"\"Return every .py file under root.\"\"\""],
    ["class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):"],
    ["def read_config(path):\n    with open(path) as f:"],
    ["User: What is a hash table? Answer in two sentences.\nAssistant:"],
    ["User: Write a Python function that reverses a string.\nAssistant: Here it is:\n\ndef reverse(s):"],
]
CSS = """
.ds-badge{font-weight:600}
#ds-output textarea{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
"""


def named_range(comp):
    """Out-of-range values sent to this slider/number fail with the field's name and range (the UI shows the
    same range). Patched on the instance: a subclass would make Gradio write a .pyi stub next to app.py."""
    check = comp.preprocess

    def preprocess(payload):
        try:
            return check(payload)
        except gr.Error:
            lo, hi = (int(x) if float(x).is_integer() else x for x in (comp.minimum, comp.maximum))
            raise gr.Error(f"{comp.label} must be in [{lo}, {hi}], got {payload}") from None

    comp.preprocess = preprocess
    return comp


def Slider(*a, **k):  # noqa: N802 - reads like the component it makes
    return named_range(gr.Slider(*a, **k))


def Number(*a, **k):  # noqa: N802
    return named_range(gr.Number(*a, **k))


def layout(lim: Limits, target0: str, draft0: str, target_choices: list, draft_choices: list) -> SimpleNamespace:
    """Build the page inside an open gr.Blocks; returns the components by name (and `settings`, the inputs
    every run-like event takes, in handler order)."""
    gr.Markdown("# DecodeScope\nSee what **lookahead** and **speculative decoding** really do, step by "
                "step, on a real model. Greedy modes return exactly greedy's tokens — in fewer forward "
                "passes." + (" *Public mode: allow-listed models and tighter limits.*" if lim.public else ""))
    last = gr.State(None)  # per session: the last finished run's trace
    with gr.Accordion("Model", open=False):
        with gr.Row():
            target = gr.Dropdown(target_choices, value=target0, label="target model",
                                 allow_custom_value=True,
                                 info="hub id" + ("" if lim.public else " or local directory") +
                                      (" (allow list only)" if lim.public else ""))
            draft = gr.Dropdown(draft_choices, value=draft0, label="draft model (speculative)",
                                allow_custom_value=True, info="must share the target's tokenizer")
            device = gr.Radio(["auto", "cpu", "cuda"], value="auto", label="device", interactive=not lim.public)
            dtype = gr.Radio(["auto", "fp32", "bf16", "fp16"], value="auto", label="dtype",
                             info="auto = fp32 on CPU, bf16 on GPU")
        with gr.Row():
            load_btn = gr.Button("Load models", size="sm")
            model_info = gr.Markdown("Models load on first use and stay cached.")
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(EXAMPLES[0][0], label="prompt", lines=5, max_lines=14, elem_id="ds-prompt",
                                info=f"at most {20000} characters")
            gr.Examples(EXAMPLES, inputs=[prompt], label="examples: code completion, and chat (for a hub chat model)")
        with gr.Column(scale=2):
            method = gr.Radio(METHOD_CHOICES, value="lookahead", label="method")
            max_new = Slider(lim.lo("max_new_tokens"), lim.hi("max_new_tokens"), value=64, step=1,
                                label="max new tokens", info=lim.info("max_new_tokens"))
            with gr.Group(visible=True) as la_group:
                with gr.Row():
                    W = Slider(lim.lo("window"), lim.hi("window"), value=5, step=1, label="W window",
                                  info=lim.info("window"))
                    N = Slider(lim.lo("ngram"), lim.hi("ngram"), value=4, step=1, label="N n-gram",
                                  info=lim.info("ngram"))
                    G = Slider(lim.lo("guesses"), lim.hi("guesses"), value=5, step=1, label="G guesses",
                                  info=lim.info("guesses"))
                with gr.Row():
                    tune_btn = gr.Button("Autotune W, N, G for this model and prompt", size="sm")
                tune_md = gr.Markdown()
            with gr.Group(visible=False) as pl_group:
                with gr.Row():
                    max_ngram = Slider(lim.lo("max_ngram"), lim.hi("max_ngram"), value=3, step=1,
                                          label="max n-gram to match", info=lim.info("max_ngram"))
                    num_tokens = Slider(lim.lo("num_tokens"), lim.hi("num_tokens"), value=10, step=1,
                                           label="tokens to copy", info=lim.info("num_tokens"))
            with gr.Group(visible=False) as sp_group:
                spec_mode = gr.Radio(SPEC_MODES, value="chain", label="speculative mode")
                with gr.Row():
                    K = Slider(lim.lo("draft_tokens"), lim.hi("draft_tokens"), value=4, step=1,
                                  label="K draft tokens (depth)", info=lim.info("draft_tokens"))
                    widths = gr.Textbox("3,2,1", label="tree widths per depth", visible=False,
                                        info=f"e.g. 3,2,1; each {lim.info('tree_width')}, "
                                             f"≤ {lim.hi('tree_depth')} depths")
                    budget = Slider(lim.lo("tree_budget"), lim.hi("tree_budget"), value=16, step=1, visible=False,
                                       label="tree budget (nodes)", info=lim.info("tree_budget"))
                staged = gr.Checkbox(False, label="staged (n-gram stage 2 drafts for the draft model)")
            with gr.Accordion("sampling (temperature 0 = greedy, exact)", open=False):
                with gr.Row():
                    temperature = Slider(TEMPERATURE[0], TEMPERATURE[1], value=0.0, step=0.05,
                                            label="temperature", info=f"{TEMPERATURE[0]}–{TEMPERATURE[1]}")
                    top_k = Number(0, label="top-k (0 = off)", precision=0, minimum=0,
                                      maximum=lim.hi("top_k"))
                    top_p = Slider(0.01, 1.0, value=1.0, step=0.01, label="top-p")
                    seed = Number(0, label="seed", precision=0, minimum=0, maximum=2**31 - 1)
    settings = [target, draft, device, dtype, prompt, method, max_new, W, N, G, max_ngram, num_tokens,
                spec_mode, K, widths, budget, staged, temperature, top_k, top_p, seed]

    with gr.Tabs():
        with gr.Tab("Run", id="run"):
            with gr.Row():
                run_btn = gr.Button("Run", variant="primary", elem_id="ds-run")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="ds-stop")
            stats = gr.Markdown("Press **Run**: the output streams step by step and the pictures follow.",
                                elem_id="ds-stats")
            with gr.Row():
                with gr.Column(scale=3):
                    output = gr.Textbox(label="output (new tokens)", lines=6, max_lines=16, elem_id="ds-output",
                                        interactive=False)
                    with gr.Row():
                        live_a = gr.Plot(label="live view", elem_id="ds-live-a")
                        live_b = gr.Plot(label="live view 2", elem_id="ds-live-b")
                with gr.Column(scale=2):
                    explain_md = gr.Markdown(explain("lookahead"), elem_id="ds-explain")
            gr.Markdown("#### Step through the finished run\n◀ ▶ or the arrow keys; click a token to jump "
                        "to the step that produced it.")
            step_view = gr.HTML("", js_on_load=viz.stepper.JS_ON_LOAD, elem_id="ds-stepview")
            trace_file = gr.File(label="trace JSON (replay it anywhere)", interactive=False)

        with gr.Tab("Race", id="race"):
            gr.Markdown("The same prompt and settings through greedy and the methods you pick. In greedy "
                        "mode (temperature 0) every method must give **identical tokens**: checked here.")
            race_methods = gr.CheckboxGroup(RACE_CHOICES, value=["lookahead", "prompt_lookup"],
                                            label="accelerated methods")
            with gr.Row():
                race_btn = gr.Button("Race", variant="primary")
                race_stop = gr.Button("Stop", variant="stop")
            race_md = gr.Markdown()
            race_table = gr.Dataframe(label="results", interactive=False)
            with gr.Row():
                race_plot = gr.Plot(label="tokens over time")
                race_lat = gr.Plot(label="step latency vs query tokens")

        with gr.Tab("Profile", id="profile"):
            gr.Markdown("Profiles greedy and the chosen method with torch.profiler: roofline (where each "
                        "step sits between memory- and compute-bound), FLOPs vs steps, step latency vs "
                        "query tokens. Downloads: trace JSON, Perfetto trace (ui.perfetto.dev), "
                        "standalone HTML report.")
            with gr.Row():
                prof_btn = gr.Button("Profile", variant="primary")
                prof_stop = gr.Button("Stop", variant="stop")
            prof_md = gr.Markdown()
            with gr.Row():
                roof_plot = gr.Plot(label="roofline")
                lat_plot = gr.Plot(label="step latency vs query tokens")
            flops_plot = gr.Plot(label="FLOPs vs steps")
            prof_files = gr.Files(label="downloads", interactive=False)

        with gr.Tab("Sweep", id="sweep"):
            gr.Markdown("The lookahead paper's scaling picture on the current target model and prompt: "
                        "compression (tokens per step) vs per-step FLOPs, one line per N, one point per "
                        "W (G = W). More FLOPs per step buy fewer steps — until steps stop being free.")
            with gr.Row():
                sw_n = gr.CheckboxGroup([2, 3, 4, 5, 7], value=[3, 5], label="N (n-gram sizes)")
                sw_w = gr.CheckboxGroup([1, 2, 4, 8, 16], value=[1, 2, 4, 8], label="W (window sizes)")
                sw_max = Slider(8, min(256, lim.hi("max_new_tokens")), value=48, step=8,
                                   label="new tokens per run")
            with gr.Row():
                sw_btn = gr.Button("Run sweep", variant="primary")
                sw_stop = gr.Button("Stop", variant="stop")
            sw_status = gr.Markdown()
            sw_plot = gr.Plot(label="compression vs log per-step FLOPs")
            sw_table = gr.Dataframe(label="runs", interactive=False)

        with gr.Tab("Replay", id="replay"):
            gr.Markdown("Step through a trace recorded elsewhere (e.g. on a GPU with a big model) — no "
                        "model needed. Pick a recorded trace, upload your own (`--json` of the CLI or the "
                        "Run tab's download), or replay your last run.")
            with gr.Row():
                rp_pick = gr.Dropdown(shipped(), value=None, label="recorded traces (assets/traces)")
                rp_upload = gr.File(label="upload trace JSON", file_types=[".json"], type="filepath")
                rp_btn = gr.Button("Replay", variant="primary")
            rp_stats = gr.Markdown()
            rp_view = gr.HTML("", js_on_load=viz.stepper.JS_ON_LOAD, elem_id="ds-replay")
            rp_text = gr.Textbox(label="text of the replayed run", lines=4, interactive=False)

    return SimpleNamespace(**locals())  # every component by its variable name, plus `settings`
