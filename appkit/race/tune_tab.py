"""The Tune button: the page's first method (lookahead), and the chosen one when it has a tuner, tuned now.

Why its own file: a Tune is budgeted like a race. Its pilot runs count against the work budget before it
starts, each pilot run takes the model's turn on its own (other visitors run in between: one Tune once held
the worker for 94.5 s), and Stop ends it between two pilot runs. In public mode the result is that
session's only; locally it is saved as the device's auto preset.
"""
from __future__ import annotations

import time

import gradio as gr

from ..errors import reported
from ..public.fair import Refused
from ..run import presets
from ..run.handlers import CLEAR, heads_folder
from ..run.method_fields import DEFAULT_METHOD, field_values, spec, tune_fields
from ..run.settings import Settings
from ..run.stream import Stopped
from decoding.methods.registry import BASELINE


class TuneTab:
    """Mixed into Tabs: uses Handlers' turns, sessions, plan, cache, lim and session presets."""

    @reported(6, status=None, client_error=True)
    def tune(self, request: gr.Request, *values):
        """Tune the page's first method (lookahead), and the chosen one when it has a tuner, now: the device's
        auto preset, or in public mode this session's only (one visitor's tuning never rewrites another's).
        Budgeted like a race: its pilot runs count against the work budget, each takes the model's turn on its
        own (other visitors run in between), and Stop ends it between two pilot runs."""
        session, client = self.arrived(request)
        with self.turns.job(session, client):
            stop = self.sessions.start(session)
            try:
                return self._tune(Settings.from_values(values), session, self.turn_for(session, stop))
            except Stopped:
                raise Refused("Tune stopped: nothing was tuned") from None
            finally:
                self.sessions.end(session, stop)

    def _tune(self, s: Settings, session: str | None, turn):
        with turn():
            p = self.plan(Settings(**{**vars(s), "preset": "manual", "method": BASELINE}), [BASELINE])
        name = self.model_name(s.target, "target")
        first, sp = DEFAULT_METHOD, spec(s.method)
        also = s.method != first and sp is not None and sp.tuner
        if self.work_limit is not None:
            work = presets.tune_work(p.tok, first) + (presets.tune_work(p.tok, s.method) if also else 0)
            if work > self.work_limit:
                raise Refused(f"**work budget**: tuning {first.replace('_', ' ')}"
                              f"{' and ' + s.method.replace('_', ' ') if also else ''} pilots {work:,} tokens; a "
                              f"request on this Space may process at most {self.work_limit:,}: tune one method")
        t0 = time.perf_counter()
        save = not self.lim.public  # public: kept for at most 256 sessions, the oldest session's dropped first
        la = (tuned := presets.tune(name, p.model, p.tok, first, save=save, pause=turn))["params"]
        if not save:
            self._keep_session_preset(session, name, first, la)
        note = f"{first.replace('_', ' ')} {presets.describe(first, la)}"
        facts = [f"{first.replace('_', ' ')} — {tuned['measured']}"]
        if also:  # its shape, with the draft or heads the page names
            with turn():
                dmodel = (self.cache.draft(self.model_name(s.draft, "draft"), p.model, p.tok,
                                           self.lim.device(s.device), s.dtype)[0] if "draft_model" in sp.needs else None)
            heads = heads_folder(s.heads, s.method, p.model) if "heads" in sp.needs else None
            hp = presets.tune(name, p.model, p.tok, s.method, dmodel, heads=heads, save=save, pause=turn)
            if not save:
                self._keep_session_preset(session, name, s.method, hp["params"])
            note += f", {s.method} {presets.describe(s.method, hp['params'])}"
            facts.append(f"{s.method} — {hp['measured']}")
        kept = "saved as the auto preset" if save else "this session's auto preset; other visitors keep theirs"
        line = (f"Tuned for this device in {time.perf_counter() - t0:.0f} s: {note} ({kept}).\n\n"
                "What it measured: " + "\n\n".join(facts))
        shown = field_values(first, la)
        return CLEAR, line, *[shown.get(f) for f in tune_fields()], "auto"

