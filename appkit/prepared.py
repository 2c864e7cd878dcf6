"""What one model event has once its settings are checked and its models loaded, and the drafters it builds.

Every model event (Run, Race, Profile, the tuner) prepares one `Prepared` (appkit/handlers.py, Handlers.plan)
and runs its methods through it, so a drafter is built the same way whichever tab asked.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

from decoding import make_drafter, run
from decoding.api import HEADS_METHODS
from decoding.methods.reference_text import tokenize_references

from .settings import Settings
from .sources import heads_folder, retrieval_source


@dataclass
class Prepared:
    """Checked settings, loaded models and per-method parameters for one event."""
    settings: Settings
    prompt: str
    max_new: int
    sampling: object
    model: object
    tok: object
    dmodel: object = None
    dtok: object = None
    params: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    cutoff: float | None = None  # the speculative draft cutoff (with every preset)
    reference: list = field(default_factory=list)  # reference texts prompt lookup also copies from
    threads: dict | None = None  # the measured CPU thread count (appkit/threads.py), None where not measured
    # the suffix cache's earlier runs: this session's History, or None (no earlier runs)
    history: object = None
    session: str | None = None
    turn: object = nullcontext  # () -> a context holding the model for one run (Handlers.turn_for)

    def drafter(self, method: str, join_history: bool = False):
        """A fresh drafter (they keep per-run state). Retrieval reads this session's earlier runs; only a Run
        tab's run (join_history) joins them: a race's or a profile's runs each get a frozen copy, so every
        repeat of every method starts from the same state and none drafts from another's output."""
        kw = dict(self.params.get(method, {}))
        if method == "prompt_lookup" and self.reference:  # with any preset: the text is the user's
            kw["reference_ids"] = tokenize_references(self.tok, self.reference)
        if method == "speculative":
            kw.update(draft_model=self.dmodel, target_model=self.model, tokenizer=self.tok, draft_tokenizer=self.dtok,
                      confidence=self.cutoff)
        if method == "retrieval":  # the menu's source: the suffix cache, or the shipped datastore
            kw.update(datastore=retrieval_source(self.settings.datastore), tokenizer=self.tok,
                      history=False if self.history is None else
                      self.history if join_history else self.history.copy())  # never the process's
        if method in HEADS_METHODS:
            kw["heads"] = heads_folder(self.settings.heads, method, self.model)
            kw["acceptance"] = "typical" if self.settings.typical else "exact"
        if method == "self_speculative":  # the heads box names an adapter folder; empty: the one shipped for the model
            kw["adapter"] = (self.settings.heads or "").strip() or None
        return make_drafter(method, **kw)

    def run(self, method: str, on_step=None, **kw):
        """One run, holding the model's turn (appkit/fair.py)."""
        with self.turn():
            return run(self.model, self.tok, self.prompt, method, max_new_tokens=self.max_new, sampling=self.sampling,
                       drafter=self.drafter(method), on_step=on_step, **kw)
