"""DecodeScope: run, race, profile and replay exact lookahead / speculative decoding in the browser.

    python app.py            # http://127.0.0.1:7860 (PORT or GRADIO_SERVER_PORT to change)

Offline by default (the embedded models, no CDN); ready for Hugging Face Spaces (README front matter,
ZeroGPU through `spaces.GPU` when the package exists, one GPU queue for every model event). Public mode:
DECODESCOPE_PUBLIC=1 (allow-listed models only, tighter limits, no local paths).

Wiring only: decoding/ decodes, viz/ draws, profiling/ measures; appkit/ holds the app's small helpers.
"""
from __future__ import annotations

try:  # ZeroGPU: `spaces` must be imported before anything touches CUDA
    import spaces
except ImportError:  # everywhere else the decorator is a no-op
    spaces = None

import contextlib
import functools
import inspect
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

import viz  # noqa: E402
from appkit import sweep as sweepkit  # noqa: E402
from appkit.explain import explain  # noqa: E402
from appkit.limits import MAX_TRACE_BYTES, TEMPERATURE, Limits  # noqa: E402
from appkit.models import ModelCache, describe, human  # noqa: E402
from appkit.profile import for_viz, race_figure, race_row  # noqa: E402
from appkit.replay import load_trace, shipped  # noqa: E402
from appkit.stream import Sessions, Stopped, stream  # noqa: E402
from decoding import ModelError, make_drafter, make_sampling, run  # noqa: E402
from decoding.models import DEFAULT_DRAFT, DEFAULT_TARGET  # noqa: E402

log = logging.getLogger("decodescope.app")
GPU = "gpu"  # one concurrency id: every event that runs a model waits in the same queue
METHOD_CHOICES = [("greedy", "greedy"), ("lookahead (W, N, G)", "lookahead"), ("prompt lookup", "prompt_lookup"),
                  ("speculative (draft model)", "speculative")]
SPEC_MODES = [("chain (K tokens)", "chain"), ("tree (widths per depth)", "tree"), ("dynamic tree (budget)", "budget")]
RACE_CHOICES = ["lookahead", "prompt_lookup", "speculative"]
LIVE_VIEWS = {"greedy": ("mask", None), "lookahead": ("window", "pool"), "prompt_lookup": ("pool", "mask"),
              "speculative": ("tree", "mask")}
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


def gpu(duration: int = 120):
    """spaces.GPU on ZeroGPU, identity elsewhere."""
    if spaces is not None:
        return spaces.GPU(duration=duration)
    return lambda fn: fn


def _message(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def friendly(fn):
    """Turn every failure into one gr.Error line (the server keeps serving); Stop ends quietly."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a, **k):
            try:
                yield from fn(*a, **k)
            except (gr.Error, GeneratorExit):
                raise
            except Stopped:
                return
            except (ValueError, ModelError, KeyError, TypeError, OSError) as e:
                raise gr.Error(_message(e)) from None
            except Exception as e:  # noqa: BLE001
                log.exception("unexpected error")
                raise gr.Error(f"{type(e).__name__}: {_message(e)}") from None
        return gen

    @functools.wraps(fn)
    def call(*a, **k):
        try:
            return fn(*a, **k)
        except gr.Error:
            raise
        except Stopped:
            raise gr.Error("stopped") from None
        except (ValueError, ModelError, KeyError, TypeError, OSError) as e:
            raise gr.Error(_message(e)) from None
        except Exception as e:  # noqa: BLE001
            log.exception("unexpected error")
            raise gr.Error(f"{type(e).__name__}: {_message(e)}") from None
    return call


TMP = Path(tempfile.gettempdir()) / "decodescope-app"
TMP_MAX_AGE_S = 3600


def _tmpdir() -> Path:
    """A fresh folder for one request's downloads; folders older than an hour are removed."""
    TMP.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for old in TMP.iterdir():
        try:
            if now - old.stat().st_mtime > TMP_MAX_AGE_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    return Path(tempfile.mkdtemp(dir=TMP))


def stats_md(tr, live: bool = False, note: str = "") -> str:
    st = tr.stats()
    head = "running…" if live else f"done ({tr.stop_reason or 'finished'})"
    m = tr.model if isinstance(tr.model, dict) else {}
    if m.get("name"):
        note = " · ".join(x for x in (note, f"model `{Path(str(m['name'])).name}` on {m.get('device', '?')} "
                                             f"({m.get('dtype', '?')})") if x)
    return (f"**{tr.method}** · {head}{' · ' + note if note else ''}\n\n"
            f"| tokens/s | new tokens | steps (forward passes) | compression | mean accepted / step | wall s |\n"
            f"|---|---|---|---|---|---|\n"
            f"| {st['tokens_per_s']:.1f} | {st['new_tokens']} | {st['steps']} | {st['compression']:.2f} | "
            f"{st['mean_accepted']:.2f} | {st['wall_s']:.2f} |")


def _figure(view: str | None, tr, i: int):
    if view is None or not tr.steps:
        return None
    maker = {"window": viz.window.figure, "pool": viz.pool.figure, "tree": viz.tree.figure, "mask": viz.mask.figure}
    return maker[view](tr, i)


def build_demo(default_target: str | None = None, default_draft: str | None = None, public: bool | None = None,
               cache: ModelCache | None = None, queue_size: int | None = None,
               max_trace_bytes: int = MAX_TRACE_BYTES) -> gr.Blocks:
    """The whole app. default_target/default_draft: the models preselected (the embedded pair by default)."""
    target0, draft0 = default_target or DEFAULT_TARGET, default_draft or DEFAULT_DRAFT
    lim = Limits(public, target0, draft0)
    cache = cache or ModelCache()
    sessions = Sessions()
    hub = [m for m in lim.allowed if m not in (target0, draft0)]
    target_choices = [(f"embedded target ({Path(target0).name})", target0)] + [(m, m) for m in hub]
    draft_choices = [(f"embedded draft ({Path(draft0).name})", draft0)] + [(m, m) for m in hub]

    # ---------------------------------------------------------------- shared helpers (closures)
    def models(target, draft, device, dtype, need_draft: bool):
        target = lim.model_name(target, "target")
        if lim.public and device not in (None, "", "auto"):
            device = "auto"
        model, tok = cache.get(target, device, dtype)
        dmodel = dtok = None
        if need_draft:
            draft = lim.model_name(draft, "draft")
            dmodel, dtok = cache.get(draft, device, dtype)
        return model, tok, dmodel, dtok

    def method_kw(method, W, N, G, max_ngram, num_tokens, spec_mode, K, widths, budget, staged,
                  model=None, tok=None, dmodel=None, dtok=None) -> dict:
        if method not in ("greedy", "lookahead", "prompt_lookup", "speculative"):
            raise ValueError(f"unknown method {method!r}; choose greedy, lookahead, prompt_lookup or speculative")
        if method == "lookahead":
            return dict(window=lim.int("window", W), ngram=lim.int("ngram", N), guesses=lim.int("guesses", G))
        if method == "prompt_lookup":
            return dict(max_ngram=lim.int("max_ngram", max_ngram), num_tokens=lim.int("num_tokens", num_tokens))
        if method == "speculative":
            kw = dict(draft_model=dmodel, staged=bool(staged), target_model=model, tokenizer=tok, draft_tokenizer=dtok)
            if spec_mode == "tree":
                parts = [p for p in str(widths or "").replace(" ", "").split(",") if p]
                if not parts:
                    raise ValueError("tree widths are empty: give children per depth, e.g. 3,2,1")
                if len(parts) > lim.hi("tree_depth"):
                    raise ValueError(f"tree widths must have at most {lim.hi('tree_depth')} depths, got {len(parts)}")
                kw["tree"] = [lim.int("tree_width", p) if p.lstrip("-").isdigit() else _bad_widths(widths)
                              for p in parts]
            elif spec_mode == "budget":
                kw.update(tree_budget=lim.int("tree_budget", budget), draft_tokens=lim.int("draft_tokens", K))
            else:
                kw["draft_tokens"] = lim.int("draft_tokens", K)
            return kw
        return {}

    def sampling_of(temperature, top_k, top_p, seed):
        t = lim.temperature(temperature)
        return make_sampling(t, lim.int("top_k", top_k), float(top_p), int(seed or 0))

    def prepare(target, draft, device, dtype, prompt, method, max_new, W, N, G, max_ngram, num_tokens,
                spec_mode, K, widths, budget, staged, temperature, top_k, top_p, seed):
        prompt = lim.prompt(prompt)
        max_new = lim.int("max_new_tokens", max_new)
        sampling = sampling_of(temperature, top_k, top_p, seed)
        method_kw(method, W, N, G, max_ngram, num_tokens, spec_mode, K, widths, budget, staged)  # validate first
        model, tok, dmodel, dtok = models(target, draft, device, dtype, method == "speculative")
        kw = method_kw(method, W, N, G, max_ngram, num_tokens, spec_mode, K, widths, budget, staged,
                       model, tok, dmodel, dtok)
        return prompt, max_new, sampling, model, tok, kw

    def drafter_for(method, kw):
        return make_drafter(method, **kw)

    # ---------------------------------------------------------------- event handlers
    @gpu(duration=60)
    @friendly
    def load_models(target, draft, device, dtype, progress=gr.Progress()):
        progress(0.1, desc="loading target model")
        t0 = time.perf_counter()
        model, tok, _, _ = models(target, draft, device, dtype, False)
        lines = [_model_line("target", model, tok)]
        progress(0.6, desc="loading draft model")
        try:
            _, _, dmodel, dtok = models(target, draft, device, dtype, True)
            lines.append(_model_line("draft", dmodel, dtok))
        except (ValueError, ModelError) as e:
            lines.append(f"draft: not loaded — {_message(e)}")
        return "\n\n".join(lines) + f"\n\nloaded in {time.perf_counter() - t0:.1f} s"

    @gpu(duration=120)
    @friendly
    def autotune(target, draft, device, dtype, prompt, progress=gr.Progress()):
        from profiling.autotune import GRID, autotune as tune
        prompt = lim.prompt(prompt)
        model, tok, _, _ = models(target, draft, device, dtype, False)
        progress(0.2, desc="measuring step latency vs query tokens, then pilot runs on this prompt")
        grid = [c for c in GRID if c[0] <= lim.hi("window") and c[1] <= lim.hi("ngram") and c[2] <= lim.hi("guesses")]
        res = tune(model, tok, prompt, pilot_tokens=32, grid=grid)
        best, top = res["best"], res["ranking"][0]
        note = (f"Autotuned for this model, device and prompt: **W={best['window']}, N={best['ngram']}, "
                f"G={best['guesses']}** — {top['query_tokens']:.0f} query tokens/step, compression "
                f"{top['compression']:.2f}, predicted {top['predicted_speedup']:.2f}× greedy.")
        return best["window"], best["ngram"], best["guesses"], note

    @gpu(duration=120)
    @friendly
    def run_stream(target, draft, device, dtype, prompt, method, max_new, W, N, G, max_ngram, num_tokens,
                   spec_mode, K, widths, budget, staged, temperature, top_k, top_p, seed,
                   request: gr.Request = None):
        session = getattr(request, "session_hash", None)
        stop = sessions.start(session)
        try:
            yield ("", None, None, "", "loading model…", None, gr.skip())
            prompt, max_new, sampling, model, tok, kw = prepare(
                target, draft, device, dtype, prompt, method, max_new, W, N, G, max_ngram, num_tokens,
                spec_mode, K, widths, budget, staged, temperature, top_k, top_p, seed)
            drafter = drafter_for(method, kw)
            va, vb = LIVE_VIEWS[method]
            lives = stream(model, tok, prompt, method, stop, max_new_tokens=max_new, sampling=sampling,
                           drafter=drafter, thread_setup=_thread_setup)
            for live in _until_stopped(lives):
                if live is None:  # Stop: say so, keep the partial output on screen
                    yield (gr.skip(),) * 4 + (STOPPED, gr.skip(), gr.skip())
                    return
                if live.done:
                    tr = live.final
                    path = _tmpdir() / f"{tr.method}-trace.json"
                    tr.save(path)
                    last = len(tr.steps) - 1
                    yield (tr.text, _figure(va, tr, last), _figure(vb, tr, last),
                           viz.step_view_html(tr, initial_step=last), stats_md(tr), str(path), tr.to_dict())
                else:
                    tr = live.trace
                    i = len(tr.steps) - 1
                    yield (tr.text, _figure(va, tr, i), _figure(vb, tr, i), gr.skip(),
                           stats_md(tr, live=True, note=f"step {tr.steps[-1].index}"), gr.skip(), gr.skip())
        finally:
            sessions.end(session, stop)

    def stop_run(request: gr.Request = None):
        sessions.stop(getattr(request, "session_hash", None), wait_s=3.0)
        return STOPPED

    def stop_quietly(request: gr.Request = None):
        sessions.stop(getattr(request, "session_hash", None))

    @contextlib.contextmanager
    def stoppable(request):
        """on_step hook for runs made in the handler's own thread: Stop ends them at the next step."""
        session = getattr(request, "session_hash", None)
        ev = sessions.start(session)

        def check(step=None, out=None):
            if ev.is_set():
                raise Stopped()
        try:
            yield check
        finally:
            ev.set()
            sessions.end(session, ev)

    @gpu(duration=180)
    @friendly
    def race(target, draft, device, dtype, prompt, max_new, W, N, G, max_ngram, num_tokens, spec_mode, K, widths,
             budget, staged, temperature, top_k, top_p, seed, methods, progress=gr.Progress(),
             request: gr.Request = None):
        methods = [m for m in (methods or []) if m in RACE_CHOICES]
        if not methods:
            raise ValueError("pick at least one accelerated method to race against greedy")
        prompt = lim.prompt(prompt)
        max_new = lim.int("max_new_tokens", max_new)
        sampling = sampling_of(temperature, top_k, top_p, seed)
        for m in methods:
            method_kw(m, W, N, G, max_ngram, num_tokens, spec_mode, K, widths, budget, staged)
        model, tok, dmodel, dtok = models(target, draft, device, dtype, "speculative" in methods)
        runs, rows = {}, []
        names = ["greedy", *methods]
        with stoppable(request) as check:
            run(model, tok, prompt, "greedy", max_new_tokens=2, trace=False)  # warm-up: the first forward is slow
            for k, m in enumerate(names):
                progress(k / len(names), desc=f"running {m}")
                kw = method_kw(m, W, N, G, max_ngram, num_tokens, spec_mode, K, widths, budget, staged,
                               model, tok, dmodel, dtok)
                tr = run(model, tok, prompt, m, max_new_tokens=max_new, sampling=sampling,
                         drafter=drafter_for(m, kw), on_step=check)
                runs[m] = tr
                rows.append(race_row(m, tr, runs["greedy"], not sampling.greedy))
                yield _race_table(rows), _race_summary(rows, sampling.greedy), race_figure(runs), \
                    viz.profile.latency_figure({n: (t, None) for n, t in runs.items()})

    @gpu(duration=240)
    @friendly
    def profile(target, draft, device, dtype, prompt, method, max_new, W, N, G, max_ngram, num_tokens,
                spec_mode, K, widths, budget, staged, temperature, top_k, top_p, seed, progress=gr.Progress(),
                request: gr.Request = None):
        from profiling import profile_run
        prompt, max_new, sampling, model, tok, kw = prepare(
            target, draft, device, dtype, prompt, method, max_new, W, N, G, max_ngram, num_tokens,
            spec_mode, K, widths, budget, staged, temperature, top_k, top_p, seed)
        out = _tmpdir()
        runs = {}
        names = ["greedy"] if method == "greedy" else ["greedy", method]
        for k, m in enumerate(names):
            progress(k / (len(names) + 1), desc=f"profiling {m}")
            mkw = method_kw(m, W, N, G, max_ngram, num_tokens, spec_mode, K, widths, budget, staged,
                            model, tok, *models(target, draft, device, dtype, m == "speculative")[2:])
            mkw = {k2: v for k2, v in mkw.items() if k2 not in ("target_model", "tokenizer", "draft_tokenizer")}
            with stoppable(request) as check:
                tr, prof = profile_run(model, tok, prompt, m, max_new_tokens=max_new, sampling=sampling,
                                       perfetto_path=out / f"{m}.perfetto.json", on_step=check, **mkw)
            runs[m] = (tr, for_viz(prof))
        progress(len(names) / (len(names) + 1), desc="drawing")
        tr, prof = runs[method]
        trace_path = out / f"{method}-trace.json"
        tr.save(trace_path)
        report = viz.write_report(tr, out / f"{method}-report.html", profile=prof,
                                  compare=runs if len(runs) > 1 else None)
        totals = prof.get("totals") or {}
        peaks = prof.get("peaks") or {}
        summary = (f"**{method}** on {prof.get('device', '?')} ({prof.get('dtype', '?')}) · "
                   f"{tr.stats()['new_tokens']} tokens in {len(tr.steps)} steps · measured peaks: "
                   f"{peaks.get('flops', 0) / 1e9:.1f} GFLOP/s, {peaks.get('bandwidth', 0) / 1e9:.1f} GB/s"
                   + (f" · total FLOPs {totals.get('flops', 0):.3g}" if totals.get("flops") else ""))
        return (viz.profile.roofline_figure(prof, tr), viz.profile.compare_figure(runs),
                viz.profile.latency_figure(runs), summary,
                [str(trace_path), str(prof.get("perfetto") or out / f"{method}.perfetto.json"), str(report)])

    @gpu(duration=240)
    @friendly
    def sweep(target, draft, device, dtype, prompt, ns, ws, max_new, progress=gr.Progress(),
              request: gr.Request = None):
        prompt = lim.prompt(prompt)
        max_new = lim.int("max_new_tokens", max_new)
        ns = [lim.int("ngram", n) for n in (ns or [])]
        ws = [lim.int("window", w) for w in (ws or [])]
        if not ns or not ws:
            raise ValueError("pick at least one N and one W for the sweep")
        cells = sweepkit.grid(ns, ws)
        if len(cells) > lim.sweep_max_runs:
            raise ValueError(f"the sweep has {len(cells)} runs; at most {lim.sweep_max_runs} — pick fewer N or W")
        model, tok, _, _ = models(target, draft, device, dtype, False)
        with stoppable(request) as check:
            points = [sweepkit.baseline(model, tok, prompt, max_new, on_step=check)]
            for k, (n, w) in enumerate(cells):
                progress(k / len(cells), desc=f"N={n} W={w} ({k + 1}/{len(cells)})")
                points.append(sweepkit.point(model, tok, prompt, n, w, max_new, on_step=check))
                yield sweepkit.figure(points), _sweep_table(points), f"{k + 1}/{len(cells)} runs done"
        yield sweepkit.figure(points), _sweep_table(points), f"done: {len(cells)} runs (+ greedy baseline)"

    @friendly
    def replay(upload, shipped_path, last):
        if upload:
            tr = load_trace(upload if isinstance(upload, str) else upload.name, max_trace_bytes)
        elif shipped_path:
            if shipped_path not in [path for _, path in shipped()]:  # never read other files on the server
                raise ValueError("pick one of the recorded traces in the list")
            tr = load_trace(shipped_path)
        elif last:
            tr = load_trace_dict(last)
        else:
            raise ValueError("upload a trace JSON, pick a recorded trace, or run something first")
        try:
            html = viz.step_view_html(tr)
        except Exception as e:  # noqa: BLE001 - a trace that parses but cannot be drawn is corrupt
            raise ValueError(f"the trace is corrupt: it could not be drawn ({_message(e)})") from None
        model = tr.model.get("name", "?") if isinstance(tr.model, dict) else "?"
        return html, stats_md(tr, note="recorded" if model == "?" else ""), tr.text

    def on_spec_mode(mode):
        return gr.update(visible=mode != "tree"), gr.update(visible=mode == "tree"), gr.update(visible=mode == "budget")

    def on_method(method, spec_mode):
        return (gr.update(visible=method == "lookahead"), gr.update(visible=method == "prompt_lookup"),
                gr.update(visible=method == "speculative"), explain(method))

    # ---------------------------------------------------------------- layout
    with gr.Blocks(title="DecodeScope", analytics_enabled=False, delete_cache=(TMP_MAX_AGE_S, TMP_MAX_AGE_S)) as demo:
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

        # ---------------------------------------------------------------- events
        method.change(on_method, [method, spec_mode], [la_group, pl_group, sp_group, explain_md],
                      api_visibility="private", queue=False)
        spec_mode.change(on_spec_mode, [spec_mode], [K, widths, budget], api_visibility="private", queue=False)
        tune_btn.click(autotune, [target, draft, device, dtype, prompt], [W, N, G, tune_md], api_name="autotune",
                       concurrency_id=GPU, concurrency_limit=1)
        load_btn.click(load_models, [target, draft, device, dtype], [model_info], api_name="load_models",
                       concurrency_id=GPU, concurrency_limit=1)
        run_ev = run_btn.click(run_stream, settings, [output, live_a, live_b, step_view, stats, trace_file, last],
                               api_name="run", concurrency_id=GPU, concurrency_limit=1)
        stop_btn.click(stop_run, None, [stats], cancels=[run_ev], api_name="stop", queue=False)
        race_ev = race_btn.click(race, settings[:5] + settings[6:] + [race_methods],
                                 [race_table, race_md, race_plot, race_lat], api_name="race",
                                 concurrency_id=GPU, concurrency_limit=1)
        race_stop.click(stop_quietly, None, None, cancels=[race_ev], api_visibility="private", queue=False)
        prof_ev = prof_btn.click(profile, settings, [roof_plot, flops_plot, lat_plot, prof_md, prof_files],
                                 api_name="profile", concurrency_id=GPU, concurrency_limit=1)
        prof_stop.click(stop_quietly, None, None, cancels=[prof_ev], api_visibility="private", queue=False)
        sw_ev = sw_btn.click(sweep, [target, draft, device, dtype, prompt, sw_n, sw_w, sw_max],
                             [sw_plot, sw_table, sw_status], api_name="sweep", concurrency_id=GPU,
                             concurrency_limit=1)
        sw_stop.click(stop_quietly, None, None, cancels=[sw_ev], api_visibility="private", queue=False)
        rp_btn.click(replay, [rp_upload, rp_pick, last], [rp_view, rp_stats, rp_text], api_name="replay",
                     concurrency_limit=4)
    demo.queue(max_size=queue_size if queue_size is not None else int(os.environ.get("DECODESCOPE_QUEUE", "32")),
               default_concurrency_limit=1)
    demo.decodescope = {"limits": lim, "cache": cache, "sessions": sessions}
    return demo


STOPPED = "**Stopped.** The output so far is kept above; press **Run** to start again."


def _until_stopped(gen):
    """Iterate gen; a Stopped ends it with one final None."""
    try:
        yield from gen
    except Stopped:
        yield None


def launch_kwargs() -> dict:
    """What launch() needs in Gradio 6: the offline plotly.js + step-control script in <head>, the CSS."""
    return {"head": viz.head_html(), "css": CSS, "max_file_size": "25mb"}


def load_trace_dict(d: dict):
    from decoding import Trace
    return Trace.from_dict(d)


def _bad_widths(text):
    raise ValueError(f"tree widths must be comma-separated whole numbers like 3,2,1, got {text!r}")


def _model_line(role: str, model, tok) -> str:
    d = describe(model, tok)
    root = str(Path(__file__).resolve().parent) + os.sep
    name = d["name"][len(root):] if str(d["name"]).startswith(root) else d["name"]  # no absolute local paths
    return (f"**{role}**: `{name}` · {d['type']} · {human(d['params'])} parameters · device **{d['device']}** · "
            f"dtype **{d['dtype']}** · {d['layout']} weight layout · vocabulary {d['vocab']} · "
            f"{d['positions']} positions")


def _thread_setup():
    """The worker thread inherits nothing from torch's per-thread state; keep grad off."""
    import torch
    torch.set_grad_enabled(False)


def _race_table(rows: list[dict]):
    import pandas as pd
    return pd.DataFrame(rows)


def _race_summary(rows: list[dict], greedy: bool) -> str:
    parts = []
    for r in rows[1:]:
        parts.append(f"**{r['method']}**: {r['speedup vs greedy']}× wall-clock, {r['compression']} tokens/step, "
                     f"<span class='ds-badge'>{r['exact']}</span>")
    head = "Exactness checked on the spot (greedy mode)." if greedy else "Sampling mode: exactness is distributional."
    return head + "\n\n" + "\n\n".join(parts)


def _sweep_table(points: list[dict]):
    import pandas as pd
    rows = [{"N": p["N"] if p["N"] > 1 else "greedy", "W": p["W"], "G": p["G"], "compression": round(p["compression"], 3),
             "FLOPs/step": f"{p['flops_per_step']:.3g}", "query tokens/step": round(p["query_per_step"], 1),
             "steps": p["steps"], "tokens/s": round(p["tokens_per_s"], 1)} for p in points]
    return pd.DataFrame(rows)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    port = int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    demo = build_demo()
    if spaces is not None and os.environ.get("SPACES_ZERO_GPU"):
        # ZeroGPU: weights are placed at start-up (spaces defers the real CUDA move to each GPU call), so
        # the embedded pair is not reloaded inside every @spaces.GPU call.
        cache = demo.decodescope["cache"]
        for name in (DEFAULT_TARGET, DEFAULT_DRAFT):
            try:
                cache.get(name, "cuda", None)
            except ModelError as e:
                log.warning("could not preload %s: %s", name, e)
    demo.launch(server_port=port, **launch_kwargs())


if __name__ == "__main__":
    main()
