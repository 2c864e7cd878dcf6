"""The auto preset of each method a model event runs: the session's own tuning, else the device's (cached or
shipped), else tuned now, and who owns what a tuning produces.

Why its own file: in public mode a tuning is shared only when it comes from the model, the page's default
draft, the shipped heads and the shipped prompts; a visitor's own draft or heads tune that visitor's session
preset (at most 256 sessions), never the preset every later visitor gets and presets.json keeps.
"""
from __future__ import annotations

from . import presets
from .method_fields import can, is_baseline, needs
from .prepared import Prepared
from .sources import heads_folder


class AutoPresets:
    """Mixed into Handlers: uses its lim, session_presets, model_name and check_positions."""

    def _tune_auto(self, p: Prepared, target: str, method: str, pause=None) -> dict:
        """A method's first auto run tunes it. The shared (device) preset comes from the model and the shipped
        prompts only: in public mode a visitor's own draft or heads tune that visitor's session preset, never
        the one every later visitor gets (and that presets.json keeps across restarts)."""
        heads = p.resources.get(method, {}).get("heads")
        own = self.lim.public and (
            (needs(method, "draft_model") and self.model_name(p.settings.draft, "draft") != self.lim.default_draft)
            or (heads is not None and heads != heads_folder("", method, p.model)))
        if not own:
            found = presets.cached(target, p.model, method)
            return found or presets.tune(target, p.model, p.tok, method, p.dmodel, heads=heads, pause=pause)
        tuned = presets.tune(target, p.model, p.tok, method, p.dmodel, heads=heads, save=False, pause=pause)
        self._keep_session_preset(p.session, target, method, tuned["params"])
        return tuned

    def _keep_session_preset(self, session: str | None, target: str, method: str, params: dict) -> None:
        """A session's own tuning, for at most 256 sessions (the oldest session's dropped first)."""
        mine = self.session_presets.pop(session or "", {})
        mine[(target, method)] = params
        self.session_presets[session or ""] = mine
        while len(self.session_presets) > 256:
            self.session_presets.pop(next(iter(self.session_presets)))

    def _preset(self, p: Prepared, target: str, method: str) -> dict | None:
        """This session's own tuning (public mode keeps the Tune button's result per session), else the cached
        or shipped preset."""
        mine = self.session_presets.get(p.session or "", {}).get((target, method))
        if mine is not None:
            return {"params": mine, "source": "tuned in this session"}
        return presets.cached(target, p.model, method)

    def apply_presets(self, p: Prepared, methods: list[str], pause=None) -> None:
        """With preset "auto", each method's parameters come from presets (tuned now if unknown); then
        every method's span is checked against the model's positions. pause: the context each pilot run of
        a tuning holds (the model's turn)."""
        target = self.model_name(p.settings.target, "target")
        for m in methods:
            if p.settings.preset == "auto" and not is_baseline(m):
                pr = self._preset(p, target, m) or self._tune_auto(p, target, m, pause)
                p.params[m] = dict(pr["params"])
                p.notes[m] = f"auto preset {presets.describe(m, pr['params'])} ({pr['source']})"
            if p.settings.typical and can(m, "typical_acceptance"):  # the stats line says this text is not the target's
                p.notes[m] = ", ".join(x for x in (p.notes.get(m), "typical acceptance (NOT exact)") if x)
            self.check_positions(p, m)

