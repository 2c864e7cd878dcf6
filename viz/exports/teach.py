"""The step a lesson opens on, picked from the trace by what the method's narration points at.

Why from the trace: a fixed "the step that accepted the most tokens" promised stage-2 tokens on a step with
none, and "the first rejection in red" on a step where every draft was accepted. Each kind of run names the
thing its picture must show (a stage-2 token accepted, a draft rejected after some were accepted, a window
n-gram accepted, a second-choice branch taken, ...) and the first step that shows it is the opening step.
When a run has no such step, the pick says so in words and falls back to the step that accepted the most
guesses: it works on any model, and a model on which an effect is absent is told, not hidden.
"""
from __future__ import annotations

from collections.abc import Callable

from decoding.methods.registry import SPECS

from ..common import TraceLike, as_trace
from ..counts import step_counts
from ..steps.cut import cut_words
from ..steps.pool import chosen_source as _chosen_source




def _rejected_after_some(s) -> bool:
    rej = s.info.get("first_rejected")
    return isinstance(rej, int) and rej >= 0 and step_counts(s).guessed > 0


def _second_choice(s) -> bool:
    """The accepted path goes through a node that has an earlier sibling: a branch a chain would not hold."""
    tree = s.info.get("tree") or {}
    parents = tree.get("parents") or s.parents
    path = s.info.get("accepted_path") or []
    for node in path[1:]:
        if not isinstance(node, int) or not 0 <= node < len(parents):
            continue
        if any(parents[j] == parents[node] for j in range(node)):
            return True
    return False


def _stage2(s) -> bool:
    return "stage2" in s.origins


Want = tuple[str, Callable]  # (what the step shows, in words; the test a step must pass)
WANTS: dict[str, Want] = {
    "greedy": ("a plain step: one query token, one new token", lambda s: True),
    "jacobi": ("a step where the model confirmed guesses of the block", lambda s: step_counts(s).guessed > 0),
    "lookahead": ("a step that accepted an n-gram from the pool, harvested from earlier Jacobi windows (not a copy of the text)",
                  lambda s: step_counts(s).guessed > 0 and _chosen_source(s) in ("window", "")),
    "prompt_lookup": ("a step that accepted a copy of earlier text", lambda s: step_counts(s).guessed > 0),
    "chain": ("a step that accepted some drafted tokens and rejected the next one (red)", _rejected_after_some),
    "tree": ("a step whose accepted path takes a second-choice branch, one a chain would not have drafted",
             _second_choice),
    "staged": ("a step that accepted stage-2 tokens", _stage2),
    "heads": ("a step that accepted drafted tokens along the tree", lambda s: step_counts(s).guessed > 0),
}


# What a WANTS entry that names a source says instead when the trace records no source for the step.
UNSOURCED = {"lookahead": "a step that accepted an n-gram from the pool (this trace does not record whether a "
                          "Jacobi window or the text supplied it)"}


def want_of(trace: TraceLike) -> str:
    """Which WANTS entry a run is taught by: its method, and for speculative its shape."""
    tr = as_trace(trace)
    spec = SPECS.get(str(tr.method))
    if spec is not None and "draft_model" in spec.needs:  # a draft model's run is taught by its shape
        c = tr.config if isinstance(tr.config, dict) else {}
        if c.get("staged"):
            return "staged"
        return "tree" if c.get("mode") == "tree" or c.get("tree_budget") else "chain"
    if spec is not None and "heads" in spec.pictures:
        return "heads"
    return tr.method if tr.method in WANTS else "heads"


def teaching_step(trace: TraceLike) -> dict:
    """{"k": list position to open, "i": its step index, "found": bool, "shows": one sentence for the page}.

    Among the decode steps that show the method's point, the one that accepted the most guesses (the
    earliest on a tie). Without one: the step with the most guesses accepted, and the sentence says what is missing."""
    tr = as_trace(trace)
    what, test = WANTS[want_of(tr)]
    decode = _teaching_decode(tr)
    if not decode:
        return {"k": 0, "i": tr.steps[0].index if tr.steps else 0, "found": False,
                "shows": "This run has no decode step: only the prefill is shown."}
    hits = [(k, s) for k, s in decode if test(s)]
    best = lambda pairs: max(pairs, key=lambda p: (step_counts(p[1]).guessed, -p[0]))  # noqa: E731
    if hits:
        k, s = best(hits)
        if not _chosen_source(s) and want_of(tr) in UNSOURCED:  # the trace does not say where it came from
            what = UNSOURCED[want_of(tr)]
        return {"k": k, "i": s.index, "found": True, "shows": f"Opened on step {s.index}: {what}."}
    k, s = best(decode)
    return {"k": k, "i": s.index, "found": False,
            "shows": f"This run has no {what.removeprefix('a ')}; opened on step {s.index}, the step that accepted "
                     f"the most guesses ({step_counts(s).guessed})."}


def _teaching_decode(tr) -> list:
    """The decode steps that can teach: not the prefill, and not a last step cut by max new tokens (it kept
    fewer tokens than its verification accepted, so its picture shows what the run dropped). A run whose
    only decode step was cut keeps it: there is nothing else to show."""
    decode = [(k, s) for k, s in enumerate(tr.steps) if s.kind != "prefill"]
    return [(k, s) for k, s in decode if not cut_words(tr, k)] or decode


MAX_SLIDES = 24  # a deck for a lesson: the steps that teach, not every step of a long run


def slide_steps(trace: TraceLike, cap: int = MAX_SLIDES) -> list[int]:
    """List positions of the steps a slide deck shows: no prefill (a wall of prompt and empty panels); the
    decode steps where guesses were accepted, plus the lesson's opening step; at most `cap`, keeping the
    ones that accepted the most. A run where nothing was guessed (greedy) shows its first few steps."""
    tr = as_trace(trace)
    decode = _teaching_decode(tr)
    teach = {k for k, s in decode if step_counts(s).guessed > 0 or _rejected_after_some(s)}
    if decode:
        teach.add(teaching_step(tr)["k"])
    if not teach:
        return [k for k, _ in decode[:min(cap, 6)]]
    keep = sorted(teach, key=lambda k: (-step_counts(tr.steps[k]).guessed, k))[:cap]
    return sorted(keep)
