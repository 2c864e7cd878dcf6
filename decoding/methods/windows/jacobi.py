"""Jacobi decoding (Santilli et al. 2023, arXiv 2305.10427): guess a block of K future tokens, run the
block through the model in ONE forward (a chain under x0), and replace every guess by the model's argmax
at the position before it. Repeat. Exact by construction: the guesses the model agrees with (the longest
prefix equal to its argmax chain) are accepted, plus its own next token, so the output is greedy's.

Why it is in DecodeScope: on real models a Jacobi step rarely fixes more than one token (a guess made
from a wrong left context is usually wrong), which is the lesson lookahead decoding starts from: keep
the n-grams the trajectories produce instead of waiting for the block to converge. The trace records
every position's guess per iteration (step.info["jacobi"]) so viz/steps/trajectory.py can draw it.

Initial guesses: K tokens drawn from the prompt with a seeded RNG, as lookahead's window starts (the
paper uses pad tokens for encoder-decoder MT; many decoder-only LMs have no pad token, and a prompt
token is at least a plausible token). After a step that accepts k guesses, the unaccepted positions
keep the model's updated argmax (shifted by k + 1, as the paper's block slides: the K + 1 outputs of
a step cover one position past the block), and the k positions that open at its end get fresh
initial guesses.

Sampling: the runner verifies the block with verify.sampled (multi-candidate rejection with
point-mass proposals, as for lookahead), which draws every token from exactly the target's warped
distribution whatever the guesses are; the guesses stay the argmax iterates.
"""
from __future__ import annotations

from dataclasses import dataclass
import random

from decoding.engine.drafter import Abilities, Plan
from decoding.engine.masks import chain_parents
from decoding.engine.verify import Verdict
from decoding.params import LIMITS
from decoding.methods.spec import MethodSpec, knob
from decoding.methods.windows.jacobi_tune import TUNER


class Jacobi:
    name = "jacobi"
    abilities = Abilities()

    @classmethod
    def from_params(cls, **p) -> "Jacobi":
        return cls(p.get("block", 8), p.get("seed", 0))

    def __init__(self, block: int = 8, seed: int = 0):
        if not isinstance(block, int) or isinstance(block, bool) or block < 1:
            raise ValueError(f"jacobi needs block >= 1, got {block}")
        self.K, self.seed = block, seed

    def config(self) -> dict:
        return {"block": self.K, "seed": self.seed, "init": "prompt tokens"}

    def max_depth(self) -> int:
        return self.K + 1  # K guesses after x0, plus the model's own next token

    def start(self, prompt_ids: list[int]) -> None:
        self.rng = random.Random(self.seed)
        self.prompt = list(prompt_ids)
        self.guesses = self._init(self.K)
        self.fresh = [True] * self.K  # which guesses are initial (never updated by the model yet)

    def _init(self, n: int) -> list[int]:
        return [self.rng.choice(self.prompt) for _ in range(n)]

    def plan(self, context: list[int]) -> Plan:
        """Query = [x0, g_1 .. g_K] as one causal chain; every guess is a proposal the target verifies."""
        k = self.K
        tokens = [context[-1]] + list(self.guesses)
        info = {"jacobi": {"guesses": list(self.guesses), "fresh": list(self.fresh)}}
        return Plan(tokens, chain_parents(k + 1), list(range(k + 1)), ["x0"] + ["jacobi"] * k,
                    [[0, i] for i in range(k + 1)], [False] + [True] * k, origin="jacobi", info=info)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        """preds[i] is the model's argmax after query node i: the Jacobi update of guess i + 1 (and
        preds[K] a new guess one position past the block). Slide the block past the accepted tokens."""
        k = len(verdict.path) - 1              # guesses accepted this step
        updated = preds[:self.K + 1]           # the whole updated block, x0's prediction first
        keep = updated[k + 1:]                 # positions after the bonus token: still unverified
        opened = self.K - len(keep)
        self.guesses = keep + self._init(opened)
        self.fresh = [False] * len(keep) + [True] * opened
        plan.info["jacobi"].update(updated=list(updated), accepted=k, next=list(self.guesses))


@dataclass
class JacobiParams:
    block: int = knob(8, lo=LIMITS["block"][0], hi=LIMITS["block"][1], cli="--block", ui=True, label="K block",
                      help="jacobi: guesses refined per step, K (default 8)")
    seed: int = knob(0, lo=0, hi=2**31 - 1, help="seed of the first guesses' draw (from the prompt's tokens)")


def words(c: dict) -> str:
    return f"jacobi · block {c.get('block')} · initial guesses: {c.get('init', 'prompt tokens')}"


SPEC = MethodSpec(
    name="jacobi", drafter=Jacobi, params=JacobiParams, label="Jacobi", colour="#6b8e23",
    summary="a block of K guesses refined by fixed-point iteration, one forward per step",
    explain=(
    "### Jacobi decoding\n"
    "Santilli et al. 2023 (*Accelerating Transformer Inference for Translation via Parallel Decoding*, arXiv "
    "2305.10427): guess the next **K** tokens at once (**block**), run the whole block through the model in "
    "**one** forward pass, and replace every guess by the model's own choice at that position — a fixed-point"
    " (Jacobi) iteration. The guesses the model agrees with, from the left, are accepted plus its own next "
    "token, so the output is exactly greedy's; the rest of the updated block becomes the next guesses (the "
    "first guesses are prompt tokens).\n"
    "\n"
    "The *trajectory* view shows why it rarely pays on real models: a guess made from a wrong left context is"
    " usually wrong, so the block converges about one position per step (compression near 1.0). Run "
    "**lookahead** on the same prompt and compare its trajectory: lookahead keeps the n-grams its window "
    "produces and checks them later, which is where its 2x comes from."),
    paper="Santilli et al. 2023, Accelerating Transformer Inference for Translation via Parallel Decoding "
          "(arXiv 2305.10427)",
    tuner=TUNER,
    # teaching: the lesson's block of 5 (a block of 1 is one guess: nothing to see)
    presets={"cpu_embedded": {"block": 2}, "cpu_default": {"block": 1}, "teaching": {"block": 5}},
    pictures=("mask", "trajectory"), words=words,  # the trajectory view draws the block (no lookahead window)
    query_tokens=lambda p: p["block"] + 1,  # x0 and the block's guesses
    no_acceptance=("its fixed-point guesses never settled on this model's tokens (each guess is the model's "
                   "answer after the wrong guess before it); try --method lookahead, which also drafts n-grams "
                   "its window and the text produced, or prompt_lookup, or --block 1, the cheapest step"),
    examples=({"block": 4},))
