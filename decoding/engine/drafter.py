"""The drafter contract, what tree drafters share, and the plain greedy baseline as the smallest drafter.

A drafter proposes a step's tree of new tokens (a Plan) and learns from the target's answer (observe, with
the Verdict: the accepted path, and the logits and hidden rows the forward produced). Everything else
(forward pass, mask, KV bookkeeping, verification, stopping, trace) is the runner's. What a drafter can do
is data (Abilities), read by the runner, the app and the tuner: nothing probes a drafter's attributes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

import torch

from .verify import Verdict


@dataclass(frozen=True)
class Abilities:
    """What a drafter needs from the runner, declared once (what the app, CLI, tuner and pictures need is its
    MethodSpec's: decoding/methods/spec.py).
    hidden_layers: target hidden states it reads (transformers' hidden_states index, -1 = last, normed):
      the runner hands the prompt's rows to prefill_features() and each step's hidden_rows to observe().
    binds_target: it needs the target itself before the run (a draft to check against it and put on its
      device, the target's vocabulary size or layers, its row costs for adaptive trees): the runner calls
      bind(target, sampling) first. The only way a drafter learns the target's vocabulary.
    wants_tracing: it records trace-only quantities (host transfers) only when told the run is traced
      (the runner sets drafter.tracing).
    acceptance: the verification rule when sampling: "exact" (the target's distribution) or "typical"
      (Medusa's typical acceptance: opted in, labelled NOT exact).
    prefill_logits: it learns from the prompt's forward too: the runner hands the prefill's logits (one row
      per prompt token, the forward it runs anyway) to prefill_logits(logits) after start()."""
    hidden_layers: tuple[int, ...] = ()
    binds_target: bool = False
    wants_tracing: bool = False
    acceptance: str = "exact"
    prefill_logits: bool = False


@dataclass
class Plan:
    tokens: list[int]                 # query tokens; tokens[0] is x0, the last accepted token
    parents: list[int]                # query index of each token's parent (-1 for x0)
    depths: list[int]                 # position offset from x0
    roles: list[str]
    slots: list
    proposal: list[bool]              # nodes the target verifies (others, like the window, are not)
    origin: str = "target"            # origin label of an accepted proposal token
    info: dict = field(default_factory=dict)
    q: torch.Tensor | None = None     # draft probabilities per node (speculative sampling), else None
    rows: list[int] | None = None     # nodes whose logits are read (None = all): the LM head skips the rest
    origins: list[str] | None = None  # per-node origin labels (query-aligned); overrides `origin`
    hidden_rows: list[int] | None = None  # nodes whose target hidden states the drafter reads (heads)


class Drafter(Protocol):
    """The contract. Optional methods, called only where `abilities` says so: bind(model, sampling)
    (binds_target), prefill_features(feats) (hidden_layers: the prompt's hidden states, [layers, rows, h]),
    prefill_logits(logits) (prefill_logits: the prompt's logits, [rows, vocab])."""
    name: str
    abilities: Abilities

    def config(self) -> dict: ...

    def start(self, prompt_ids: list[int]) -> None: ...

    def plan(self, context: list[int]) -> Plan: ...

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None: ...

    def max_depth(self) -> int: ...


def tree_record(tokens: list[int], parents: list[int], depths: list[int], origins: list[str],
                draft_prob: list[float | None], **extra: list) -> dict:
    """A step's drafted tree as the trace keeps it (info["tree"]): one entry per node in parallel arrays,
    draft probabilities rounded to 6 digits; target_prob is filled after verification (None until then)."""
    return {"tokens": list(tokens), "parents": list(parents), "depth": list(depths),
            "draft_prob": [None if x is None else round(x, 6) for x in draft_prob],
            "target_prob": [None] * len(tokens), "origin": list(origins), **extra}


def best_closed(parents: list[int], candidates: Iterable[int], budget: int, key: Callable[[int], tuple]) -> list[int]:
    """Root (node 0) plus the `budget` best candidates by `key` (smallest first), kept only where every
    ancestor below the root was chosen too, in node order. The one selection rule of budgeted trees
    (EAGLE's tree, speculative's dynamic tree): a child never scores above its parent, so dropping a node
    whose ancestor missed the cut keeps the best ancestor-closed set."""
    chosen = set(sorted(candidates, key=key)[:budget])

    def closed(k: int) -> bool:
        p = parents[k]
        while p > 0:
            if p not in chosen:
                return False
            p = parents[p]
        return True

    return [0] + sorted(k for k in chosen if closed(k))


class Greedy:
    """One token per step: the baseline every accelerated method must reproduce exactly."""
    name = "greedy"
    abilities = Abilities()

    @classmethod
    def from_params(cls, **p) -> "Greedy":
        return cls()

    def config(self) -> dict:
        return {}

    def start(self, prompt_ids: list[int]) -> None:
        pass

    def plan(self, context: list[int]) -> Plan:
        return Plan([context[-1]], [-1], [0], ["x0"], [(0, 0)], [False])

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        pass

    def max_depth(self) -> int:
        return 1
