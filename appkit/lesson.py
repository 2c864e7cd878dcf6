"""Lesson mode: a guided tour a teacher can give from the page, one stop per method.

Why data: each stop is a prompt, the settings that make its picture, the step to look at and two sentences
of narration. A stop appears only when its method is in decoding.api.METHODS, so the Jacobi and
self-drafting-heads stops switch on by themselves once those methods exist. The stops use the teaching
preset ("teach"): settings chosen to show the picture (the paper's W5 N4 G5 window), not to be fast —
the stats line of every run says which preset it used.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr

from decoding.api import METHODS

STACK = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):"
VECTOR = ("class Vector:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
          "    def __add__(self, other):\n        return Vector(self.x + other.x, self.y + other.y)\n\n"
          "    def __sub__(self, other):")
TEACH = "teach"  # the teaching preset: the lesson's own values, never the tuner's
# The teaching preset's values per method, as drafter parameters: what the lesson's stops run (the paper's
# W5 N4 G5 window, a 4-token draft chain), applied to the fields whenever "teaching" is picked.
TEACHING = {"lookahead": {"window": 5, "ngram": 4, "guesses": 5},
            "prompt_lookup": {"max_ngram": 3, "num_tokens": 10},
            "speculative": {"draft_tokens": 4, "staged": False}}
GOTO_BEST = "best"  # the step view opens at the step that accepted the most tokens


@dataclass(frozen=True)
class Stop:
    title: str
    method: str
    prompt: str
    narration: str  # two sentences: what the method does, what the picture shows
    look: str       # what to look at, in the step view
    settings: dict = field(default_factory=dict)  # Settings fields (names = page components)
    expect: dict = field(default_factory=dict)    # what the picture must show (checked by the browser test)


STOPS = [
    Stop("Greedy: one token per forward pass", "greedy", STACK,
         "Greedy decoding runs the whole model once per new token and keeps the most likely one. Every method "
         "after this one must produce exactly these tokens (in fp32) — only in fewer forward passes.",
         "the attention mask: one query row per step, seeing the whole cache; steps = tokens",
         expect={"views": ["mask"], "compression": 1.0}),
    Stop("Jacobi decoding: guess a block, refine it in parallel", "jacobi", STACK,
         "Jacobi decoding guesses several future tokens at once and refines all of them in one forward pass; a "
         "guess is kept once it equals what greedy would have produced. On its own it seldom gains more than a "
         "token per step — its trajectories are what lookahead harvests.",
         "how the guesses change from step to step before they settle",
         settings={"block": 5}, expect={"views": ["trajectory", "mask"]}),
    Stop("Lookahead at the paper's W5 N4 G5", "lookahead", VECTOR,
         "Lookahead keeps a 2D Jacobi window — 5 columns (W) of guesses, 3 levels deep (N−1) — and every column's "
         "history becomes a 4-token n-gram in the pool. In the same forward pass up to 5 (G) pooled n-grams that "
         "start with the last token are verified, so one step can accept several tokens.",
         "the Jacobi window (5 columns × 3 levels) and the pool lookup under it",
         settings={"window": 5, "ngram": 4, "guesses": 5}, expect={"views": ["window", "pool", "trajectory", "mask"],
                                                                  "window": [5, 3]}),
    Stop("Prompt lookup: copy what followed last time", "prompt_lookup", VECTOR,
         "Prompt lookup drafts for free: it finds the last few tokens earlier in the prompt or output and proposes "
         "the tokens that followed them there. On repetitive text like this class a single step accepts a long copy.",
         "the pool lookup: the matched key and the copied candidate, accepted up to its first mismatch",
         settings={"max_ngram": 3, "num_tokens": 10}, expect={"views": ["pool", "tree", "mask"]}),
    Stop("Speculative decoding: a draft chain", "speculative", STACK,
         "A small draft model writes K=4 tokens one after another; the target checks all of them in one forward "
         "pass and keeps the longest prefix it agrees with, plus one token of its own. The tree view is a single "
         "path: accepted in green, the first rejection in red.",
         "the token tree: one path of 4 draft tokens",
         settings={"spec_mode": "chain", "draft_tokens": 4, "staged": False, "confidence": 0.0},
         expect={"views": ["tree", "mask"]}),
    Stop("Speculative decoding: a token tree", "speculative", STACK,
         "Instead of one guess per position the draft proposes its top 3, then 2, then 1 continuations: a tree "
         "checked in one pass, each token attending only to its ancestors (the mask shows it). More guesses per "
         "step, so more of them can be right.",
         "the token tree's branches and the block-sparse attention mask",
         settings={"spec_mode": "tree", "widths": "3,2,1", "staged": False, "confidence": 0.0},
         expect={"views": ["tree", "mask"]}),
    Stop("Staged speculation: draft the draft", "speculative", STACK,
         "Staged speculation speeds up the drafter itself: an n-gram stage proposes tokens that the draft model "
         "checks in one pass, so it needs fewer sequential forwards. The target still verifies everything, so the "
         "output is unchanged.",
         "stage-2 tokens (their own colour) in the tree and the mask",
         settings={"spec_mode": "tree", "widths": "2,1,1,1,1", "staged": True, "confidence": 0.0},
         expect={"views": ["tree", "mask"]}),
    Stop("Self-drafting heads (Medusa)", "medusa", STACK,
         "Medusa adds small heads to the target that predict tokens +2, +3, … from its own last hidden state, so "
         "no separate draft model runs. Their guesses form a tree that the target verifies in its next pass.",
         "the token tree drafted by the heads", expect={"views": ["tree", "mask"]}),
    Stop("Self-drafting heads (EAGLE)", "eagle", STACK,
         "EAGLE drafts with one small layer that reads the target's hidden features, one step at a time. It "
         "guesses better than independent heads because each guess sees the previous one.",
         "the token tree drafted from the target's features", expect={"views": ["tree", "mask"]}),
]
MAX_NEW = 48  # every stop: long enough to show the pattern, short enough for a CPU in a workshop


def stops() -> list[Stop]:
    """The stops whose method exists in this build."""
    return [s for s in STOPS if s.method in METHODS]


# The components a stop sets, in this order (names = Settings fields = Page attributes).
FIELDS = ("prompt", "method", "preset", "max_new", "window", "ngram", "guesses", "max_ngram", "num_tokens",
          "spec_mode", "draft_tokens", "widths", "budget", "staged", "confidence", "temperature", "block")


def values(stop: Stop) -> dict:
    """Every FIELDS value of a stop: its own settings, greedy sampling, the teaching preset."""
    return {"prompt": stop.prompt, "method": stop.method, "preset": TEACH, "max_new": MAX_NEW, "temperature": 0.0,
            **stop.settings}


def narration(k: int, all_stops: list[Stop]) -> str:
    s = all_stops[k]
    return (f"**Stop {k + 1} of {len(all_stops)} — {s.title}** · method `{s.method}` · teaching preset\n\n"
            f"{s.narration}\n\n**Look at:** {s.look}. The step view opens at the step that accepted the most "
            f"tokens; ◀ ▶ step around it." + ("\n\n*Last stop: compare them all on the Race tab.*"
                                              if k == len(all_stops) - 1 else ""))


def go(at, delta: int) -> list:
    """(new index, narration, prev/next buttons, then one update per FIELDS component)."""
    all_stops = stops()
    k = 0 if at is None or at < 0 else max(0, min(len(all_stops) - 1, int(at) + delta))
    v = values(all_stops[k])
    return [k, narration(k, all_stops), gr.update(visible=True, interactive=k > 0),
            gr.update(visible=True, interactive=k < len(all_stops) - 1), gr.Tabs(selected="run")] + \
        [gr.update(value=v[f]) if f in v else gr.skip() for f in FIELDS]


def start_label() -> str:
    """The button names the tour that this build can give."""
    return "Start the lesson: " + " → ".join(dict.fromkeys(s.method.replace("_", " ") for s in stops()))


# On the run a stop starts, in the browser: the old step view is labelled "previous run" and the new one
# opens at the step that accepted the most tokens (stepper.js reads data-ds-goto once).
RUN_JS = ("(...args) => { const e = document.querySelector('#ds-stepview'); if (e) { e.setAttribute('data-ds-goto', "
          f"'{GOTO_BEST}'); if (e.querySelector('.ds-stepper')) e.classList.add('ds-stale'); }} return args; }}")
