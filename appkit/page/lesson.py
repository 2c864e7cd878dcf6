"""Lesson mode: a guided tour a teacher can give from the page, one stop per method.

Why data: each stop is a request, the settings that make its picture, the model it runs on and two
sentences of narration. The lesson teaches on the page's default model, SmolLM2-135M-Instruct, with chat
requests (its chat template applied, as the examples do) chosen so that each effect is real on it
(docs/lesson-stops.md: per stop, the step it opens on and what that step shows, from scripts/lesson_check.py).
Draft-model speculation runs there too, with the 2-layer draft distilled for it (assets/drafts/smollm2, the
draft the Run tab preselects: appkit/models/drafts.py draft_for); a build without that draft runs those stops
on the embedded pair (the embedded draft shares the embedded target's tokenizer) and says why. Medusa / EAGLE
need heads trained for the target (SmolLM2's when assets/heads/smollm2/<kind> ships, else the embedded
target's). A page whose default is the embedded target (the fallback) runs every stop on the embedded pair
with code prompts.
A stop appears only when its method is in decoding.api.METHODS (and self-speculation only with its shipped
adapter). The stops use the teaching preset ("teach"): settings that show the picture (the paper's W5 N4 G5
window), not the fastest ones - the stats line of every run says which preset it used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import gradio as gr

from decoding.api import METHODS, SPECS
from decoding.models.fetch import MODEL_NAME, cached
from decoding.methods.resources import ADAPTER_CONFIG, shipped_adapter
from decoding.tuning.device_presets import SHIPPED_CPU, SHIPPED_CPU_DEFAULT
from decoding.models import ASSETS, DEFAULT_MODEL, EMBEDDED_DRAFT, EMBEDDED_TARGET
from viz.exports.teach import WANTS

from ..models.drafts import draft_for
from ..run.method_fields import has_shape, needs, spec
from .tables import display_name

# The models as the page names them (never a server path): the default and the embedded pair.
DEFAULT, TARGET, DRAFT = display_name(DEFAULT_MODEL), display_name(EMBEDDED_TARGET), display_name(EMBEDDED_DRAFT)
# Code prompts for the embedded code models (the stdlib-trained pair: the speculative stops and the fallback).
STACK = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):"
VECTOR = ("class Vector:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
          "    def __add__(self, other):\n        return Vector(self.x + other.x, self.y + other.y)\n\n"
          "    def __sub__(self, other):")
# Chat requests for SmolLM2, each checked on it (scripts/lesson_check.py): four functions of one shape give
# the Jacobi window n-grams to harvest; a bug fix writes the request's code out again for prompt lookup to copy.
CALC = ("Write Python functions add, subtract, multiply and divide that each take two numbers a and b and "
        "return the result.")
FIX = ("Fix the bug in this function:\n\ndef average(numbers):\n    total = 0\n    for n in numbers:\n"
       "        total += n\n    return total / len(number)")
JSON_FILE = "Write a Python function that reads a JSON file and returns its contents."
TEACH = "teach"  # the teaching preset: the lesson's own values, never the tuner's
# The teaching preset's values per method, as drafter parameters: what the lesson's stops run (the paper's
# W5 N4 G5 window, a 4-token draft chain), applied to the fields whenever "teaching" is picked.
# Read from each method's spec (presets["teaching"]).
TEACHING = {n: dict(s.presets["teaching"]) for n, s in SPECS.items() if "teaching" in s.presets}
GOTO_BEST = "best"  # the step view opens at the step its narration points at (viz.teach picks it from the run)
# Where a stop runs: "default" = the page's default model; "pair" = the default model with its shipped draft,
# else (no draft for it in this build) the embedded target and draft (a draft with the target's tokenizer);
# "heads" = the default model when its heads ship, else the embedded target;
# "adapter" = the default model, only when its self-speculation adapter ships.
WHY = {"pair": f"no draft for {MODEL_NAME} ships in this build (assets/drafts/smollm2), and a draft must share "
                f"the target's tokenizer: the embedded draft shares the embedded target's",
       "heads": f"no heads for {MODEL_NAME} ship in this build yet; these were trained for the embedded target",
       "fallback": f"the page's default model is the embedded target ({MODEL_NAME} is not here)"}


@dataclass(frozen=True)
class Stop:
    title: str
    method: str
    prompt: str     # the code prompt, on the embedded models (the fallback page, or a stop with no part shipped)
    narration: str  # two sentences: what the method does, what the picture shows
    look: str       # what to look at, in the step view
    settings: dict = field(default_factory=dict)  # Settings fields (names = page components)
    expect: dict = field(default_factory=dict)    # what the picture must show (checked by the browser test)
    request: str = ""                             # the chat request, on the default model
    on: str = "default"                           # where it runs: default, pair, heads, adapter (WHY)
    embedded: dict = field(default_factory=dict)  # settings that replace `settings` on the embedded models


ALL = [  # every stop this lesson has; STOPS: those whose model parts ship in this build
    Stop("Greedy: one token per forward pass", "greedy", STACK,
         "Greedy decoding runs the whole model once per new token and keeps the most likely one. Every method "
         "after this one must produce exactly these tokens (in fp32) — only in fewer forward passes.",
         "the attention mask: one query row per step, seeing the whole cache; steps = tokens",
         expect={"views": ["mask"], "compression": 1.0}, request=CALC),
    Stop("Jacobi decoding: guess a block, refine it in parallel", "jacobi", STACK,
         "Jacobi decoding guesses several future tokens at once and refines all of them in one forward pass; a "
         "guess is kept once it equals what greedy would have produced. On its own it seldom gains more than a "
         "token per step — its trajectories are what lookahead harvests.",
         "how the guesses change from step to step before they settle",
         settings={"block": 5}, expect={"views": ["trajectory", "mask"]}, request=CALC),
    Stop("Lookahead at the paper's W5 N4 G5", "lookahead", VECTOR,
         "Lookahead keeps a 2D Jacobi window — 5 columns (W) of guesses, 3 levels deep (N−1) — and every column's "
         "history becomes a 4-token n-gram in the pool. In the same forward pass up to 5 (G) pooled n-grams that "
         "start with the last token are verified, so one step can accept several tokens.",
         "the Jacobi window (5 columns × 3 levels) and the pool lookup under it",
         settings={"window": 5, "ngram": 4, "guesses": 5}, expect={"views": ["window", "pool", "trajectory", "mask"],
                                                                  "window": [5, 3]}, request=CALC),
    Stop("Prompt lookup: copy what followed last time", "prompt_lookup", VECTOR,
         "Prompt lookup drafts for free: it finds the last few tokens earlier in the prompt or output and proposes "
         "the tokens that followed them there. When the answer writes earlier text out again — a bug fix copying "
         "the request's code, a class repeating its methods — a single step accepts a long copy.",
         "the pool lookup: the matched key and the copied candidate, accepted up to its first mismatch",
         settings={"max_ngram": 3, "num_tokens": 10}, expect={"views": ["pool", "tree", "mask"]}, request=FIX),
    Stop("Speculative decoding: a draft chain", "speculative", STACK,
         "A small draft model writes K=4 tokens one after another; the target checks all of them in one forward "
         "pass and keeps the longest prefix it agrees with, plus one token of its own. The tree view is a single "
         "path: accepted in green, the first rejection in red.",
         "the token tree: one path of 4 draft tokens",
         settings={"spec_mode": "chain", "draft_tokens": 4, "staged": False, "confidence": 0.0},
         expect={"views": ["tree", "mask"]}, request=CALC, on="pair"),
    Stop("Speculative decoding: a token tree", "speculative", STACK,
         "Instead of one guess per position the draft proposes its top 3, then 2, then 1 continuations: a tree "
         "checked in one pass, each token attending only to its ancestors (the mask shows it). More guesses per "
         "step, so more of them can be right.",
         "the token tree's branches and the block-sparse attention mask",
         settings={"spec_mode": "tree", "widths": "3,2,1", "staged": False, "confidence": 0.0},
         expect={"views": ["tree", "mask"]}, request=CALC, on="pair"),
    Stop("Staged speculation: draft the draft", "speculative", STACK,
         "Staged speculation speeds up the drafter itself: an n-gram stage proposes tokens that the draft model "
         "checks in one pass, so it needs fewer sequential forwards. The target still verifies everything, so the "
         "output is unchanged.",
         "stage-2 tokens (their own colour) in the tree and the mask",
         settings={"spec_mode": "tree", "widths": "2,1,1,1,1", "staged": True, "confidence": 0.0},
         expect={"views": ["tree", "mask"]}, request=CALC, on="pair"),
    Stop("Self-drafting heads (Medusa)", "medusa", STACK,
         "Medusa adds small heads to the target that predict tokens +2, +3, … from its own last hidden state, so "
         "no separate draft model runs. Their guesses form a tree that the target verifies in its next pass.",
         "the token tree drafted by the heads", expect={"views": ["tree", "mask"]}, request=CALC, on="heads"),
    Stop("Self-drafting heads (EAGLE)", "eagle", STACK,
         "EAGLE drafts with one small layer that reads the target's hidden features, one step at a time. It "
         "guesses better than independent heads because each guess sees the previous one.",
         "the token tree drafted from the target's features", expect={"views": ["tree", "mask"]}, request=CALC,
         on="heads"),
    Stop("Self-speculative: the target drafts for itself", "self_speculative", STACK,
         "Self-speculative decoding drafts with the target's own first layers, a small trained adapter and its "
         "LM head, so no second model is loaded and no tokenizer has to match. The full model then checks the "
         "drafted tokens in one pass and keeps exactly what greedy would have written.",
         "the token tree drafted by the shallow layers, accepted in green up to the first rejection",
         expect={"views": ["tree", "mask"]}, request=CALC, on="adapter"),
    Stop("Retrieval: draft from a datastore, no model", "retrieval", VECTOR,
         "Retrieval drafts with no model at all: it finds the longest suffix of the text in a datastore (here the "
         "shipped one: 661,815 tokens, a quarter of them the default model's own answers to 935 chat requests, "
         "the rest the first 105 files of the Python standard library in name order, `__future__.py` to `dbm/`; "
         "on the embedded models the prompt and output so far) and proposes "
         "what followed it there as a tree, most frequent first. One pass verifies the tree, so common code "
         "phrases are accepted several tokens at a time.",
         "the token tree of retrieved continuations and the longest one the target accepted",
         settings={"datastore": "shipped"}, embedded={"datastore": ""}, expect={"views": ["tree", "mask"]},
         request=JSON_FILE),
]
MAX_NEW = 64  # every stop: room for the repeated pattern to come back, ~2-3 s at SmolLM2's 25-35 tokens/s on a CPU


def home(default: str | None) -> str:
    """The model the lesson teaches on: the default model when it is the page's default, else the embedded one."""
    return DEFAULT if (default or DEFAULT) == DEFAULT else TARGET


def heads_ship(method: str) -> bool:
    """Heads trained for the default model are in the build (assets/heads/smollm2/<method>/heads.json)."""
    return (ASSETS / "heads" / "smollm2" / method / "heads.json").is_file()


def adapter_ships() -> bool:
    """The self-speculation adapter (trained for the default model only) is in the build."""
    return (shipped_adapter() / ADAPTER_CONFIG).is_file()


def shipped_draft() -> str | None:
    """The draft shipped for the default model, as the page's draft dropdown names it (app.py preselects it),
    else None: the speculative stops then run on the embedded pair."""
    draft = draft_for(DEFAULT_MODEL)
    return display_name(draft) if draft else None


STOPS = [s for s in ALL if s.on != "adapter" or adapter_ships()]  # decided at build time: it ships or not


def where(stop: Stop, default: str | None = DEFAULT) -> tuple[str, str, str]:
    """(target, draft, why) of a stop on a page whose default target is `default`: why is '' on the default
    model, else the WHY key that says why it runs on the embedded models."""
    if home(default) != DEFAULT:
        return TARGET, DRAFT, "fallback"
    draft = shipped_draft()
    if (stop.on == "pair" and draft is None) or (stop.on == "heads" and not heads_ship(stop.method)):
        return TARGET, DRAFT, stop.on
    return DEFAULT, draft or DRAFT, ""


def stops(default: str | None = DEFAULT) -> list[Stop]:
    """The stops this build can give on a page whose default target is `default`."""
    return [s for s in STOPS if s.method in METHODS and
            (s.on != "adapter" or (adapter_ships() and home(default) == DEFAULT))]


@lru_cache(maxsize=2)
def _tokenizer(folder: str):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(folder)


def chat(request: str) -> str:
    """A request as the default model receives it: its chat template applied, as text (appkit/page/examples.py).
    Before the default model is fetched the plain request is shown (a run waits for the fetch anyway)."""
    folder = cached()
    if folder is None:
        return request
    return _tokenizer(str(folder)).apply_chat_template([{"role": "user", "content": request}],
                                                       add_generation_prompt=True, tokenize=False)


def values(stop: Stop, default: str | None = DEFAULT) -> dict:
    """Every FIELDS value of a stop: its models, prompt and settings, greedy sampling, the teaching preset."""
    target, draft, why = where(stop, default)
    prompt = chat(stop.request) if not why and stop.request else stop.prompt
    settings = {**stop.settings, **(stop.embedded if why else {})}
    return {"target": target, "draft": draft, "prompt": prompt, "method": stop.method, "preset": TEACH,
            "max_new": MAX_NEW, "temperature": 0.0, "heads": "", "datastore": "", **settings}


# The components a stop sets, in this order (names = Settings fields = Page attributes). The models are set
# on every stop, so going back and forth between default-model and embedded-pair stops stays consistent.
FIELDS = ("target", "draft", "prompt", "method", "preset", "max_new", "window", "ngram", "guesses", "max_ngram",
          "num_tokens", "spec_mode", "draft_tokens", "widths", "budget", "staged", "confidence", "temperature",
          "block", "heads", "datastore")


def opens_on(stop: Stop) -> str:
    """What the stop's opening step shows, in the words viz.teach uses to pick it from the finished run."""
    kind = stop.method if stop.method in WANTS else "heads"
    if has_shape(spec(stop.method)):  # a token tree's picture: by its shape
        kind = "staged" if stop.settings.get("staged") else "tree" if stop.settings.get("spec_mode") == "tree" else "chain"
    return WANTS[kind][0]


def model_line(stop: Stop, default: str | None = DEFAULT) -> str:
    """Which model a stop runs on and, off the default model, why."""
    target, draft, why = where(stop, default)
    if not why:
        helper = f" with the 2-layer draft distilled for it (`{draft}`)" if needs(stop.method, "draft_model") else ""
        return f"**Model:** {MODEL_NAME} (the default){helper}, a chat request with its chat template applied."
    pair = f"the embedded pair (`{target}` + `{draft}`)" if needs(stop.method, "draft_model") else \
        f"the embedded target (`{target}`)"
    return f"**Model:** {pair}, a code prompt: {WHY[why]}."


def rows(method: str, params: dict) -> int | None:
    """The most query rows (tokens) one step of `method` runs with `params` (its spec's formula, defaults filled)."""
    sp = SPECS.get(method)
    if sp is None or sp.query_tokens is None:
        return None
    return sp.query_tokens({**sp.defaults(), **params})


WINDOW = ("window", "ngram", "guesses")  # a 2D-window method's shape (lookahead's W, N, G): window_why explains it


def window_why(method: str, auto: dict | None, wide: dict) -> str:
    """Why the CPU auto preset runs one window column and what the lesson's wider window costs, in query rows a
    step (the budget line's formula; no timing): on the window stop (auto: its model's preset) and in "How this
    method works" (auto None)."""
    shape = lambda p: f"W{p['window']} N{p['ngram']} G{p['guesses']}"  # noqa: E731
    a, w = (rows(method, auto) if auto else None), rows(method, wide)
    cost = (f" (up to {w} query rows a step against auto's {a}, {w / a:.1f}×)" if a and w else
            f" (up to {w} query rows a step)" if w else "")
    head = f"Why auto runs {shape(auto)} on a CPU" if auto else f"Why auto runs {method} at W1 on a CPU"
    return (f"**{head}:** on a CPU every query row a step adds costs time (the row cost the tuner measures), and "
            f"each extra window column adds N−1 rows to every step; on the small shipped models the extra columns' "
            f"n-grams did not pay for their rows, so the CPU presets keep one column — the window view then shows a "
            f"single column. The lesson runs {shape(wide)} to show the 2D window{cost}: the picture, not the speed.")


def auto_window(method: str, default: str | None = DEFAULT) -> dict | None:
    """A window method's shipped CPU auto preset on the lesson's model (device_presets.py), else None."""
    found = (SHIPPED_CPU_DEFAULT if home(default) == DEFAULT else SHIPPED_CPU).get(method)
    return dict(found) if found and all(k in found for k in WINDOW) else None


def narration(k: int, all_stops: list[Stop], default: str | None = DEFAULT) -> str:
    s = all_stops[k]
    wide = {**TEACHING.get(s.method, {}), **s.settings}
    why = (f"\n\n{window_why(s.method, auto_window(s.method, default), wide)}"
           if "window" in s.settings and all(k in wide for k in WINDOW) else "")
    return (f"**Stop {k + 1} of {len(all_stops)} — {s.title}** · method `{s.method}` · teaching preset\n\n"
            f"{s.narration}{why}\n\n{model_line(s, default)}\n\n**Look at:** {s.look}. **The step view opens on** "
            f"{opens_on(s)} — picked from the run, and it says so when this run has none; ◀ ▶ step around it."
            + ("\n\n*Last stop: compare them all on the Race tab.*" if k == len(all_stops) - 1 else ""))


def go(at, delta: int, default: str | None = DEFAULT) -> list:
    """(new index, narration, prev/next buttons, then one update per FIELDS component); default: the page's
    default target (the lesson teaches on it when it is the default model)."""
    all_stops = stops(default)
    k = 0 if at is None or at < 0 else max(0, min(len(all_stops) - 1, int(at) + delta))
    v = values(all_stops[k], default)
    return [k, narration(k, all_stops, default), gr.update(visible=True, interactive=k > 0),
            gr.update(visible=True, interactive=k < len(all_stops) - 1), gr.Tabs(selected="run")] + \
        [gr.update(value=v[f]) if f in v else gr.skip() for f in FIELDS]


def start_label(default: str | None = DEFAULT) -> str:
    """The button names the tour that this build can give."""
    return "Start the lesson: " + " → ".join(dict.fromkeys(s.method.replace("_", " ") for s in stops(default)))


# On the run a stop starts, in the browser: the page enters lesson mode (the step view full width, the
# narration beside it: stepper.js copies #ds-lesson into the view's side column, data-ds-side), the old step
# view is labelled "previous run" and the new one opens on the step viz.teach picked (data-ds-goto, read once).
RUN_JS = ("(...args) => { document.body.classList.add('ds-lesson-on'); const e = document.querySelector('#ds-stepview'); "
          f"if (e) {{ e.setAttribute('data-ds-goto', '{GOTO_BEST}'); e.setAttribute('data-ds-side', '#ds-lesson'); "
          "if (e.querySelector('.ds-stepper')) e.classList.add('ds-stale'); } return args; }")
# Lesson mode's page layout: the Run tab's step-view column first and full width (stats and text below it).
CSS = """
#ds-run-row{flex-wrap:wrap}
body.ds-lesson-on #ds-run-right{order:-1;flex:1 1 100% !important;min-width:100% !important;max-width:100%}
body.ds-lesson-on #ds-run-left{flex:1 1 100% !important;min-width:100% !important}
body.ds-lesson-on #ds-step-intro{display:none}
body.ds-lesson-on.ds-narration-beside #ds-lesson{display:none}
"""
