"""Token Recycling (Luo et al. 2024, "Turning Trash into Treasure", arXiv 2408.08696): the target's own
verification logits, usually thrown away after the argmax, are kept as an adjacency matrix holding each
token's top-k successors; every step drafts a fixed tree breadth-first from the last token through it, and
the step's logits update it. Training-free, no second model, nothing stored but k ids per token seen.

The tree is one template chosen once (the paper's static, imbalanced tree): node (rank r under a parent)
weighs 1/(r+1) times its parent, and the `nodes` heaviest nodes up to `levels` deep are kept (a child never
outweighs its parent, so the set is a tree). Drafting fills it: a node's token is its parent token's r-th
recycled successor; a token with no row yet leaves its subtree out. Exact in greedy mode like every drafter
(the verifier keeps only the target's argmax chain); sampling verifies the point-mass proposals with the
target's warped distribution, so the output keeps it.

keep: the matrix survives start(), so a drafter passed to run(drafter=...) again starts from what earlier runs
saw (a session's runs). seed_prefill: the rows of the prompt's tokens come from the prefill's logits (the
forward the engine runs anyway: Abilities(prefill_logits=True)). The trace records, per drafted node, the step
whose logits recycled it (info["tree"]["from_step"]: 0 = the prompt's forward, None = an earlier run).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from decoding.engine.drafter import Abilities, Plan, tree_record
from decoding.engine.verify import Verdict
from decoding.methods.spec import MethodSpec, knob
from decoding.params import MAX_TREE_NODES


def template(successors: int, nodes: int, levels: int) -> list[tuple[int, int]]:
    """(parent template index, rank) per node, root excluded (-1 = the root), parents first: the `nodes`
    heaviest nodes, a node weighing prod 1/(rank+1) along its path (ties: shallower, then earlier)."""
    out: list[tuple[int, int]] = []
    heap = [(-1.0 / (r + 1), 1, r, -1, r) for r in range(successors)]  # (-weight, depth, order, parent, rank)
    heapq.heapify(heap)
    order = successors
    while heap and len(out) < nodes:
        w, depth, _, parent, rank = heapq.heappop(heap)
        out.append((parent, rank))
        if depth < levels:
            me = len(out) - 1
            for r in range(successors):
                heapq.heappush(heap, (w / (r + 1), depth + 1, order, me, r))
                order += 1
    return out


class TokenRecycling:
    name = "token_recycling"
    abilities = Abilities(prefill_logits=True)

    @classmethod
    def from_params(cls, **p) -> "TokenRecycling":
        return cls(p.get("successors", 8), p.get("nodes", 32), p.get("levels", 6), keep=p.get("keep", False),
                   seed_prefill=p.get("seed_prefill", True))

    def __init__(self, successors: int = 8, nodes: int = 32, levels: int = 6, keep: bool = False,
                 seed_prefill: bool = True):
        self.k, self.nodes, self.levels = successors, nodes, levels
        self.keep, self.seed_prefill = bool(keep), bool(seed_prefill)
        self.shape = template(successors, nodes, levels)
        self.rows: dict[int, list[int]] = {}   # token -> its top-k successors, last seen
        self.src: dict[int, tuple[int, int]] = {}  # token -> (run, step) whose logits wrote its row
        self.run = 0

    def config(self) -> dict:
        # read before the run starts (the trace's config): the rows this run starts from
        return {"successors": self.k, "nodes": self.nodes, "levels": self.levels, "keep": self.keep,
                "seed_prefill": self.seed_prefill, "rows_at_start": len(self.rows) if self.keep else 0}

    def max_depth(self) -> int:
        return self.levels + 1

    def start(self, prompt_ids: list[int]) -> None:
        if not self.keep:
            self.rows, self.src = {}, {}
        self.run += 1
        self.step = 0
        self.prompt = list(prompt_ids)

    def prefill_logits(self, logits: torch.Tensor) -> None:
        """The prompt's forward: row i holds the successors of prompt token i (the runner's prefill)."""
        if self.seed_prefill:
            self._recycle(self.prompt, logits)

    def _recycle(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Each token's row becomes the top-k of the logits that followed it (a later occurrence wins)."""
        if not tokens:
            return
        top = logits[:len(tokens)].topk(min(self.k, logits.shape[-1]), dim=-1).indices.tolist()
        for t, row in zip(tokens, top):
            self.rows[t] = row
            self.src[t] = (self.run, self.step)

    def plan(self, context: list[int]) -> Plan:
        """The template filled breadth-first from x0 through the matrix; a node whose parent token has no row
        (or a shorter one) is left out with its subtree."""
        self.step += 1
        tokens, parents, depths, came = [context[-1]], [-1], [0], [None]
        at = [-1] * len(self.shape)  # template node -> query index (-1: left out)
        for i, (tp, rank) in enumerate(self.shape):
            q = 0 if tp < 0 else at[tp]
            if q < 0:
                continue
            row = self.rows.get(tokens[q])
            if row is None or rank >= len(row):
                continue
            at[i] = len(tokens)
            tokens.append(row[rank])
            parents.append(q)
            depths.append(depths[q] + 1)
            run, step = self.src[tokens[q]]
            came.append(step if run == self.run else None)
        n = len(tokens) - 1
        info = {"tree": tree_record(tokens, parents, depths, ["target"] + ["recycled"] * n, [None] * (n + 1),
                                    from_step=came)}
        return Plan(tokens, parents, depths, ["x0"] + ["draft"] * n, [[i, d] for i, d in enumerate(depths)],
                    [False] + [True] * n, origin="recycled", info=info)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        """The step's logits (every query node's row) refresh the rows of the step's tokens; the tree record
        gets the accepted path and the target's probability of each drafted token."""
        path = verdict.path
        kids = [i for i in range(1, len(plan.tokens)) if plan.parents[i] == path[-1]]
        plan.info["accepted_path"], plan.info["first_rejected"] = list(path), kids[0] if kids else None
        if verdict.logits is None:
            return
        logits = verdict.logits
        if len(plan.tokens) > 1:
            p = logits[plan.parents[1:]].float().softmax(-1)
            idx = torch.tensor(plan.tokens[1:], dtype=torch.long, device=p.device)[:, None]
            plan.info["tree"]["target_prob"] = [None] + [round(x, 6) for x in p.gather(-1, idx)[:, 0].tolist()]
        self._recycle(plan.tokens, logits)


@dataclass
class TokenRecyclingParams:
    successors: int = knob(8, lo=1, hi=32, cli="--successors", ui=True, label="successors kept per token",
                           help="token recycling: top-k successors the matrix keeps per token (default 8)")
    nodes: int = knob(32, lo=1, hi=MAX_TREE_NODES, cli="--recycle-nodes", ui=True, label="tree nodes",
                      help="token recycling: drafted tree nodes per step, at most (default 32)")
    levels: int = knob(6, lo=1, hi=16, cli="--recycle-levels", label="tree depth",
                       help="token recycling: deepest drafted level (default 6)")
    keep: bool = knob(False, help="keep the matrix across runs of this drafter (run(drafter=...) again)")
    seed_prefill: bool = knob(True, help="seed the matrix from the prompt's forward (the prefill's logits)")


def words(c: dict) -> str:
    line = f"token recycling · top-{c.get('successors')} successors · {c.get('nodes')} nodes · depth {c.get('levels')}"
    if c.get("keep"):
        line += f" · matrix kept ({c.get('rows_at_start', 0)} rows at start)"
    return line


SPEC = MethodSpec(
    name="token_recycling", drafter=TokenRecycling, params=TokenRecyclingParams, label="token recycling",
    colour="#6a3d9a",
    summary="each token's top-k successors from earlier verification logits, drafted as a fixed tree",
    explain=(
    "### Token Recycling\n"
    "Luo et al. 2024 (*Turning Trash into Treasure*, arXiv 2408.08696): every forward pass computes the "
    "model's scores for *every* token it reads, and decoding throws all but the best away. Token Recycling "
    "keeps them: for each token it has seen, the **successors** it scored highest last time, in a table. Each "
    "step it drafts a fixed tree from the last token through that table (its best successors, then theirs, "
    "up to **tree nodes** nodes), the model checks the whole tree in one forward, and that forward's scores "
    "refresh the table. No second model, no training; the prompt's own forward fills the first rows.\n"
    "\n"
    "The *tree* view colours recycled nodes violet and says which earlier step's scores proposed each one."),
    paper="Luo et al. 2024, Turning Trash into Treasure: Accelerating Inference of Large Language Models with "
          "Token Recycling (arXiv 2408.08696)",
    presets={"cpu_embedded": {"nodes": 8, "levels": 4}, "cpu_default": {"nodes": 8, "levels": 4},
             "teaching": {"successors": 4, "nodes": 16, "levels": 4}},
    pictures=("mask", "tree"), words=words,
    query_tokens=lambda p: p["nodes"] + 1,  # the tree's nodes and x0
    origins={"recycled": ("#e060f0", "recycled successor (an earlier step's scores)")},
    examples=({"successors": 4, "nodes": 12, "levels": 4}, {"successors": 2, "nodes": 6, "levels": 6,
                                                           "seed_prefill": False}))
