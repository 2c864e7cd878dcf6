"""A run's and a step's counts, counted once: every caption, header, view title and slider label reads them.

Why one place: the page said "48 tokens in 48 steps" above a slider reading "step 1 / 47", and a caption
said "accepted 0" beside a pool title "accepted ' V'". Both were right by their own counting (forward
passes with the prefill vs decode steps; guessed tokens vs every new token). Now the words name the same
two numbers everywhere: forward passes = the prefill + the decode steps, and a step's new tokens = the
guessed tokens the model confirmed + its own next token.
"""
from __future__ import annotations

from dataclasses import dataclass

from .common import TraceLike, as_trace


@dataclass(frozen=True)
class RunCounts:
    tokens: int        # new tokens the run produced
    passes: int        # target forward passes: the prefill (if recorded) + the decode steps
    decode_steps: int  # steps after the prefill: the slider reads "step k / decode_steps"
    prefill: bool      # whether the trace recorded its prefill as step 0

    def words(self) -> str:
        """'48 tokens in 48 forward passes (the prefill + 47 decode steps; compression 1.00)'."""
        split = f"the prefill + {self.decode_steps} decode steps" if self.prefill else f"{self.decode_steps} decode steps"
        comp = self.tokens / self.passes if self.passes else 0.0
        return f"{self.tokens} tokens in {self.passes} forward passes ({split}; compression {comp:.2f})"


@dataclass(frozen=True)
class StepCounts:
    new: int      # tokens this step added to the output
    guessed: int  # of them, guesses the model confirmed (window, pool, draft, heads, copy: every origin but its own)
    own: int      # of them, the model's own next token (0 or 1; a cut last step may have none)

    def words(self) -> str:
        """'accepted 2 guessed token(s) + the model's own 1'."""
        return f"accepted {self.guessed} guessed token{'s' if self.guessed != 1 else ''} + {self.own} of the model's own"


def run_counts(trace: TraceLike) -> RunCounts:
    tr = as_trace(trace)
    decode = sum(1 for s in tr.steps if s.kind != "prefill")
    return RunCounts(tokens=len(tr.output_ids), passes=len(tr.steps), decode_steps=decode,
                     prefill=any(s.kind == "prefill" for s in tr.steps))


def step_counts(step) -> StepCounts:
    """Counted from the step's origins: "target" is the model's own token, anything else was guessed."""
    own = sum(1 for o in step.origins if o == "target")
    return StepCounts(new=len(step.accepted), guessed=len(step.accepted) - own, own=own)
