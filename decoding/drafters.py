"""The drafter contract, and the plain greedy baseline as the smallest drafter.

A drafter proposes a step's tree of new tokens (a Plan) and learns from the target's answer (observe).
Everything else (forward pass, mask, KV bookkeeping, verification, stopping, trace) is the runner's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from .verify import Verdict


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
    logits: torch.Tensor | None = field(default=None, repr=False)  # target logits, set by the runner
    hidden_rows: list[int] | None = None  # nodes whose target hidden states the drafter reads (heads)
    hidden_layers: tuple[int, ...] = (-1,)  # which: transformers' hidden_states index (-1 = last, normed)
    hidden: torch.Tensor | None = field(default=None, repr=False)  # [layers, rows, h], set by the runner
    acceptance: str = "exact"         # "typical": Medusa's typical acceptance when sampling (not exact)


class Drafter(Protocol):
    """Optional: `bind(model, sampling)` before a run; `prefill_features(feats)` receives the prompt's
    hidden states (layers `hidden_layers`, all prompt rows) from the prefill forward when the drafter
    has a `hidden_layers` attribute (self-drafting heads)."""
    name: str

    def start(self, prompt_ids: list[int]) -> None: ...

    def plan(self, context: list[int]) -> Plan: ...

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None: ...

    def max_depth(self) -> int: ...


class Greedy:
    """One token per step: the baseline every accelerated method must reproduce exactly."""
    name = "greedy"

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
