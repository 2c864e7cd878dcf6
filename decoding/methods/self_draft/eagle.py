"""EAGLE as a drafter: a one-layer head drafts at the feature level, the engine verifies its tree.

The head reads pairs [embedding of token t+1; the target's feature at t] and predicts the feature at t+1;
the target's (frozen, shared) LM head turns a feature into a token distribution. Real features come from
the target's verification forward (the Core's hidden-state seam: no second target forward): after each
step the accepted nodes' features become "catch-up" pairs for the head's own KV cache. Drafting then runs
the head on its own predicted features, level by level (one head forward per depth, the `beam` best
frontier nodes at once), and the tree keeps the `budget` best nodes by cumulative draft probability:
EAGLE-2's dynamic tree. The head's KV cache keeps only real-feature pairs; tree nodes are dropped after
every step (their features were guesses). The layer runs through eagle_layer.EagleLayer (own KV tensors,
no per-call set-up) and drafts read the target's LM head restricted to its frequent tokens (heads.DraftLM).
`confidence` > 0 drops nodes whose path probability is below it (fewer verified rows: a CPU pays for
each). Greedy: verify.greedy. Sampling: each expanded node's children are drawn from the head's distribution and
verified by verify.speculative (sampled_tree.py), so the target's distribution is kept; acceptance="typical"
opts into Medusa's typical acceptance on the deterministic tree (not exact). adaptive=1 (greedy only) sizes
each step's tree from the draft's confidence and the device's row-cost curve (row_cost.py; row_ms gives the
curve, else it is measured once per model): budget and depth become upper bounds.
EAGLE-3 heads (a card listing eagle.fuse, Li et al. 2025): the drafter's abilities ask the runner for those
hidden states of the same verification forward, and the head's fuse layer turns them into the real feature
(EagleHead.feature); everything after that is the same drafting.
"""
from __future__ import annotations

from dataclasses import dataclass
import time

import torch
from decoding.engine.drafter import Plan, best_closed, tree_record
from decoding.methods.self_draft.eagle_layer import EagleLayer
from decoding.methods.self_draft.heads import CONFIDENCE, HeadsDrafter, load_drafting
from decoding.engine.masks import chain_parents, grow_level, step_mask
from decoding.methods.tree_verdict import record_verdict
from decoding.methods.row_cost import (RowCost, adaptive_config, adaptive_flag, adaptive_knob, parse_curve,
                                      priced_for, row_ms_knob)
from decoding.methods.sampled_tree import draw, q_rows, sampled_shape
from decoding.engine.sampling import Sampling, draw_children, make_generator, warp
from decoding.fast.uploads import Uploads
from decoding.engine.verify import Verdict
from decoding.methods.self_draft.heads import (acceptance_knob, budget_knob, check_acceptance, check_sampling,
                                             cut_knob, draft_vocab_knob, fused_layers, heads_knob, heads_plan,
                                             prepare_heads)
from decoding.methods.spec import MethodSpec, knob
from decoding.methods.self_draft.heads_tune import TUNER


def tree_shape(budget: int) -> tuple[int, int]:
    """(depth, beam) that suit a tree of `budget` nodes, so that one number sizes the tree (the tuner's,
    the app's and the sweep's knob). Why: drafting costs one head call per level and `beam` rows per call,
    and nodes beyond the budget are drafted for nothing. Measured with bench/methods/eagle_shapes.py on held-out
    code prompts (CPU): budget 4 at depth 3 / beam 1 was the fastest shape of its size, 16 at depth 6 /
    beam 2 kept beam 4's tokens per step (3.17 vs 3.19) for half the rows."""
    return min(8, 2 + budget // 4), 1 if budget <= 8 else 2


class Eagle(HeadsDrafter):
    name = "eagle"

    def __init__(self, heads: str, budget: int = 16, depth: int | None = None, branch: int = 4,
                 beam: int | None = None, draft_vocab: int | None = None, confidence: float = CONFIDENCE,
                 acceptance: str = "exact", adaptive: int = 0, row_ms: str | None = None):
        shape = tree_shape(budget)
        depth, beam = shape[0] if depth is None else depth, shape[1] if beam is None else beam
        if min(budget, depth, branch, beam) < 1 or (draft_vocab or 0) < 0 or not 0 <= confidence < 1:
            raise ValueError("eagle: budget, depth, branch and beam must be >= 1, draft_vocab >= 0, "
                             "confidence in [0, 1)")
        self.confidence = float(confidence)
        self.acceptance = check_acceptance(acceptance)
        self.path, self.budget, self.depth, self.branch, self.beam = str(heads), budget, depth, branch, beam
        self.draft_vocab = draft_vocab
        self.adaptive = adaptive_flag(adaptive, "eagle", "a fixed budget", "sized per step from the row-cost curve")
        self.row_ms = parse_curve(row_ms) if row_ms else None  # refused here, before any model loads
        self.cost: RowCost | None = None
        self.module = None
        self.hidden_layers = fused_layers(self.path)  # what the runner hands over (bind checks the card)

    def config(self) -> dict:
        return {"heads": self.path, "budget": self.budget, "depth": self.depth, "branch": self.branch,
                "beam": self.beam, "confidence": self.confidence, "acceptance": self.acceptance,
                "draft_vocab": self.draft.size if self.module is not None else self.draft_vocab,
                **(adaptive_config(self.cost) if self.adaptive else {})}

    def bind(self, model, sampling: Sampling) -> None:
        check_acceptance(self.acceptance, sampling)
        # exact sampling: children drawn from the head's distribution (sampled_tree.py); a stream of its own
        self.sampling = sampling
        self.gen = None if sampling.greedy or self.acceptance == "typical" else \
            make_generator(Sampling(seed=sampling.seed + 7919))
        if self.module is None or self._model is not model:
            self.module, self.cfg, self.draft = load_drafting(self.path, model, "eagle", self.draft_vocab)
            self.layer, self._model = EagleLayer(self.module), model
            self.uploads = Uploads(self.module.fc.weight.device)  # masks travel pinned, non-blocking
        self.hidden_layers = tuple(self.cfg["eagle"].get("fuse") or (-1,))  # as load_heads checked them
        self.emb = model.get_input_embeddings()
        if self.adaptive:
            if not sampling.greedy or self.acceptance != "exact":
                raise ValueError("eagle: adaptive sizes greedy trees only (its sampled trees keep a fixed shape)")
            self.cost = priced_for(model, self.row_ms, self.budget + 1)

    def max_depth(self) -> int:
        return self.depth + 1

    def start(self, prompt_ids: list[int]) -> None:
        self.layer.reset()
        if self.cost is not None:
            self.cost.start()
        self.n = 0                      # real-feature pairs in the head's cache (positions 0..n-1)
        self.pending: list[torch.Tensor] = []  # real target features of positions n, n+1, ...

    def prefill_features(self, feats: torch.Tensor) -> None:
        self.pending = [self.real_features(feats)]

    @torch.inference_mode()
    def real_features(self, states: torch.Tensor) -> torch.Tensor:
        """The head's real features [rows, h] from the target's hidden states [layers, rows, h] of this
        drafter's hidden_layers: the last state itself, or an EAGLE-3 head's fusion of its layers."""
        if states.shape[0] != len(self.hidden_layers):
            raise RuntimeError(f"eagle: the target handed {states.shape[0]} hidden state(s), the head reads "
                               f"{len(self.hidden_layers)} (layers {list(self.hidden_layers)}): pass the "
                               "drafter's abilities.hidden_layers to the forward")
        if self.module.fuse is None:
            return states[0]
        return self.module.feature(states.transpose(0, 1))

    def _run(self, toks: list[int], feats: torch.Tensor, parents: list[int], depths: list[int],
             first: int) -> torch.Tensor:
        """Head forward of new region nodes (parents index the region; -1 = the real pairs only)."""
        dev = feats.device
        io = self.uploads.longs([toks, [d + self.n for d in depths]])  # ids and positions, one upload
        mask = step_mask(parents, self.n, feats.dtype, dev, first=first, upload=self.uploads.upload)[0, 0]
        return self.layer(self.emb(io[0]), feats, io[1], mask, top=self.n + max(depths))

    @torch.inference_mode()
    def plan(self, context: list[int]) -> Plan:
        t0 = time.perf_counter()
        cost = self.cost
        if cost is not None:
            cost.tick()
        feats = torch.cat(self.pending) if self.pending else None
        L = len(context)
        if feats is None or self.n + len(feats) != L - 1:
            raise RuntimeError("eagle: the target's features do not cover the accepted text")
        # catch-up: pairs [emb(context[i + 1]); f_i] for i = n .. L-2 (the last one carries x0)
        m = len(feats)
        out = self._run(context[self.n + 1:], feats, chain_parents(m), list(range(m)), 0)
        self.n += m  # real-feature pairs stay in the head's cache; the tree's rows are dropped below
        self.pending = []
        # tree: nodes (token, parent, depth, prob, score, rank, predicted feature of the node's position)
        nodes = [[context[-1], -1, 0, None, 1.0, None]]
        feat_of = {0: out[-1]}  # node -> predicted feature at its position (what its children read)
        frontier, region_parent, level_rows = [0], {}, 0
        forwards, q_of, t_level = 1, {}, None
        kids, depth = (self.branch, self.depth) if self.gen is None else sampled_shape(self.budget, self.depth,
                                                                                          self.beam)
        # levels chained on the device: greedy on CUDA; sampled (draws from host uniforms) on every device,
        # one algorithm, so a seed gives the same text on CPU and CUDA
        on_device = _device_draft(out.device) if self.gen is None else _device_draft(None)
        if on_device:
            nodes, forwards, q_of = self._device_tree(out[-1], context[-1], kids, depth)
        for d in range(1, 1 if on_device else depth + 1):  # the level-by-level tree (a host read per level)
            x = torch.stack([feat_of[i] for i in frontier])
            if self.gen is None:
                tp, tt = self.draft.topk(x, kids)
            else:  # sampled children, as many per node whatever they turn out to be (exact: sampled_tree.py)
                q = self.draft.dist(x, self.sampling)
                tt = [draw(q[j], kids, self.gen) for j in range(len(frontier))]
                tp = [q[j, t].tolist() for j, t in enumerate(tt)]
                q_of.update({i: q[j] for j, i in enumerate(frontier)})
            if cost is not None and t_level is not None:  # a level: its head forward and its top-k
                cost.level_took((cost.now() - t_level) * 1e3)
            new = []
            for j, i in enumerate(frontier):
                for r in range(len(tt[j])):
                    nodes.append([tt[j][r], i, d, tp[j][r], nodes[i][4] * tp[j][r], r])
                    new.append(len(nodes) - 1)
            if d == depth:
                break
            frontier = [k for k in sorted(new, key=lambda k: -nodes[k][4])[:self.beam]
                        if nodes[k][4] >= self.confidence]
            if not frontier:  # every path below the cut-off: no deeper level is worth a head call
                break
            if cost is not None and not cost.worth_level(sum(nodes[k][4] for k in frontier),
                                                         1 + min(self.budget, len(nodes) - 1)):
                break  # what the frontier's children could add does not pay for the level and a row
            t_level = cost.now() if cost is not None else None
            # one head forward for the frontier: pair [emb(node token); predicted feature of its parent]
            parents = [region_parent.get(nodes[k][1], -1) for k in frontier]
            for j, k in enumerate(frontier):
                region_parent[k] = level_rows + j
            level_rows += len(frontier)
            pf = torch.stack([feat_of[nodes[k][1]] for k in frontier])
            allp = self._region_parents + parents if d > 1 else parents
            self._region_parents = allp
            outs = self._run([nodes[k][0] for k in frontier], pf, allp, [nodes[k][2] - 1 for k in frontier],
                             len(allp) - len(frontier))
            forwards += 1
            for j, k in enumerate(frontier):
                feat_of[k] = outs[j]
        self.layer.truncate(self.n)
        self._region_parents = []
        budget = self.budget
        if cost is not None:  # how many of the best nodes pay for their rows at the run's going rate
            ranked = sorted((nodes[k][4] for k in range(1, len(nodes)) if nodes[k][4] >= self.confidence),
                            reverse=True)[:budget]
            budget = cost.keep(ranked)
        keep = _best(nodes, budget, self.confidence) if self.gen is None else list(range(len(nodes)))
        remap = {old: new for new, old in enumerate(keep)}
        sel = [nodes[k] for k in keep]
        n = len(sel)
        toks = [x[0] for x in sel]
        parents = [-1] + [remap[x[1]] for x in sel[1:]]
        depths = [x[2] for x in sel]
        origins = ["target"] + ["eagle draft"] * (n - 1)
        info = {"tree": tree_record(toks, parents, depths, origins, [x[3] for x in sel],
                                    rank=[None] + [x[5] for x in sel[1:]]),
                "drafted": True if cost is None else n > 1, "draft_forwards": forwards, "draft_ms": (time.perf_counter() - t0) * 1e3,
                "target_forwards": 1, "mode": "eagle"}
        return heads_plan(toks, parents, depths, origins, info,
                          q=q_rows(n, q_of) if q_of and n > 1 else None)

    def _device_tree(self, feat: torch.Tensor, x0: int, kids: int,
                     depth: int) -> tuple[list[list], int, dict[int, torch.Tensor]]:
        """The greedy tree of plan()'s level loop with every level on the device and ONE host read: each
        level's top-k, the `beam` best children by cumulative probability (float64 products, stable sort:
        ties to the earlier node, as the loop's sorted()), their tokens, parent features and tree mask are
        picked and built there and go straight into the next head forward. The host then makes the loop's
        nodes from the read; with a confidence cut the device runs rows (and levels) the loop would have
        skipped. Sampling: each row's `kids` children are drawn without replacement from the head's warped
        distribution there (inverse CDF from uniforms drawn on the host before the step), a draw after q
        ran out has probability 0 and is no node (as sampled_tree.draw gives fewer), and the q rows stay on
        the device for the verification. Returns (nodes, head forwards run, q row by expanded node)."""
        dev, dtype, n0 = feat.device, feat.dtype, self.n
        x = feat[None]  # [rows, h]: the predicted features the level's children are drafted from
        score = torch.ones(1, dtype=torch.float64, device=dev)
        vals, toks, picks, qs = [], [], [], []
        anc = torch.zeros((0, 0), dtype=torch.bool, device=dev)  # region rows x region rows: ancestor-or-self
        first, forwards = 0, 1  # first: the region row of the frontier's first node
        if self.gen is not None:  # every level's uniforms, before any device work: rows x kids per level
            n_rows = [1]
            for _ in range(depth - 1):
                n_rows.append(min(self.beam, n_rows[-1] * kids))
            rand = torch.rand(sum(n_rows) * kids, generator=self.gen)
            rand = (self.uploads.upload(rand) if dev.type != "cpu" else rand).split([r * kids for r in n_rows])
        for d in range(1, depth + 1):
            if self.gen is None:
                probs = self.draft.logits(x).float().softmax(-1)  # as DraftLM.topk
                top = torch.topk(probs, min(kids, probs.shape[-1]))
                top_v, top_i = top.values, top.indices
            else:
                probs = warp(self.draft.logits(x).float(), self.sampling)  # as DraftLM.dist
                top_i, top_v = draw_children(probs, rand[d - 1].view(probs.shape[0], kids))
                qs.append(probs if self.draft.ids is None else torch.zeros(
                    (probs.shape[0], self.draft.lm.weight.shape[0]), device=dev).index_copy_(1, self.draft.ids, probs))
            ids = top_i if self.draft.ids is None else self.draft.ids[top_i]
            vals.append(top_v)
            toks.append(ids)
            if d == depth:
                break
            k = top_v.shape[-1]
            cand = (score[:, None] * top_v.double()).reshape(-1)
            n = min(self.beam, cand.shape[0])
            order = torch.sort(cand, descending=True, stable=True).indices[:n]
            score, par = cand.index_select(0, order), order // k  # par: the parent's row in this level
            first, (anc, mask) = anc.shape[0], grow_level(anc, first, par, n0, dtype)
            pos = torch.full((n,), n0 + d - 1, dtype=torch.long, device=dev)  # filled there: no upload
            x = self.layer(self.emb(ids.reshape(-1).index_select(0, order)), x.index_select(0, par), pos, mask,
                           top=n0 + d - 1)
            forwards += 1
            picks.append(order)
        k = vals[0].shape[-1]
        rows = [1] + [o.shape[0] for o in picks]
        flat = torch.cat([torch.cat(vals).double().reshape(-1), torch.cat(toks).double().reshape(-1)]
                         + [o.double() for o in picks]).tolist()  # the one read
        total = sum(rows) * k
        probs_, toks_, at = flat[:total], flat[total:2 * total], 2 * total
        nodes = [[x0, -1, 0, None, 1.0, None]]
        frontier, row_of, base = [0], {0: 0}, 0  # row_of: a frontier node's row in its level's read
        q_of: dict[int, torch.Tensor] = {}
        for d in range(1, len(vals) + 1):
            new = []
            for i in frontier:
                r0 = (base + row_of[i]) * k
                if qs:
                    q_of[i] = qs[d - 1][row_of[i]]
                for r in range(k):
                    p = probs_[r0 + r]
                    if qs and p <= 0:  # a draw after q ran out: no child
                        continue
                    nodes.append([int(toks_[r0 + r]), i, d, p, nodes[i][4] * p, r])
                    new.append(len(nodes) - 1)
            if d == depth or d > len(picks):
                break
            frontier = [j for j in sorted(new, key=lambda j: -nodes[j][4])[:self.beam]
                        if nodes[j][4] >= self.confidence]
            if not frontier:
                break
            slot = {int(c): s for s, c in enumerate(flat[at:at + rows[d]])}  # candidate -> its row at level d + 1
            at, base = at + rows[d], base + rows[d - 1]
            cands = {j: row_of[nodes[j][1]] * k + nodes[j][5] for j in frontier}
            if any(c not in slot for c in cands.values()):  # the device ran the loop's best: cannot happen
                raise RuntimeError("eagle: the device's frontier misses a node of the host's")
            row_of = {j: slot[c] for j, c in cands.items()}
        return nodes, forwards, q_of

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        self.pending = [self.real_features(verdict.hidden[:, verdict.path])]  # of x0 and the accepted nodes
        record_verdict(plan, verdict, self.tracing)
        if self.cost is not None:
            probs = plan.info["tree"]["draft_prob"]
            score = [1.0] * len(plan.tokens)  # path probability of each kept node (parents come first)
            for i in range(1, len(plan.tokens)):
                score[i] = score[plan.parents[i]] * (probs[i] or 0.0)
            self.cost.observe(sum(score[1:]), len(verdict.tokens), len(plan.tokens))


def _device_draft(device: torch.device | None) -> bool:
    """Whether levels chain on the device: draft_tree.DEVICE_DRAFT when set, else on CUDA (a host read per
    level stalls the GPU; on the CPU a read is free and the level loop skips what the cut leaves); device
    None (sampled trees: one algorithm on every device): anywhere."""
    from decoding.methods.draft_model import draft_tree
    if draft_tree.DEVICE_DRAFT is not None:
        return draft_tree.DEVICE_DRAFT
    return device is None or device.type == "cuda"  # None: on every device


def _best(nodes: list[list], budget: int, confidence: float = 0.0) -> list[int]:
    """Root plus the `budget` best nodes by cumulative draft probability, those at or above `confidence`
    only, ancestor-closed, in node order (ties go to the earlier node)."""
    parents = [x[1] for x in nodes]
    above = [k for k in range(1, len(nodes)) if nodes[k][4] >= confidence]
    return best_closed(parents, above, budget, key=lambda k: (-nodes[k][4], k))


@dataclass
class EagleParams:
    heads: object = heads_knob()
    budget: int = budget_knob(16)
    depth: int = knob(None, shared=True, lo=1, hi=64, help="draft depth (default: from the budget)")
    branch: int = knob(4, shared=True, lo=1, hi=64, help="children per expanded node")
    beam: int = knob(None, shared=True, lo=1, hi=64, help="nodes expanded per level (default: from the budget)")
    draft_vocab: int = draft_vocab_knob()
    confidence: float = cut_knob()
    acceptance: str = acceptance_knob()
    adaptive: bool = adaptive_knob()
    row_ms: str = row_ms_knob()


SPEC = MethodSpec(
    name="eagle", drafter=Eagle, params=EagleParams, label="EAGLE", colour="#8c510a",
    summary="a one-layer head predicts the target's next hidden state and grows a tree of the likeliest paths",
    explain=(
    "**EAGLE** drafts at the feature level: a one-layer head reads [next token's embedding; the target's "
    "hidden state] and predicts the next hidden state, token by token, growing a tree of the most probable "
    "paths (EAGLE-2). The target checks the whole tree in one forward; greedy output equals its own."),
    paper="Li et al. 2024, EAGLE (arXiv 2401.15077) and EAGLE-2 (arXiv 2406.16858)",
    needs=("heads",), prepare=prepare_heads("eagle"), tuner=TUNER,
    presets={"cpu_embedded": {"budget": 8, "confidence": 0.1}, "cpu_default": {"budget": 8, "adaptive": 1, "draft_vocab": 4096}},
    pictures=("mask", "tree", "heads"),
    query_tokens=lambda p: p["budget"] + 1,  # x0 and the budget's best nodes
    capabilities=("typical_acceptance",), check_sampling=check_sampling,
    examples=({"budget": 8},))
