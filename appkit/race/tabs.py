"""Handlers of the Race, Profile, Sweep and Replay tabs, the preset tuner and the model loader.

They share appkit.run.handlers (settings checks, models, presets, the error policy) and stream.Job (one
worker thread, one Stop). Every figure is drawn in viz/ (viz.race, viz.sweep, viz.costs).
"""
from __future__ import annotations

import time

import gradio as gr

import viz
from decoding import ModelError
from decoding.methods.registry import BASELINE  # greedy: what every race runs first
from viz.counts import run_counts
from viz.exports.teach import teaching_step

from . import race as racekit, sweep as sweepkit
from ..run import presets
from ..run.costs import for_viz
from ..errors import one_line, reported
from ..run.handlers import CLEAR, Handlers, Prepared, thread_setup
from ..public.limits import MAX_REPLAY_HTML_BYTES
from ..run.method_fields import accelerated, needing, needs
from ..models.model_cache import model_line
from .replay import load_trace, shipped_path
from .tune_tab import TuneTab
from ..run.settings import FIELDS, Settings, raise_if, whole
from ..public.fair import PROFILE_COST, Refused
from ..run.stream import Job
from ..run.copied import copied_note
from ..run.speed_claim import decode_ms
from ..run.threads import run_key
from ..page.tables import public_trace, race_table, stats_md, sweep_table

RACE_CHOICES = accelerated()  # every method of the registry but greedy
# on request: jacobi (the lesson, not a contender), medusa / eagle (heads trained for the target), ...
RACE_DEFAULT = ["lookahead", "prompt_lookup", "speculative"]


class Tabs(TuneTab, Handlers):
    """Run tab (Handlers) plus the other tabs."""

    @reported(6, client_error=True)
    def race(self, request: gr.Request, *values):
        """Greedy and each picked method, `repeats` times interleaved (repeat r runs them rotated by r);
        rows stream in as runs finish and show the median and min-max over the runs so far."""
        session, client = self.arrived(request)
        n = len(FIELDS)
        s, picked = Settings.from_values(values[:n]), values[n] if len(values) > n else None
        methods = [m for m in (picked or []) if m in RACE_CHOICES]
        repeats = values[n + 1] if len(values) > n + 1 and values[n + 1] not in (None, "") else racekit.REPEATS
        problems = [] if methods else ["**accelerated methods**: pick at least one to race against greedy"]
        try:
            repeats = float(repeats)
            if repeats != int(repeats) or not 1 <= repeats <= racekit.MAX_REPEATS:
                raise ValueError
            repeats = int(repeats)
        except (TypeError, ValueError):
            problems.append(f"**repeats** must be a whole number in [1, {racekit.MAX_REPEATS}], got {repeats}")
        raise_if(problems)
        earlier = len(values) > n + 2 and bool(values[n + 2])  # retrieval drafts from this session's earlier runs
        with self.turns.job(session, client):
            yield from self._race(s, methods, repeats, session, earlier)

    def _race(self, s: Settings, methods: list[str], repeats: int, session: str | None, earlier: bool = False):
        stop = self.sessions.start(session)
        try:
            p = yield from self.prepare(s, [BASELINE, *methods], 6, session, stop, runs=(len(methods) + 1) * repeats,
                                        what="race")
            # a fresh history unless asked: retrieval copying the visitor's earlier answer is not its speed;
            # asked, it is read, never joined (each run drafts from a frozen copy) and the verdict says so
            p.history = self.histories.get(session) if earlier else None

            def work(job: Job):
                return racekit.race_runs(p, methods, repeats, job)

            for kind, result in Job(work, stop, thread_setup).updates():
                runs, current = (result, None) if kind == "done" else (result or ({}, None))
                if kind == "done" and runs.get(BASELINE):  # a later Run on this prompt shows its speed against it
                    self.greedy_ms.put(session, run_key(p), [ms for t in runs[BASELINE] for ms in decode_ms(t)])
                if kind == "stopped":
                    current = f"Stopped during {current}: the finished runs are kept." if current else "Stopped."
                elif kind == "progress":
                    current = f"running {current}…" if current else None
                if runs.get(BASELINE):
                    yield (gr.skip(), *self._race_view(p, runs, current or ""))
                elif current:
                    yield gr.skip(), current, gr.skip(), gr.skip(), gr.skip(), gr.skip()
        finally:
            self.sessions.end(session, stop)

    def _race_view(self, p: Prepared, runs: dict, status: str) -> tuple:
        """runs: {method: [trace per repeat]}; the figures draw each method's median-time run."""
        g = runs[BASELINE]
        rows, reasons = [], []
        param = next(p.model.parameters())
        device, dtype = str(param.device), str(param.dtype)
        for m, trs in runs.items():
            row = racekit.race_row(m, trs, g, not p.sampling.greedy)
            row["config"] = presets.describe(m, p.params.get(m, {}))
            rows.append(row)
            reasons.append(racekit.reason(m, trs, g, row["speedup vs greedy"], device, row["busy"]))
        auto = "Auto presets for this device." if p.settings.preset == "auto" else ""
        shown = {m: racekit.representative(trs) for m, trs in runs.items()}
        copies = [copied_note(t, "this session's earlier runs (asked for)", f"{m}: ") for m, t in shown.items()]
        md = racekit.summary(rows, reasons, p.sampling.greedy, auto, dtype, [c for c in copies if c],
                             final=not status.startswith("running")) + (
            f"\n\n*{status}*" if status else "")
        # while runs stream in: the light token strips; the linked step views (a full step view per
        # method) once, when the race has finished or was stopped
        running = status.startswith("running")
        sbs = viz.side_by_side.html(shown) if running else viz.side_by_side.linked_html(shown, racekit.fastest(rows))
        return (md, race_table(rows), viz.race.race_figure(shown),
                viz.costs.latency_figure({n: (t, None) for n, t in shown.items()}), sbs)

    @reported(7, client_error=True)
    def profile(self, request: gr.Request, *values):
        """torch.profiler runs of greedy and the method: roofline, FLOPs, latency, downloads."""
        session, client = self.arrived(request)
        s = Settings.from_values(values)
        with self.turns.job(session, client):
            yield from self._profile(s, session)

    def _profile(self, s: Settings, session: str | None):
        from profiling import profile_run
        stop = self.sessions.start(session)
        try:
            methods = sorted({BASELINE, s.method}, key=lambda m: m != BASELINE)
            p = yield from self.prepare(s, methods, 7, session, stop, runs=len(methods) * PROFILE_COST,
                                        what="profile")
            p.history = self.histories.get(session)  # read, never joined (a frozen copy, Prepared.drafter)
            out = self.downloads.folder()

            def work(job: Job):
                runs = {}
                for m in p.params:
                    job.report(f"profiling {m}…")
                    with p.turn():
                        tr, prof = profile_run(p.model, p.tok, p.prompt, m, max_new_tokens=p.max_new,
                                               sampling=p.sampling, drafter=p.drafter(m),
                                               draft_model=p.dmodel if needs(m, "draft_model") else None,
                                               perfetto_path=out / f"{m}.perfetto.json", on_step=job.check)
                    runs[m] = (tr, for_viz(prof))
                return runs

            for kind, result in Job(work, stop, thread_setup).updates():
                if kind == "progress":
                    yield gr.skip(), result, *[gr.skip()] * 5
                elif kind == "stopped":
                    yield gr.skip(), "Stopped: profile not finished.", *[gr.skip()] * 5
                else:
                    view = self._profile_view(s.method, result, out)
                    self.downloads.prune(keep=out)  # this request's files stay; older ones make room
                    yield (gr.skip(), *view)
        finally:
            self.sessions.end(session, stop)

    @staticmethod
    def _profile_view(method: str, runs: dict, out) -> tuple:
        """The method's profile with greedy's beside it: both on the roofline, the FLOPs and latency charts, the
        operator breakdown of each run's widest step (against the measured peaks), and both runs' trace and
        Perfetto files in the downloads (as the tab says)."""
        tr, prof = runs[method]
        files = []
        for m, (t, _) in runs.items():
            public_trace(t)
            t.save(out / f"{m}-trace.json")
            files += [str(out / f"{m}-trace.json"), str(out / f"{m}.perfetto.json")]
        report = viz.write_report(tr, out / f"{method}-report.html", profile=prof,
                                  compare=runs if len(runs) > 1 else None)
        totals, pk = prof.get("totals") or {}, prof.get("peaks") or {}
        each = " · ".join(f"**{m}**: {run_counts(t).words()}" for m, (t, _) in runs.items())
        counted = prof.get("bytes_counted") or f"weights in {prof.get('dtype', '?')}"
        summary = (f"{each} — on {prof.get('device', '?')} ({prof.get('dtype', '?')}; bytes counted: {counted}) · "
                   f"measured peaks: "
                   f"{pk.get('flops', 0) / 1e9:.1f} GFLOP/s, {pk.get('bandwidth', 0) / 1e9:.1f} GB/s"
                   + (f" · {method} total FLOPs {totals.get('flops', 0):.3g}" if totals.get("flops") else ""))
        others = {m: r for m, r in runs.items() if m != method}
        return (summary, viz.costs.roofline_figure(prof, tr, others=others), viz.costs.compare_figure(runs),
                viz.costs.latency_figure(runs), files + [str(report)],
                viz.costs.operators_figure(runs, peak={"name": prof.get("device") or "this machine (measured)",
                                                       **{k: pk[k] for k in ("flops", "bandwidth")}}
                                           if pk.get("flops") and pk.get("bandwidth") else None))

    @reported(4, client_error=True)
    def sweep(self, request: gr.Request, *values):
        """The lookahead scaling picture (one real run per (N, W), G = W) and / or the heads' tree-size
        sweep (one medusa / eagle run per tree budget); a point streams in per run."""
        session, client = self.arrived(request)
        n = len(FIELDS)
        s = Settings.from_values(values[:n])
        ns, ws, n_new, heads, budgets = (list(values[n:]) + [None] * 5)[:5]
        ns, ws, heads, budgets = ns or [], ws or [], [m for m in heads or [] if m in needing("heads")], budgets or []
        problems: list[str] = []
        if not heads and (not ns or not ws):
            problems.append("**sweep**: pick at least one N and one W (or a heads method and a tree budget)")
        if heads and not budgets:
            problems.append("**sweep**: pick at least one tree budget for the heads methods")
        n_new = whole(Settings(max_new=n_new), "max_new", self.lim, problems)
        cells = sweepkit.grid([int(x) for x in ns], [int(w) for w in ws]) if ns and ws else []
        trees = [(m, int(b)) for m in heads for b in sorted(set(budgets))]
        if len(cells) + len(trees) > self.lim.sweep_max_runs:
            problems.append(f"**sweep** has {len(cells) + len(trees)} runs; at most {self.lim.sweep_max_runs}: "
                            "pick fewer N, W or budgets")
        raise_if(problems)
        s.max_new, s.preset = n_new, "manual"
        with self.turns.job(session, client):
            yield from self._sweep(s, cells, trees, heads, n_new, session)

    def _sweep(self, s: Settings, cells: list, trees: list, heads: list, n_new: int, session: str | None):
        stop = self.sessions.start(session)
        total = len(cells) + len(trees)
        try:
            p = yield from self.prepare(s, [BASELINE, *heads], 4, session, stop, runs=total + 1, what="sweep")

            def work(job: Job):
                with p.turn():
                    points = [sweepkit.baseline(p.model, p.tok, p.prompt, n_new, on_step=job.check)]
                for n, w in cells:
                    job.report(list(points))
                    with p.turn():
                        points.append(sweepkit.point(p.model, p.tok, p.prompt, n, w, n_new, on_step=job.check))
                for m, b in trees:
                    job.report(list(points))
                    with p.turn():
                        points.append(sweepkit.heads_point(p.model, p.tok, p.prompt, m, p.resources[m]["heads"],
                                                           b, n_new, on_step=job.check))
                return points

            for kind, points in Job(work, stop, thread_setup).updates():
                done = max(len(points or []) - 1, 0)
                status = {"progress": f"{done}/{total} runs done", "stopped": f"Stopped after {done} runs.",
                          "done": f"done: {total} runs (+ greedy baseline)"}[kind]
                if points:
                    yield gr.skip(), status, viz.sweep.figure(points), sweep_table(points)
                else:
                    yield gr.skip(), status, gr.skip(), gr.skip()
        finally:
            self.sessions.end(session, stop)

    @reported(2, status=None)
    def load_models(self, target, draft, device, dtype, kernel=None, request: gr.Request = None):
        with self.held(request):
            return self._load_models(target, draft, device, dtype, kernel)

    def _load_models(self, target, draft, device, dtype, kernel=None):
        t0 = time.perf_counter()
        device = self.lim.device(device)  # public mode: "auto" for every model, whatever was sent
        dtype = self.lim.dtype(dtype)  # the same dtype rule as every model event
        model, tok = self.cache.get(self.model_name(target, "target"), device, dtype, kernel)
        lines = [model_line("target", model, tok)]
        try:
            dmodel, dtok = self.cache.draft(self.model_name(draft, "draft"), model, tok, device, dtype)
            lines.append(model_line("draft", dmodel, dtok))
        except (ValueError, ModelError) as e:
            lines.append(f"draft: not loaded — {one_line(e)}")
        return CLEAR, "\n\n".join(lines) + f"\n\nloaded in {time.perf_counter() - t0:.1f} s"

    def replay(self, upload, shipped_name, last, request: gr.Request = None):
        """A refused file clears the view: the page never shows the previous replay under a rejection."""
        try:  # public mode: it waits for the model's turn (it costs the CPU like a run); locally it never waits
            with self.held(request, turn=self.lim.public):
                out = self._replay(upload, shipped_name, last)
        except Refused as e:
            out = (f"⚠️ {e}", "", "", "")
        if out[0]:
            return out[0], "Nothing replayed — see the message above.", "", ""
        return out

    @reported(4, status=None)
    def _replay(self, upload, shipped_name, last):
        if upload:
            tr = load_trace(upload if isinstance(upload, str) else upload.name, self.max_trace_bytes)
        elif shipped_name:
            tr = load_trace(shipped_path(shipped_name))
        elif last:
            from decoding import Trace
            tr = Trace.from_dict(last)
        else:
            raise ValueError("upload a trace JSON, pick a recorded trace, or run something first")
        try:  # it opens on the step that shows the method's point (viz/exports/teach.py), not on the empty prefill
            pick = teaching_step(tr)
            html = viz.step_view_html(tr, initial_step=pick["k"])
        except Exception as e:  # noqa: BLE001 - a trace that parses but cannot be drawn is corrupt
            raise ValueError(f"the trace is corrupt: it could not be drawn ({one_line(e)})") from None
        if len(html) > MAX_REPLAY_HTML_BYTES:
            raise ValueError(f"this trace's step view would be {len(html) / 2**20:.0f} MB (the page takes at most "
                             f"{MAX_REPLAY_HTML_BYTES / 2**20:.0f} MB): render it offline with python -m viz report")
        model = tr.model.get("name", "?") if isinstance(tr.model, dict) else "?"
        why = f"\n\n**Why this step:** {pick['shows']}"  # said from the step counts, never from the trace's text
        if upload or shipped_name:  # a shipped trace was recorded on a busy box at 1.6-4.4 tokens/s, live runs 25-47
            why += ("\n\n*Recorded elsewhere: its tokens/s and wall time are the recording machine's, under its "
                    "load, which the trace does not record. Compare steps and tokens per step, not speed; a Run here "
                    "measures this machine.*")
        return CLEAR, stats_md(tr, note="recorded" if model == "?" else "") + why, html, tr.text
