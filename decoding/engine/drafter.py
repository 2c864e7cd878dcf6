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
    """One step's query: a tree under x0, every list indexed by query index (0 = x0). Node i sits at position
    kv_len + depths[i] and attends to its ancestors (parents) and the cache; the target's logits row i is its
    prediction for the token after node i, so a node is accepted when its parent is and its token equals that
    prediction (decoding/engine/verify.py). max(depths) + 1 must not exceed the drafter's max_depth()."""
    tokens: list[int]                 # query tokens; tokens[0] is x0, the last accepted token
    parents: list[int]                # query index of each token's parent (-1 for x0); a parent comes first
    depths: list[int]                 # position offset from x0 (x0 0, a child one more than its parent)
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
    prefill_logits(logits) (prefill_logits: the prompt's logits, [rows, vocab]).

    The runner's order per run: max_depth(), start(prompt), then per step plan(context) -> one target forward
    -> verification -> observe(plan, preds, verdict, context); config() when the trace is written."""
    name: str
    abilities: Abilities

    def config(self) -> dict:
        """Every value the run used, as JSON (the trace's config)."""

    def start(self, prompt_ids: list[int]) -> None:
        """A new run on these prompt tokens (the prefill has run; its first new token is not among them)."""

    def plan(self, context: list[int]) -> Plan:
        """The step's query. context: the prompt and every token accepted so far (the runner's own list,
        appended in place: read it, never change it); context[-1] is x0, the last accepted token, which the
        cache does not hold yet and the plan's tokens[0] must be."""

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        """Learn from the target's answer to `plan` (MethodSpec.learns says whether a method does).
        preds[i]: the target's argmax after query node i (also when sampling, where acceptance draws instead).
        verdict.path: query indices (into plan.tokens) of x0 and the accepted nodes, root first, each the
        parent of the next; verdict.tokens: the accepted proposals then the target's own next token (the next
        x0); verdict.logits / verdict.hidden: the step's logits (rows as plan.rows) and hidden rows.
        context: already extended by verdict.tokens (cut short where the run stops: EOS or the limit). A tree drafter records info["accepted_path"] (the path)
        and info["first_rejected"] (the query index of the first child of the path's last node, the node the
        target turned down; None when it had none) for the tree view: decoding/methods/tree_verdict.py."""

    def max_depth(self) -> int:
        """How far past x0 one step reaches: the deepest node a plan may hold plus the target's next token
        (max(plan.depths) + 1 at most). Callers check the model's positions against it before the run, and
        the runner refuses a deeper plan."""


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
