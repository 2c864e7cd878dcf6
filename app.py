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
from appkit.errors import friendly, one_line  # noqa: E402
from appkit.explain import explain  # noqa: E402
from appkit.limits import MAX_TRACE_BYTES, Limits  # noqa: E402
from appkit.models import ModelCache, describe, human  # noqa: E402
from appkit.profile import for_viz, race_figure, race_row  # noqa: E402
from appkit.replay import load_trace, shipped  # noqa: E402
from appkit.stream import Sessions, Stopped, stream  # noqa: E402
from appkit.tables import race_summary, race_table, sweep_table  # noqa: E402
from appkit.ui import CSS, RACE_CHOICES, layout  # noqa: E402
from decoding import ModelError, make_drafter, make_sampling, run  # noqa: E402
from decoding.models import DEFAULT_DRAFT, DEFAULT_TARGET  # noqa: E402

log = logging.getLogger("decodescope.app")
GPU = "gpu"  # one concurrency id: every event that runs a model waits in the same queue
LIVE_VIEWS = {"greedy": ("mask", None), "lookahead": ("window", "pool"), "prompt_lookup": ("pool", "mask"),
              "speculative": ("tree", "mask")}
def gpu(duration: int = 120):
    """spaces.GPU on ZeroGPU, identity elsewhere."""
    if spaces is not None:
        return spaces.GPU(duration=duration)
    return lambda fn: fn


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
            lines.append(f"draft: not loaded — {one_line(e)}")
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
                yield race_table(rows), race_summary(rows, sampling.greedy), race_figure(runs), \
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
                yield sweepkit.figure(points), sweep_table(points), f"{k + 1}/{len(cells)} runs done"
        yield sweepkit.figure(points), sweep_table(points), f"done: {len(cells)} runs (+ greedy baseline)"

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
            raise ValueError(f"the trace is corrupt: it could not be drawn ({one_line(e)})") from None
        model = tr.model.get("name", "?") if isinstance(tr.model, dict) else "?"
        return html, stats_md(tr, note="recorded" if model == "?" else ""), tr.text

    def on_spec_mode(mode):
        return gr.update(visible=mode != "tree"), gr.update(visible=mode == "tree"), gr.update(visible=mode == "budget")

    def on_method(method, spec_mode):
        return (gr.update(visible=method == "lookahead"), gr.update(visible=method == "prompt_lookup"),
                gr.update(visible=method == "speculative"), explain(method))

    # ---------------------------------------------------------------- layout
    with gr.Blocks(title="DecodeScope", analytics_enabled=False, delete_cache=(TMP_MAX_AGE_S, TMP_MAX_AGE_S)) as demo:
        ui = layout(lim, target0, draft0, target_choices, draft_choices)

        # ---------------------------------------------------------------- events
        model_in = [ui.target, ui.draft, ui.device, ui.dtype]
        ui.method.change(on_method, [ui.method, ui.spec_mode], [ui.la_group, ui.pl_group, ui.sp_group, ui.explain_md],
                         api_visibility="private", queue=False)
        ui.spec_mode.change(on_spec_mode, [ui.spec_mode], [ui.K, ui.widths, ui.budget], api_visibility="private",
                            queue=False)
        ui.tune_btn.click(autotune, model_in + [ui.prompt], [ui.W, ui.N, ui.G, ui.tune_md], api_name="autotune",
                          concurrency_id=GPU, concurrency_limit=1)
        ui.load_btn.click(load_models, model_in, [ui.model_info], api_name="load_models", concurrency_id=GPU,
                          concurrency_limit=1)
        run_ev = ui.run_btn.click(run_stream, ui.settings, [ui.output, ui.live_a, ui.live_b, ui.step_view, ui.stats,
                                                            ui.trace_file, ui.last],
                                  api_name="run", concurrency_id=GPU, concurrency_limit=1)
        ui.stop_btn.click(stop_run, None, [ui.stats], cancels=[run_ev], api_name="stop", queue=False)
        race_ev = ui.race_btn.click(race, ui.settings[:5] + ui.settings[6:] + [ui.race_methods],
                                    [ui.race_table, ui.race_md, ui.race_plot, ui.race_lat], api_name="race",
                                    concurrency_id=GPU, concurrency_limit=1)
        ui.race_stop.click(stop_quietly, None, None, cancels=[race_ev], api_visibility="private", queue=False)
        prof_ev = ui.prof_btn.click(profile, ui.settings, [ui.roof_plot, ui.flops_plot, ui.lat_plot, ui.prof_md,
                                                           ui.prof_files],
                                    api_name="profile", concurrency_id=GPU, concurrency_limit=1)
        ui.prof_stop.click(stop_quietly, None, None, cancels=[prof_ev], api_visibility="private", queue=False)
        sw_ev = ui.sw_btn.click(sweep, model_in + [ui.prompt, ui.sw_n, ui.sw_w, ui.sw_max],
                                [ui.sw_plot, ui.sw_table, ui.sw_status], api_name="sweep", concurrency_id=GPU,
                                concurrency_limit=1)
        ui.sw_stop.click(stop_quietly, None, None, cancels=[sw_ev], api_visibility="private", queue=False)
        ui.rp_btn.click(replay, [ui.rp_upload, ui.rp_pick, ui.last], [ui.rp_view, ui.rp_stats, ui.rp_text],
                        api_name="replay", concurrency_limit=4)
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
