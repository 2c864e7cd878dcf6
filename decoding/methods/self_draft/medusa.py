"""Medusa as a drafter: heads on the target's last feature guess the next K tokens; the engine verifies a
candidate tree of their top-k in the step's one target forward.

At the step's start the drafter holds the target's feature at the last accepted node (the one whose own
argmax is x0, from the previous forward: no extra target work). Head k (1-based) guesses the token k
positions after x0. The tree keeps the `budget` best nodes by the product of the heads' probabilities
along the path (best-first; a child never scores above its parent, so the tree is ancestor-closed), the
dynamic counterpart of Medusa's hand-made `mc_sim` trees, sized by one number like our other trees.
Greedy: verify.greedy (output = HF greedy). Sampling: the proposals are deterministic tokens, so
verify.sampled keeps the target's distribution. (EAGLE samples its children instead, sampled_tree.py; for
Medusa's flatter heads the top-k tree accepted more at temperature 0.7, 1.49 vs 1.43 tokens per step at
budget 8, and about as much at 1.0, 1.28 vs 1.35.) Medusa's "typical acceptance" (acceptance="typical",
sampling only) is offered as an opt-in that is NOT exact: verify.typical, labelled in the trace config.
"""
from __future__ import annotations

from dataclasses import dataclass
import heapq
import time

import torch

from decoding.engine.drafter import Plan, tree_record
from decoding.methods.self_draft.heads import CONFIDENCE, HeadsDrafter, load_drafting
from decoding.engine.sampling import Sampling
from decoding.engine.verify import Verdict
from decoding.methods.self_draft.heads import (acceptance_knob, budget_knob, check_acceptance, check_sampling,
                                             cut_knob, draft_vocab_knob, heads_knob, heads_plan, prepare_heads)
from decoding.methods.tree_verdict import record_verdict
from decoding.methods.spec import MethodSpec, knob
from decoding.methods.self_draft.heads_tune import TUNER


class Medusa(HeadsDrafter):
    name = "medusa"

    def __init__(self, heads: str, budget: int = 12, branch: int = 4, draft_vocab: int | None = None,
                 confidence: float = CONFIDENCE, acceptance: str = "exact"):
        if budget < 1 or branch < 1 or (draft_vocab or 0) < 0 or not 0 <= confidence < 1:
            raise ValueError("medusa: budget and branch must be >= 1, draft_vocab >= 0, confidence in [0, 1)")
        self.acceptance = check_acceptance(acceptance)
        self.path, self.budget, self.branch, self.draft_vocab = str(heads), int(budget), int(branch), draft_vocab
        self.confidence = float(confidence)  # nodes whose path probability is below it are not verified
        self.module = None
        self.feat: torch.Tensor | None = None

    def config(self) -> dict:
        return {"heads": self.path, "budget": self.budget, "branch": self.branch, "confidence": self.confidence,
                "acceptance": self.acceptance,
                "n_heads": None if self.module is None else len(self.module.blocks),
                "draft_vocab": self.draft.size if self.module is not None else self.draft_vocab}

    def bind(self, model, sampling: Sampling) -> None:
        check_acceptance(self.acceptance, sampling)
        if self.module is None or self._model is not model:
            self.module, self.cfg, self.draft = load_drafting(self.path, model, "medusa", self.draft_vocab)
            self._model = model

    def max_depth(self) -> int:
        return 1 + (len(self.module.blocks) if self.module is not None else 8)

    def start(self, prompt_ids: list[int]) -> None:
        self.feat = None

    def prefill_features(self, feats: torch.Tensor) -> None:
        self.feat = feats[0, -1]

    @torch.inference_mode()
    def plan(self, context: list[int]) -> Plan:
        t0 = time.perf_counter()
        if self.feat is None:  # no feature yet (a run resumed without prefill): one plain step fetches it
            return Plan([context[-1]], [-1], [0], ["x0"], [[0, 0]], [False], hidden_rows=[0],
                        info={"drafted": False})
        tp, tt = self.draft.topk(self.module.features(self.feat), self.branch)  # [K heads][branch]: one transfer
        nodes = [(context[-1], -1, 0, None, 1.0, None)]  # token, parent, depth, prob, score, rank
        heap = [(-tp[0][r], 0, r) for r in range(len(tp[0]))]
        heapq.heapify(heap)
        while heap and len(nodes) <= self.budget and -heap[0][0] >= self.confidence:  # best-first: the rest is lower
            neg, parent, r = heapq.heappop(heap)
            d = nodes[parent][2] + 1
            nodes.append((tt[d - 1][r], parent, d, tp[d - 1][r], -neg, r))
            if d < len(tp):
                i = len(nodes) - 1
                for r2 in range(len(tp[d])):
                    heapq.heappush(heap, (neg * tp[d][r2], i, r2))
        toks, parents, depths = [x[0] for x in nodes], [x[1] for x in nodes], [x[2] for x in nodes]
        origins = ["target"] + [f"head {d}" for d in depths[1:]]
        info = {"tree": tree_record(toks, parents, depths, origins, [x[3] for x in nodes],
                                    head=[None] + depths[1:], rank=[None] + [x[5] for x in nodes[1:]]),
                "drafted": True, "draft_ms": (time.perf_counter() - t0) * 1e3, "target_forwards": 1,
                "mode": "medusa"}
        return heads_plan(toks, parents, depths, origins, info)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        self.feat = verdict.hidden[0, verdict.path[-1]]
        record_verdict(plan, verdict, self.tracing)


@dataclass
class MedusaParams:
    heads: object = heads_knob()
    budget: int = budget_knob(12)
    # not heads.py's: eagle's branch is the children of an expanded node, Medusa's the top-k of each head
    branch: int = knob(4, shared=True, lo=1, hi=64, help="top-k of each head")
    draft_vocab: int = draft_vocab_knob()
    confidence: float = cut_knob()
    acceptance: str = acceptance_knob()


SPEC = MethodSpec(
    name="medusa", drafter=Medusa, params=MedusaParams, label="Medusa", colour="#00695c",
    summary="small heads on the target's last hidden state guess the next tokens; their best nodes form a tree",
    explain=(
    "**Medusa** drafts with the target itself: small heads on its last hidden state guess the next tokens "
    "(head k: k tokens after the last accepted one, read through the target's own LM head). The best nodes of"
    " their top-k, by the product of the heads' probabilities, form a tree the target checks in one forward. "
    "The tree view labels each node with its head and rank; greedy output equals the target's own."),
    paper="Cai et al. 2024, Medusa (arXiv 2401.10774)",
    needs=("heads",), prepare=prepare_heads("medusa"), tuner=TUNER,
    presets={"cpu_embedded": {"budget": 4, "confidence": 0.1}, "cpu_default": {"budget": 4, "confidence": 0.1}},
    pictures=("mask", "tree", "heads"),
    query_tokens=lambda p: p["budget"] + 1,  # x0 and the budget's best nodes
    capabilities=("typical_acceptance",), check_sampling=check_sampling,
    examples=({"budget": 8},))
