"""The Run tab's event handlers and what every model event shares: checking settings, loading models,
presets, the positions check, the finished run's step view and download.

Every model event's outputs start with (message, status): see appkit/errors.py. Race, Profile, Sweep
and the tuner are in appkit/race/tabs.py and use the same `Prepared` and the same stream.Job.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable

import gradio as gr

import viz
from decoding import make_sampling, run
from decoding.api import vocab_for
from decoding.models import describe, max_positions
from decoding.fast.graphs import capture_warning
from decoding.methods.resources import Histories

from . import presets
from .copied import copied_note
from .costs import run_costs
from . import threads
from ..models.default_model import fetch_waits
from ..public.disk import TMP, TMP_MAX_AGE_S, Downloads, disk_cap  # noqa: F401 - TMP_MAX_AGE_S: app.py's Gradio cache
from ..models.drafts import check_draft
from .threads import needs_thread_timing, run_key, speed_of, threads_for, threads_note
from ..errors import reported
from ..public.clients import Places, request_client
from ..public.per_session import PerSession
from ..public.fair import (CLIENT_JOBS, PUBLIC_WORK, RESERVE, RUN_MODEL_S, RUN_WALL_S, TOTAL_JOBS, Budget,
                          Refused, TurnCancelled, Turns, check_work, weight_span)
from ..public.limits import PUBLIC_HISTORY, Limits
from ..models.model_cache import ModelCache
from .method_fields import can, is_baseline, needs
from .settings import InputError, Settings, check_common, method_params, raise_if, reference_texts, user_params
from .sources import check_heads, check_retrieval, heads_folder, resources, retrieval_source  # noqa: F401 - also imported from here
from .auto_presets import AutoPresets
from .prepared import Prepared
from .speed_claim import own_time, timed
from .stream import Job, Recorder, Sessions, Stopped, mark_interleaved
from ..page.tables import live_line, public_trace, stats_md

CLEAR = ""  # the message output when an event starts: the last error goes away


def thread_setup() -> None:
    """The worker thread inherits nothing from torch's per-thread state; keep grad off and use the thread
    count measured for the model (appkit/run/threads.py)."""
    import torch
    torch.set_grad_enabled(False)
    if threads.CURRENT:
        torch.set_num_threads(threads.CURRENT[0])


def step_views(trace, costs: dict | None, initial_step: int | str) -> str:
    """The Run tab's step view with the selected step's cost panel beside it: `costs` is
    appkit.run.costs.run_costs (per-step FLOPs, bytes, ms and the machine's peaks for the roof)."""
    return viz.step_view_html(trace, profile=costs, initial_step=initial_step)


class Handlers(AutoPresets):
    """Shared state (limits, model cache, stop events) and the Run tab's handlers."""

    def __init__(self, lim: Limits, cache: ModelCache, aliases: dict[str, str] | None = None):
        self.lim, self.cache, self.sessions = lim, cache, Sessions()
        # greedy's decode step times (ms) per run_key, for "x greedy": this session's own runs only
        self.greedy_ms = PerSession()
        self.fetching: Callable[[], str | None] | None = None  # the default model's fetch line while it runs
        # every state a run leaves for later runs is kept per browser session (docs/public-mode.md lists them):
        # the suffix cache's earlier runs
        self.histories = Histories(**(PUBLIC_HISTORY if lim.public else {}))
        # downloads (traces, profiles, reports): one folder per request, a total cap on disk, oldest deleted first
        self.downloads = Downloads(TMP, disk_cap(lim.public))
        # the model's turns (one unit of work at a time, the least-served session first); public mode: one
        # running and one queued job per session, a work budget per request, tuning kept per session
        self.turns = Turns(max_jobs=2 if lim.public else None, client_jobs=CLIENT_JOBS if lim.public else None,
                           total_jobs=TOTAL_JOBS if lim.public else None, reserve=RESERVE)
        self.places: Places | None = None  # public mode: the queue places per client (app.py's Admission)
        self.work_limit = PUBLIC_WORK if lim.public else None
        self.session_presets: dict[str, dict] = {}
        self.aliases = aliases or {}  # what the page sends (repo-relative) -> the local path

    def arrived(self, request) -> tuple[str | None, str]:
        """(session, client) of an event that has just left Gradio's queue: its queue place is free again."""
        client = request_client(request) if self.lim.public else ""
        if self.places is not None:
            self.places.started(client)
        return getattr(request, "session_hash", None), client

    @contextmanager
    def held(self, request, turn: bool = True):
        """One job of the request's session (refused past the limit) holding the model's turn for all of it."""
        session, client = self.arrived(request)
        with self.turns.job(session, client), (self.turns.turn(session) if turn else nullcontext()):
            yield

    def turn_for(self, session: str | None, stop, budget: Budget | None = None):
        """() -> a context holding the model for one unit of this session's work (it yields the fair.Held: its
        steps give way to waiting visitors and are charged to `budget`); a Stop ends the wait."""
        @contextmanager
        def turn():
            if stop.is_set():  # stopped between two units (a Tune's pilot runs, a race's repeats): no next one
                raise Stopped()
            try:
                with self.turns.turn(session, stop.is_set, budget=budget) as held:
                    yield held
            except TurnCancelled:
                raise Stopped() from None
        return turn

    def budget(self) -> Budget | None:
        """A request's work as it runs (public mode: step costs charged against twice the up-front token budget,
        since a drafting step costs several positions; each run's model and wall time bounded)."""
        if not self.lim.public:
            return None
        return Budget(2 * self.work_limit if self.work_limit is not None else None, RUN_MODEL_S, RUN_WALL_S)

    def model_name(self, name, role: str) -> str:
        """The model to load: the page's name for an embedded model is repo-relative, never a server path."""
        name = "" if name is None else str(name).strip()
        return self.lim.model_name(self.aliases.get(name, name), role)

    # ------------------------------------------------------------------ shared
    def prepare(self, s: Settings, methods: list[str], n_outputs: int, session: str | None = None, stop=None,
                runs: int = 1, what: str = "run"):
        """Generator for the model events: yields status updates (loading, tuning) and returns the Prepared
        (`p = yield from self.prepare(...)`), so a first-time tuning never looks like a stuck load. Loading and
        tuning take the model's turn like a run; `runs` decodes of max new tokens count against the budget."""
        rest = [gr.skip()] * (n_outputs - 2)
        yield (CLEAR, "waiting for the model, then loading…" if self.lim.public else "loading model…", *rest)
        if self.fetching and self.aliases.get(str(s.target), str(s.target)) == self.lim.default_target:
            yield from fetch_waits(self.fetching, rest)  # the fetch's stage, not a silent "loading"
        budget = self.budget()
        turn = self.turn_for(session, stop, budget) if stop is not None else nullcontext
        try:
            with turn():
                p = self.plan(s, methods, presets_too=False, runs=runs, what=what)
        except Stopped:
            raise Refused("stopped while waiting for the model") from None
        if budget is not None:
            budget.span = weight_span(p.model.config)
        p.session, p.turn, p.budget = session, turn, budget
        target = self.model_name(s.target, "target")
        if needs_thread_timing(p.model):
            yield (gr.skip(), "timing greedy at each CPU thread count for this model (once, a few seconds)…", *rest)
        with turn():
            p.threads = threads_for(p.model, p.tok)
        if s.preset == "auto" and any(self._preset(p, target, m) is None for m in methods if not is_baseline(m)):
            yield (gr.skip(), "tuning the auto preset for this model and device (once; tens of seconds on a "
                              "CPU; cached afterwards)…", *rest)
        try:  # a first-time tuning holds the model one pilot run at a time: other visitors run in between
            self.apply_presets(p, methods, pause=turn)
        except Stopped:
            raise Refused("stopped while waiting for the model") from None
        return p

    def plan(self, s: Settings, methods: list[str], presets_too: bool = True, runs: int = 1,
             what: str = "run") -> Prepared:
        """Check everything (all problems at once), then load models, resolve presets, check positions."""
        problems: list[str] = []
        common = check_common(s, self.lim, problems)
        if isinstance(common.get("max_new"), int):  # new tokens alone first (no model needed to say so)
            try:
                check_work(common["max_new"], runs, self.work_limit, what)
            except Refused as e:
                problems.append(str(e))
        try:
            self.lim.dtype(s.dtype)
        except ValueError as e:
            problems.append(str(e))
        auto = s.preset == "auto"
        params = {m: {} if auto else method_params(s, m, self.lim, problems) for m in methods}
        # the draft cutoff is the user's under every preset (manual and teaching: among the method's params)
        user = {m: user_params(s, m, self.lim, problems) for m in methods} if auto else {}
        if s.typical and any(can(m, "typical_acceptance") for m in methods) and common.get("temperature") == 0:
            problems.append("**typical acceptance** needs sampling (temperature > 0); at temperature 0 the heads' "
                            "verification is exact already")
        reference = reference_texts(s, problems) if any(can(m, "reference_texts") for m in methods) else []
        device = "auto"
        try:
            target = self.model_name(s.target, "target")
            draft = (self.model_name(s.draft, "draft") if any(needs(m, "draft_model") for m in methods)
                     else None)
        except ValueError as e:
            problems.append(str(e))
        try:  # public mode: the device is the server's and the heads are the shipped ones, whatever was sent
            device = self.lim.device(s.device)
            self.lim.heads(s.heads)
        except ValueError as e:
            problems.append(str(e))
        raise_if(problems)
        model, tok = self.cache.get(target, device, s.dtype, s.kernel)
        self.check_prompt_work(tok, common["prompt"], common["max_new"], runs, what)
        dmodel, dtok = self.cache.draft(draft, model, tok, device, s.dtype) if draft else (None, None)
        if dmodel is not None:
            check_draft(model, tok, dmodel, dtok, str(s.target), str(s.draft))
        p = Prepared(s, common["prompt"], common["max_new"],
                 make_sampling(common["temperature"], common["top_k"], common["top_p"], common["seed"]),
                 model, tok, dmodel, dtok, params, user=user, reference=reference)
        p.resources = {m: resources(s, m, model) for m in methods}  # heads folders etc.: resolved here, once
        if not auto:  # the stats line says which preset a run used (teaching or manual; auto: apply_presets)
            for m in methods:
                if not is_baseline(m):
                    p.notes[m] = f"{'teaching' if s.preset == 'teach' else 'manual'} preset {presets.describe(m, params[m])}"
        check_heads(p, methods)
        check_retrieval(p, methods)
        if presets_too:
            self.apply_presets(p, methods)
        return p

    def check_prompt_work(self, tok, prompt: str, max_new: int, runs: int, what: str) -> None:
        """Public mode: the prompt's tokens within the cap, and (prompt + new tokens) x runs within the budget;
        every run prefills the prompt, and a long prefill costs the worker as much as decoding."""
        if self.work_limit is None and self.lim.prompt_tokens is None:
            return
        n = len(tok(prompt)["input_ids"])
        if self.lim.prompt_tokens is not None and n > self.lim.prompt_tokens:
            raise InputError(f"**prompt** is {n:,} tokens; a prompt on this Space may have at most "
                             f"{self.lim.prompt_tokens:,}: shorten it")
        check_work(max_new, runs, self.work_limit, what, prompt=n)

    def check_positions(self, p: Prepared, method: str) -> None:
        """prompt tokens + max new tokens + the method's span must fit the model's positions: say the numbers."""
        limit = max_positions(p.model.config)
        n = len(p.tok(p.prompt)["input_ids"])
        span = p.drafter(method).max_depth()
        if limit is not None and n + p.max_new + span > limit:
            room = limit - n - span
            fix = (f"lower max new tokens to {room}" if room >= 1 else
                   f"shorten the prompt to at most {limit - p.max_new - span:,} tokens")
            raise InputError(f"**prompt + max new tokens** do not fit the model: {n:,} prompt tokens + "
                             f"{p.max_new:,} new + {span} {method.replace('_', ' ')} span = "
                             f"{n + p.max_new + span:,} positions, the model has {limit:,}: {fix}")

    def finish(self, tr, p: Prepared, stopped: bool = False, reason: str = "stopped") -> tuple[str, str, dict]:
        """(step view html, trace download path, trace dict) of a finished or stopped run (`reason`: Stop, or
        the public bound that cut it: fair.Cut)."""
        if stopped:
            tr.stop_reason = reason
            tr.text = p.tok.decode(tr.output_ids)
            tr.vocab = vocab_for(tr, p.tok)
            tr.model = describe(p.model)
        public_trace(tr)  # no server path in the download
        costs = run_costs(tr, p.model)
        out = self.downloads.folder()
        path = out / f"{tr.method}-trace.json"
        tr.save(path)
        self.downloads.prune(keep=out)
        # opened on the step that shows the method's point (viz.teach picks it and the view says so), not on the
        # last step, which max new tokens usually cut
        return step_views(tr, costs, "best"), str(path), tr.to_dict()

    # ------------------------------------------------------------------ Run tab
    @reported(6, client_error=True)
    def run(self, request: gr.Request, *values):
        """Stream one run: text + a live line while it goes, the step view and trace once at the end."""
        session, client = self.arrived(request)
        s = Settings.from_values(values)
        with self.turns.job(session, client):
            yield from self._run_tab(s, session)

    def _run_tab(self, s: Settings, session: str | None):
        stop = self.sessions.start(session)
        try:
            p = yield from self.prepare(s, [s.method], 6, session, stop)
            p.history = self.histories.get(session)  # this run drafts from, and joins, this session's runs only
            drafter = p.drafter(s.method, join_history=True)
            rec = Recorder(s.method, p.tok(p.prompt)["input_ids"],
                           {**drafter.config(), "max_new_tokens": p.max_new, "sampling": p.sampling.to_dict()})

            def work(job: Job):
                def on_step(step, out):
                    rec.add(step, out)
                    job.report(len(rec.trace.steps))
                    job.check(step, out)
                with p.turn() as held:  # measured in the thread that decodes: wall, its CPU time, the load
                    tr, measure = timed(lambda: run(p.model, p.tok, p.prompt, s.method, max_new_tokens=p.max_new,
                                                    sampling=p.sampling, drafter=drafter, on_step=on_step))
                    mark_interleaved(tr, held)
                    tr.measure = own_time(tr, measure)  # speed_of says "machine busy" rather than a loaded ratio
                    return tr

            note = " · ".join(x for x in (p.notes.get(s.method, ""), threads_note(p.threads)) if x)
            key = run_key(p)
            job = Job(work, stop, thread_setup)
            for kind, result in job.updates():
                if kind == "progress":
                    tr = rec.trace
                    yield gr.skip(), live_line(tr), p.tok.decode(tr.output_ids), gr.skip(), gr.skip(), gr.skip()
                    continue
                tr = result if kind == "done" else rec.trace
                head = (f"**Stopped after {len(tr.output_ids)} tokens**" if kind == "stopped" and job.cut is None else
                        f"**{job.cut.why}** ({len(tr.output_ids)} tokens made)" if kind == "stopped" else "")
                text = tr.text if kind == "done" else p.tok.decode(tr.output_ids)
                graphs = capture_warning(tr.config)  # one line when a CUDA graph capture failed
                note_run = " · ".join(x for x in (copied_note(tr), speed_of(self.greedy_ms, session, key, tr,
                                                                             kind == "done"), note) if x)
                note_run = f"{note_run}\n\n{graphs}" if graphs else note_run
                yield gr.skip(), stats_md(tr, head, note_run), text, gr.skip(), gr.skip(), gr.skip()  # status first
                html, path, d = self.finish(tr, p, stopped=kind == "stopped",
                                            reason=job.cut.reason if job.cut is not None else "stopped")
                yield CLEAR, stats_md(tr, head, note_run), text, html, path, d
        finally:
            self.sessions.end(session, stop)

    def stop(self, request: gr.Request = None) -> None:
        """Stop this session's run, race, sweep or profile: it ends after its current step and keeps
        what it made (the handler itself sends the 'Stopped' status)."""
        self.sessions.stop(getattr(request, "session_hash", None))
