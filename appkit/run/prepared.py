"""What one model event has once its settings are checked and its models loaded, and the drafters it builds.

Every model event (Run, Race, Profile, the tuner) prepares one `Prepared` (appkit/run/handlers.py, Handlers.plan)
and runs its methods through it, so a drafter is built the same way whichever tab asked.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

from decoding import run
from decoding.build import build

from .method_fields import can, needs
from .settings import Settings
from .stream import mark_interleaved


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
    user: dict = field(default_factory=dict)  # method -> the controls kept under every preset (the draft cutoff)
    reference: list = field(default_factory=list)  # reference texts prompt lookup also copies from
    threads: dict | None = None  # the measured CPU thread count (appkit/run/threads.py), None where not measured
    # the suffix cache's earlier runs: this session's History, or None (no earlier runs)
    history: object = None
    session: str | None = None
    turn: object = nullcontext  # () -> a context holding the model for one run (Handlers.turn_for)
    budget: object = None  # the request's fair.Budget (public mode), charged step by step
    # method -> what the page names for it, resolved once by Handlers.plan (heads folder, datastore, adapter)
    resources: dict = field(default_factory=dict)

    def drafter(self, method: str, join_history: bool = False):
        """A fresh drafter (they keep per-run state), built by decoding.build.build with the model (its spec's
        prepare settles the rest: the shipped heads or adapter, the draft checked against the target).
        Retrieval reads this session's earlier runs; only a Run tab's run (join_history) joins them: a race's
        or a profile's runs each get a frozen copy, so every repeat of every method starts from the same state
        and none drafts from another's output."""
        kw = {**self.params.get(method, {}), **self.user.get(method, {}), **self.resources.get(method, {})}
        if can(method, "reference_texts") and self.reference:  # with any preset: the text is the user's
            kw["reference"] = self.reference  # the spec's prepare step tokenises it
        if needs(method, "draft_model"):
            kw.update(draft_model=self.dmodel, draft_tokenizer=self.dtok)
        if can(method, "session_history"):  # this session's earlier runs, never the process's
            kw["history"] = (False if self.history is None else self.history if join_history
                             else self.history.copy())
        return build(method, kw, self.model, self.tok)

    def run(self, method: str, on_step=None, **kw):
        """One run, holding the model's turn (appkit/public/fair.py)."""
        with self.turn() as held:
            tr = run(self.model, self.tok, self.prompt, method, max_new_tokens=self.max_new, sampling=self.sampling,
                     drafter=self.drafter(method), on_step=on_step, **kw)
            return mark_interleaved(tr, held)
