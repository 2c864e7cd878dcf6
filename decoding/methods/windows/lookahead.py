"""Lookahead decoding (Fu et al. 2024): a 2D Jacobi window generates n-grams, a pool keeps them, and
the candidates for the current token are verified in the SAME forward pass as the window.

Window: N-1 levels. Level 0 holds W-1 guesses after x0 (row 0 = [x0, L0]); levels 1..N-2 hold W
guesses each; L_l[j] sits at position x0 + l + j. The target's outputs at the top level are the new
guesses one position further; column j then spells an n-gram (row0[j], L1[j], ..., out[j]) that goes
into the pool. Like the reference, the window advances one position per step, whatever was accepted.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from decoding.engine.drafter import Abilities, Plan
from decoding.params import LIMITS
from decoding.engine.masks import add_chains, add_trie, depths_of
from decoding.methods.windows.pool import Pool
from decoding.engine.verify import Verdict, common_prefix
from decoding.methods.spec import MethodSpec, knob
from decoding.methods.windows.lookahead_tune import TUNER

# Lookahead offers text n-grams (prompt, output) with this many tokens of continuation, not only N-1:
# on the embedded model and code prompts W1 N5 G2 compresses 2.49 instead of 2.26
# (bench/results/cpu-embedded-code.md, python bench/methods/lookahead_sources.py); in a one-off sweep of 4, 7
# and 10, 7 was about as fast as 10 with fewer query tokens.
TEXT_SPAN = 7


def lookahead_query_tokens(window: int, ngram: int, guesses: int, text_span: int = TEXT_SPAN) -> int:
    """Most query tokens one lookahead step can run: x0 + the window (W-1 + (N-2)W) + G candidates of up
    to max(N-1, text span) tokens (shared prefixes merge, so real steps are often smaller)."""
    return window * (ngram - 1) + guesses * max(ngram - 1, text_span)


def level_start(window: int, level: int) -> int:
    """Query index of window level `level`'s first token: row 0 is [x0, L0] (W tokens), each later level
    W tokens, so level l starts at W * l. The one place this arithmetic lives."""
    return window * level


def lookahead_layout(window: int, ngram: int, levels: int, n_candidates: int) -> dict[str, list]:
    """Parents, depths and roles of a lookahead step's query, in the paper's order.

    Query = [x0 | L0 (W-1) | L1 (W) | ... | L_{levels-1} (W) | G' candidates x (N-1)].
    Role slots: window → (level, column) with x0 = (0, 0) and L0[j-1] = (0, j); candidate → (g, i).
    """
    W, n1 = window, ngram - 1
    parents, roles, slots = [-1], ["x0"], [(0, 0)]
    for j in range(1, W):
        parents.append(j - 1); roles.append("window"); slots.append((0, j))
    for lev in range(1, levels):
        for j in range(W):
            parents.append(level_start(W, lev - 1) + j)  # the token above it in the window
            roles.append("window"); slots.append((lev, j))
    add_chains(parents, roles, slots, [n1] * n_candidates)
    return {"parents": parents, "depths": depths_of(parents), "roles": roles, "slots": slots}


class Lookahead:
    name = "lookahead"
    abilities = Abilities(wants_tracing=True)

    @classmethod
    def from_params(cls, **p) -> "Lookahead":
        return cls(p.get("window", 5), p.get("ngram", 4), p.get("guesses", 5),
                   prompt_ngrams=p.get("prompt_ngrams", True), output_ngrams=p.get("output_ngrams", True),
                   dedupe=p.get("dedupe", True), text_span=p.get("text_span", TEXT_SPAN))
    tracing = False  # set by the runner: per-step pool deltas (info["pool_delta"]) only when tracing

    def __init__(self, window: int = 5, ngram: int = 4, guesses: int = 5, prompt_ngrams: bool = True,
                 output_ngrams: bool = True, pool_cap: int | None = None, seed: int = 0, dedupe: bool = True,
                 text_span: int | None = None):
        if window < 1 or ngram < 2 or guesses < 0:
            raise ValueError("lookahead needs window >= 1, ngram >= 2, guesses >= 0")
        self.W, self.N, self.G = window, ngram, guesses
        self.prompt_ngrams, self.output_ngrams = prompt_ngrams, output_ngrams
        self.pool_cap = pool_cap or max(guesses, 1)
        self.seed, self.dedupe = seed, dedupe
        self.text_span = max(text_span or ngram - 1, ngram - 1)  # continuation length of text n-grams
        self._layouts: dict[int, dict] = {}

    def config(self) -> dict:
        return {"window": self.W, "ngram": self.N, "guesses": self.G, "prompt_ngrams": self.prompt_ngrams,
                "output_ngrams": self.output_ngrams, "pool_cap": self.pool_cap, "seed": self.seed,
                "dedupe": self.dedupe, "text_span": self.text_span}

    def max_depth(self) -> int:
        return max(self.W + self.N, self.text_span + 1)

    def start(self, prompt_ids: list[int]) -> None:
        rng = random.Random(self.seed)
        self.levels: list[list[int]] = [[rng.choice(prompt_ids) for _ in range(self.W - 1)]]
        self.pool = Pool(self.N - 1, self.pool_cap, self.text_span)
        self.pool.log = [] if self.tracing else None
        self._next = 0 if self.prompt_ngrams else max(0, len(prompt_ids) - self.N + 1)
        if self.prompt_ngrams:
            self._next = self.pool.add_text(prompt_ids, 0, "prompt")

    def plan(self, context: list[int]) -> Plan:
        """Query = x0, the window levels, then the candidates (merged into a prefix tree when dedupe is
        on: shared prefixes cost no extra query tokens, the outputs are identical)."""
        x0 = context[-1]
        prev = context[-2] if len(context) > 1 else None
        cands, sources = self.pool.lookup(x0, self.G, prev, context) if self.G else ([], [])
        lay = self._layouts.get(len(self.levels))
        if lay is None:
            lay = self._layouts[len(self.levels)] = lookahead_layout(self.W, self.N, len(self.levels), 0)
        parents, roles, slots = list(lay["parents"]), list(lay["roles"]), list(lay["slots"])
        tokens = [x0] + [t for level in self.levels for t in level]
        n_window = len(tokens)
        if self.dedupe:
            tokens += add_trie(parents, roles, slots, [list(c) for c in cands])
        else:
            add_chains(parents, roles, slots, [len(c) for c in cands])
            tokens += [t for c in cands for t in c]
        depths = lay["depths"] + [slots[i][1] + 1 for i in range(n_window, len(tokens))]
        top = self._top()
        rows = [0] + list(range(top, top + self.W)) + list(range(n_window, len(tokens)))
        info = {"window": [list(level) for level in self.levels], "pool_key": x0,
                "candidates": [list(c) for c in cands], "candidate_sources": sources}
        return Plan(tokens, parents, depths, roles, slots, [r == "candidate" for r in roles],
                    origin="candidate", info=info, rows=sorted(set(rows)))

    def _top(self) -> int:
        """First query index of the top window level (row 0 = [x0, L0] when it is the only level)."""
        return level_start(self.W, len(self.levels) - 1)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        top = self._top()
        harvested = self.advance(plan.tokens[0], preds[top:top + self.W], context)
        accepted = verdict.tokens
        matched = [common_prefix(c, accepted) for c in plan.info["candidates"]]
        chosen = plan.slots[verdict.path[-1]][0] if len(verdict.path) > 1 else None  # deepest node's candidate
        plan.info.update(window_next=[list(level) for level in self.levels], harvested=harvested,
                         matched=matched, chosen=chosen, pool_size=self.pool.size)
        if self.pool.log is not None:  # the pool's changes since the last step (the first: the prompt's too)
            plan.info["pool_delta"], self.pool.log = self.pool.log, []

    def advance(self, x0: int, out: list[int], context: list[int]) -> list[list[int]]:
        """The window's new top row `out` (the target's outputs at the top level, one per column) moves the
        window on and feeds the pool; returns the harvested n-grams (observe() calls it with the step's outputs)."""
        W, levels = self.W, self.levels
        harvested = []
        if len(levels) == self.N - 1:  # full window: harvest one n-gram per column, then shift
            row0 = [x0] + levels[0]
            for j in range(W):
                gram = [row0[j]] + [level[j] for level in levels[1:]] + [out[j]]
                self.pool.add(gram[0], tuple(gram[1:]), "window")
                harvested.append(gram)
            stack = levels[1:] + [out]
            self.levels = [stack[0][1:]] + stack[1:]
        else:  # warm-up: each step fills one more level
            self.levels = levels + [out]
        if self.output_ngrams:
            self._next = self.pool.add_text(context, self._next, "output")
        return harvested


@dataclass
class LookaheadParams:
    window: int = knob(5, lo=LIMITS["window"][0], hi=LIMITS["window"][1], cli="--window", ui=True, label="W window",
                       help="lookahead W: Jacobi window columns (default: the preset for this model and device, else 5)")
    ngram: int = knob(4, lo=LIMITS["ngram"][0], hi=LIMITS["ngram"][1], cli="--ngram", ui=True, label="N n-gram",
                      help="lookahead N: n-gram length (default: the preset, else 4)")
    guesses: int = knob(5, lo=LIMITS["guesses"][0], hi=LIMITS["guesses"][1], cli="--guesses", ui=True,
                        label="G guesses", help="lookahead G: pool candidates verified per step (default: the preset, "
                                                "else 5)")
    prompt_ngrams: bool = knob(True, cli="--no-prompt-ngrams", negate=True,
                               help="lookahead: do not seed the pool with the prompt")
    output_ngrams: bool = knob(True, help="offer n-grams of the output so far")
    dedupe: bool = knob(True, help="merge candidates sharing a prefix into one trie (same output, fewer tokens)")
    text_span: int = knob(TEXT_SPAN, lo=LIMITS["text_span"][0], hi=LIMITS["text_span"][1], cli="--text-span",
                          help="lookahead: tokens offered after a prompt/output n-gram match (default 7; at least "
                               "N-1, the paper's pool)")


def words(c: dict) -> str:
    parts = [f"lookahead · W {c.get('window')} · N {c.get('ngram')} · G {c.get('guesses')}"]
    if c.get("text_span"):
        parts.append(f"text span {c['text_span']}")
    if c.get("prompt_ngrams") is False and c.get("output_ngrams") is False:
        parts.append("window n-grams only")
    return " · ".join(parts)


SPEC = MethodSpec(
    name="lookahead", drafter=Lookahead, params=LookaheadParams, label="lookahead", colour="#1b9e77",
    summary="a 2D Jacobi window makes n-grams; the pool's candidates are verified in the same forward",
    explain=(
    "### Lookahead decoding\n"
    "Each step is **one** forward pass over three things at once (see the *window* and *pool* views):\n"
    "\n"
    "- **x0**, the last accepted token — the model's own next token always comes from here, so a step never "
    "gives less than plain decoding;\n"
    "- the **Jacobi window**: **W** columns × **N−1** levels of guessed future tokens. Each step every column"
    " is refined by one level (fixed-point iteration), and each column then yields an **N-gram** that goes "
    "into the pool;\n"
    "- up to **G** **candidates** from the **n-gram pool** whose first token is x0: the target verifies them "
    "in the same pass and the longest one that equals its own greedy choices is accepted.\n"
    "\n"
    "**W** = how many guesses run in parallel, **N** = how long each guessed n-gram is, **G** = how many pool"
    " candidates are checked per step. Window guesses give at most N tokens per step; n-grams that occurred "
    "in the prompt or the output are offered with up to 7 tokens of what followed them there (on a small "
    "model that is where most accepted guesses come from). Query tokens per step ≈ W(N−1) + G × candidate "
    "length: bigger is more hits but more compute; the *Sweep* tab shows the trade-off."),
    paper="Fu et al. 2024, Break the Sequential Dependency of LLM Inference Using Lookahead Decoding (arXiv 2402.02057)",
    tuner=TUNER, cli_preset=True,
    presets={"cpu_embedded": {"window": 1, "ngram": 3, "guesses": 2},
             "cpu_default": {"window": 1, "ngram": 3, "guesses": 1},
             "teaching": {"window": 5, "ngram": 4, "guesses": 5}},
    pictures=("mask", "window", "pool", "trajectory"), words=words,
    query_tokens=lambda p: lookahead_query_tokens(p["window"], p["ngram"], p["guesses"], p["text_span"]),
    examples=({"window": 4, "ngram": 3, "guesses": 4}, {"window": 1, "ngram": 3, "guesses": 2},))
