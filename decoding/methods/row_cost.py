"""A drafted tree sized per step from the draft's confidence and the device's row-cost curve.

Why: on a CPU every verified row costs (the default model: about 25 / 35 / 48 / 73 ms a step for 1 / 4 / 8 /
16 rows), and so does every drafting level; a fixed budget verifies 8 rows on a step whose draft is unsure
as on one whose draft is sure. A node whose path probability is p adds p expected tokens (the target accepts
it only if it accepts its whole path) and costs its row; at the run's going rate of r tokens per ms it pays
when p >= r x its row's marginal ms. So each step keeps the prefix of its nodes, best first, that maximises
sum(p) - r x (T(1 + kept) - T(1)) (T the measured curve, which need not be convex), and drafts another
level only when the frontier's total probability (a bound on what the level can add) covers the level's
measured cost plus one more row. r is the run's own tokens per ms so far (with a prior of a few tokens at the
curve's 1-row rate): maximising gain minus r x cost at the best rate is maximising the rate (Dinkelbach).
The run's ms are the curve's: each verified step adds T(its rows), never the clock's reading. A rate timed on
the clock made the same click take different steps (a lesson's prompt lookup: 91 steps in one run, 128 in
the next, as the machine's load moved the rate); priced on the curve, the same curve and prompt give the same
steps every time, and the curve is recorded in the trace (config row_ms) so the sizing can be reproduced.
The draft's probabilities are corrected by how many tokens the verified nodes actually gave against what
their probabilities predicted (clamped), so an over- or under-confident draft is priced by what it delivers.

Only the SIZE of a step's tree depends on the curve; the target verifies it as before, so every greedy output
is still HF greedy's (the exactness tests run it). EAGLE's drafting levels are still timed on `clock` (module
level, so that a test can put a steady clock in): a level's cost is the draft's, which the curve does not hold.
"""
from __future__ import annotations

import time
import weakref

from decoding.methods.spec import knob

PRIOR_TOKENS = 4.0          # the rate starts at the 1-row step's rate, worth this many tokens of evidence
CALIBRATION = (0.25, 4.0)   # the draft's probabilities are scaled by accepted / predicted, within these
SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # rows at which the curve is measured (interpolated between)
_CURVES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
clock = time.perf_counter  # seconds; EAGLE's drafting levels are timed on it (the going rate is the curve's)


def parse_curve(text: str) -> dict[int, float]:
    """'1:24.6,4:35.4,8:48' -> {1: 24.6, 4: 35.4, 8: 48.0}; at least two sizes, one of them 1, ms > 0."""
    try:
        curve = {int(q): float(ms) for q, ms in (part.split(":") for part in str(text).split(",") if part.strip())}
    except ValueError:
        raise ValueError(f"row_ms must look like '1:24.6,4:35.4,8:48' (rows:ms, comma-separated), got {text!r}") from None
    if len(curve) < 2 or 1 not in curve or min(curve) < 1 or min(curve.values()) <= 0:
        raise ValueError(f"row_ms needs the 1-row step and at least one more size, all ms > 0, got {text!r}")
    return curve


def measured_curve(model, max_rows: int) -> dict[int, float]:
    """The model's step ms per row count on this device (engine.timing.latency_curve, kv length 256), measured
    once per model and kept while the model lives (about a second on the default model's CPU)."""
    from ..engine.timing import latency_curve
    sizes = tuple(q for q in SIZES if q <= max(2, max_rows))
    kept = _CURVES.get(model, {})
    if not all(q in kept for q in sizes):
        kept = {**kept, **latency_curve(model, 256, sizes, reps=3, warmup=1)[2]}
        _CURVES[model] = kept
    return {q: kept[q] for q in sizes}


class RowCost:
    """One run's pricing of rows and levels: the curve (made monotone), the going rate and the calibration."""

    def __init__(self, curve: dict[int, float]):
        from ..engine.timing import monotone
        self.curve = monotone({int(q): float(ms) for q, ms in curve.items()})
        self.start()

    def start(self) -> None:
        """A new run: the rate back to the prior, no level timed, the calibration neutral."""
        self.tokens, self.ms, self.last = 0.0, 0.0, None
        self.level_ms: float | None = None
        self.drafted_ms = 0.0  # this step's timed drafting levels (EAGLE only; copies draft for free)
        self.predicted, self.accepted = 0.0, 0.0

    def T(self, rows: int) -> float:
        from ..engine.timing import interpolate
        return interpolate(self.curve, rows)

    def rate(self) -> float:
        """Tokens per ms: what the run has made so far, with the 1-row step's rate as a prior."""
        return (self.tokens + PRIOR_TOKENS) / (self.ms + PRIOR_TOKENS * self.T(1))

    def scale(self) -> float:
        lo, hi = CALIBRATION
        return min(hi, max(lo, (self.accepted + 1.0) / (self.predicted + 1.0)))

    def now(self) -> float:
        """Seconds on the module's clock (read at call time, so a swapped clock takes effect in a bound run)."""
        return clock()

    def tick(self) -> None:
        """Called when a step's drafting starts. The going rate reads no clock (observe adds the curve's ms), so
        the same curve and prompt size every step the same way whatever the machine's load."""
        self.last = self.now()

    def level_took(self, ms: float) -> None:
        """A drafting level's time (EAGLE): it prices the next level and counts in this step's time."""
        self.level_ms = ms if self.level_ms is None else 0.7 * self.level_ms + 0.3 * ms
        self.drafted_ms += ms

    def worth_level(self, frontier_prob: float, rows: int) -> bool:
        """Whether drafting one more level can pay: the frontier's probability bounds what its children add."""
        r = self.rate()
        return frontier_prob * self.scale() >= r * ((self.level_ms or 0.0) + self.T(rows + 1) - self.T(rows))

    def keep(self, probs: list[float]) -> int:
        """How many of the candidates (path probabilities, best first) to verify: the prefix that maximises
        expected tokens minus the going rate x their rows' ms."""
        r, s = self.rate(), self.scale()
        best, best_k, gain = 0.0, 0, 0.0
        base = self.T(1)
        for k, p in enumerate(probs, 1):
            gain += p * s
            v = gain - r * (self.T(1 + k) - base)
            if v > best:
                best, best_k = v, k
        return best_k

    def observe(self, predicted: float, new_tokens: int, rows: int = 1) -> None:
        """A verified step: its kept nodes' summed probability, the tokens it gave (bonus included) and the rows
        it verified (their ms from the curve, plus any timed drafting levels, are the step's time in the going rate)."""
        self.ms += self.T(max(1, int(rows))) + self.drafted_ms
        self.drafted_ms = 0.0
        self.tokens += new_tokens
        self.predicted += predicted
        self.accepted += new_tokens - 1


def priced_for(model, row_ms: dict[int, float] | None, rows: int) -> RowCost:
    """A run's pricing for `model`: the curve given (row_ms), else the one measured once per model up to `rows`."""
    return RowCost(row_ms or measured_curve(model, rows))


def adaptive_flag(adaptive: object, method: str, off: str, on: str) -> bool:
    """The `adaptive` parameter as a bool: 0 or 1 (False or True); anything else is refused in one line that says
    what each value does for `method` (off: without pricing, on: with it)."""
    if adaptive not in (0, 1, True, False):
        raise ValueError(f"{method}: adaptive is 0 ({off}) or 1 ({on})")
    return bool(adaptive)


def priced_copies(method: str, model, sampling, row_ms: dict[int, float] | None, rows: int) -> RowCost:
    """bind() of a drafter that copies deterministic continuations (prompt lookup, retrieval) with adaptive on:
    its prices come from greedy acceptance, so a sampled run is refused in one line."""
    if not sampling.greedy:
        raise ValueError(f"{method}: adaptive prices greedy steps only (drop adaptive when sampling)")
    return priced_for(model, row_ms, rows)


def adaptive_config(cost: RowCost | None) -> dict:
    """What a priced drafter's trace config says: adaptive, and the curve it priced with (None before bind)."""
    return {"adaptive": True,
            "row_ms": {str(q): round(ms, 3) for q, ms in cost.curve.items()} if cost is not None else None}


def adaptive_knob():
    """The `adaptive` parameter of every method whose tree this module prices (EAGLE, retrieval, prompt lookup):
    one flag."""
    return knob(False, shared=True, cli="--adaptive",
                help="eagle / retrieval / prompt lookup: size each step's tree from the draft's confidence "
                     "(retrieval: the continuations' shares; prompt lookup: the run's acceptance per copied "
                     "position) and this device's row-cost curve (--budget / --num-tokens is then the most)")


def row_ms_knob():
    return knob(None, shared=True, help="adaptive: the row-cost curve as rows:ms pairs (\"1:24.6,4:35.4\"; default: measured "
                           "once per model)")
