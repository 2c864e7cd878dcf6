"""Self-speculative decoding, Kangaroo's form (Liu et al. 2024, arXiv 2404.18911): the target drafts for itself.

The draft is the target's first k decoder layers, a trained adapter (self_spec_adapter.py), then the
target's final norm and LM head (optionally over a reduced draft vocabulary, heads.DraftLM). The runner's
one target forward verifies the draft's chain or tree (verify.greedy: exactly HF greedy; sampling: the
children are drawn from the draft's warped distribution and verify.speculative keeps the target's).

KV: the draft keeps its own cache for layers 0..k-1 and the adapter (engine/shallow.py). The runner's
Core owns the target's cache and does not hand it to drafters, so the shallow KV cannot be shared in
place; instead no token is run through the shallow layers twice by the draft: the prompt's shallow keys
and values are made from the target's own prefill hidden states (attention blocks only, no MLP), and
every later token is run through them exactly once, when it is drafted (or, for x0 and an accepted leaf
the draft never expanded, in the next step's first draft forward). The cost of not sharing: a second copy
of k layers' KV in memory, and the verify pass recomputes layers 0..k-1 for the drafted rows (Kangaroo's
verifier starts at layer k) - measured in docs/self-speculative.md.

Early stop (Kangaroo's rule): a node whose own draft probability (top-1 confidence when greedy) is below
`stop` is proposed but not expanded; drafting ends when no node of a level is worth expanding.
"""
from __future__ import annotations

from dataclasses import dataclass
import time

import torch

from decoding.engine.drafter import Abilities, Plan, best_closed, tree_record
from decoding.engine.masks import chain_parents, grow_level, step_mask
from decoding.engine.sampling import Sampling, make_generator
from decoding.engine.shallow import decoder_parts, keep_rows, run_layers, attention_only
from decoding.engine.verify import Verdict
from decoding.methods.self_draft.heads import DraftLM, load_counts
from decoding.methods.tree_verdict import record_verdict
from decoding.methods.sampled_tree import draw, q_rows
from decoding.methods.self_draft.self_spec_adapter import default_adapter, load_adapter
from decoding.params import LIMITS, MAX_TREE_NODES
from decoding.methods.spec import MethodSpec, knob

STOP = 0.8  # default early-stop confidence: tuned on SmolLM2 over bench/prompts/chat.jsonl (docs/self-speculative.md)


ORIGIN = "adapter draft"  # the origin of its drafted tokens (a colour and words in the spec)

class SelfSpeculative:
    """Drafter: shallow layers + adapter + the target's head propose; the target verifies."""
    name = "self_speculative"
    tracing = True  # set by the runner: the target probabilities of the tree are read only for the trace

    def __init__(self, adapter: str | None = None, depth: int = 6, branch: int = 1, beam: int = 1, budget: int | None = None,
                 stop: float = STOP, draft_vocab: int | None = None):
        if min(depth, branch, beam) < 1 or (budget is not None and budget < 1) or (draft_vocab or 0) < 0 \
                or not 0 <= stop < 1:
            raise ValueError("self_speculative: depth, branch, beam and budget must be >= 1, draft_vocab >= 0, "
                             "stop in [0, 1)")
        self.path = None if adapter is None else str(adapter)  # None: the shipped one, resolved at bind
        self.depth, self.branch, self.beam = int(depth), int(branch), int(beam)
        self.budget = int(budget) if budget is not None else depth * branch * beam
        self.stop, self.draft_vocab = float(stop), draft_vocab
        self._model = None

    @classmethod
    def from_params(cls, **p) -> "SelfSpeculative":
        cast = {"stop": float, "adapter": str}
        return cls(**{k: cast.get(k, int)(v) for k, v in p.items()})

    @property
    def abilities(self) -> Abilities:
        k = self.k if self._model is not None else 0
        return Abilities(hidden_layers=tuple(range(k + 1)) if k else (), binds_target=True, wants_tracing=True)

    def config(self) -> dict:
        return {"adapter": self.path, "depth": self.depth, "branch": self.branch, "beam": self.beam,
                "budget": self.budget, "stop": self.stop,
                "exit_layer": self.k if self._model is not None else None,
                "draft_vocab": self.head.size if self._model is not None else self.draft_vocab}

    def max_depth(self) -> int:
        return self.depth + 1

    def bind(self, model, sampling: Sampling) -> None:
        """Load and check the adapter for this model (once per model); sampling: drafts are drawn with a
        generator of their own so the verifier's stream is untouched."""
        if self._model is not model:
            self.inner = decoder_parts(model)
            self.path = self.path or default_adapter(model)
            self.adapter, self.cfg = load_adapter(self.path, model)
            self.k = int(self.cfg["exit_layer"])
            self.layers = list(self.inner.layers[:self.k]) + [self.adapter]
            self.head = DraftLM(model.get_output_embeddings(), load_counts(self.path), self.draft_vocab)
            self.n_layers = len(self.inner.layers)
            self._model = model
            from decoding.fast.uploads import Uploads
            self.uploads = Uploads(self.adapter.input_layernorm.weight.device)  # pinned, non-blocking on CUDA
        self.sampling = sampling
        self.gen = None if sampling.greedy else make_generator(Sampling(seed=sampling.seed + 104729))

    def start(self, prompt_ids: list[int]) -> None:
        from transformers import DynamicCache
        self.cache = DynamicCache()
        self.n = 0             # tokens whose shallow + adapter KV the draft cache holds (positions 0..n-1)
        self.region: list[int] = []  # draft-cache rows above n: plan node of each (this step's fed nodes)
        self.parents: list[int] = []  # their parents within the region (-1 = the committed text)

    @torch.inference_mode()
    def prefill_features(self, feats: torch.Tensor) -> None:
        """The prompt's shallow KV from the target's own hidden states (feats[i] = input of layer i,
        feats[k] = the adapter's input): attention blocks only, nothing recomputed through an MLP."""
        rows = feats.shape[1]
        pos = torch.arange(rows, device=feats.device)[None]
        mask = step_mask(chain_parents(rows), 0, feats.dtype, feats.device, upload=self.uploads.upload)
        for i, layer in enumerate(self.layers):
            attention_only(self.inner, layer, feats[i][None], pos, mask, self.cache)
        self.n = rows

    def _feed(self, toks: list[int], parents: list[int], depths: list[int]) -> torch.Tensor:
        """Run new region rows through layers 0..k-1 + adapter + final norm: [rows, h] draft features."""
        dev = self.adapter.input_layernorm.weight.device
        io = self.uploads.longs([toks, [self.n + d for d in depths]])  # ids and positions: one upload
        emb = self.inner.embed_tokens(io[0][None])
        first = len(self.parents)
        self.parents = self.parents + parents
        mask = step_mask(self.parents, self.n, emb.dtype, dev, first=first, upload=self.uploads.upload)
        pos = io[1][None]
        return self.inner.norm(run_layers(self.inner, self.layers, emb, pos, mask, self.cache))[0]

    @torch.inference_mode()
    def plan(self, context: list[int]) -> Plan:
        t0 = time.perf_counter()
        pending = context[self.n:]  # accepted tokens the draft has not run (x0, and a leaf it never expanded)
        feat = self._feed(pending, chain_parents(len(pending)), list(range(len(pending))))[-1:]
        keep_rows(self.cache, self.n, list(range(len(pending))))
        self.n, self.parents = len(context), []
        # nodes: [token, parent, depth, own prob, path prob, rank]; node 0 is x0
        nodes = [[context[-1], -1, 0, None, 1.0, None]]
        region_of, frontier, feats, forwards, rows = {}, [0], feat, 1, len(pending)
        q_of: dict[int, torch.Tensor] = {}
        conf, stopped = [None], None
        on_device = self.gen is None and _device_draft(feat.device)  # greedy levels chained on the device
        if on_device:
            nodes, conf, stopped, region_of, forwards, rows = self._device_tree(feat, context[-1], rows)
        for d in range(1, 1 if on_device else self.depth + 1):  # level by level (a host read per level)
            if self.gen is None:
                tp, tt = self.head.topk(feats, self.branch)
            else:  # children drawn from the draft's warped distribution, without replacement (exact)
                q = self.head.dist(feats, self.sampling)
                tt = [draw(q[j], self.branch, self.gen) for j in range(len(frontier))]
                tp = [q[j, t].tolist() for j, t in enumerate(tt)]
                q_of.update({i: q[j] for j, i in enumerate(frontier)})
            new = []
            for j, i in enumerate(frontier):
                for r, (t, p) in enumerate(zip(tt[j], tp[j])):
                    nodes.append([t, i, d, p, nodes[i][4] * p, r])
                    conf.append(round(p, 6))
                    new.append(len(nodes) - 1)
            if d == self.depth:
                break
            ranked = sorted(new, key=lambda k: -nodes[k][4])
            frontier = [k for k in ranked[:self.beam] if nodes[k][3] >= self.stop]  # Kangaroo's early stop
            if not frontier:
                stopped = ranked[0] if ranked else None
                break
            parents = [region_of.get(nodes[k][1], -1) for k in frontier]
            for j, k in enumerate(frontier):
                region_of[k] = len(self.parents) + j
            feats = self._feed([nodes[k][0] for k in frontier], parents, [nodes[k][2] - 1 for k in frontier])
            forwards, rows = forwards + 1, rows + len(frontier)
        # region rows of the fed nodes (on the device path a pick the early stop left out holds a row too)
        self.region = [k for k, _ in sorted(region_of.items(), key=lambda kv: kv[1])]
        keep = (best_closed([x[1] for x in nodes], range(1, len(nodes)), self.budget, key=lambda k: (-nodes[k][4], k))
                if self.gen is None else list(range(len(nodes))))  # sampled trees are never pruned (exact)
        remap = {old: new for new, old in enumerate(keep)}
        self.node_of_plan = keep  # plan index -> node index
        self.region_row = {remap[k]: region_of[k] for k in self.region if k in remap}
        sel = [nodes[k] for k in keep]
        n = len(sel)
        toks, depths = [x[0] for x in sel], [x[2] for x in sel]
        parents = [-1] + [remap[x[1]] for x in sel[1:]]
        origins = ["target"] + [ORIGIN] * (n - 1)  # the exit layer is each node's tree "exit"
        draft_ms = (time.perf_counter() - t0) * 1e3
        info = {"tree": tree_record(toks, parents, depths, origins, [x[3] for x in sel], rank=[None] + [x[5] for x in sel[1:]],
                                    exit=[None] + [self.k] * (n - 1)),
                "drafted": n > 1, "draft_forwards": forwards, "draft_ms": draft_ms, "target_forwards": 1,
                "mode": "self_speculative",
                "self_spec": {"exit_layer": self.k, "layers": self.n_layers, "draft_rows": rows,
                              "draft_conf": [conf[k] for k in keep],
                              "early_stop": stopped is not None,
                              "stopped_at": remap.get(stopped) if stopped is not None else None,
                              "stop": self.stop}}
        self._t_plan = time.perf_counter()
        return Plan(toks, parents, depths, ["x0"] + ["draft"] * (n - 1), [[i, d] for i, d in enumerate(depths)],
                    [False] + [True] * (n - 1), origin="draft", info=info, origins=origins,
                    q=q_rows(n, {remap[i]: v for i, v in q_of.items() if i in remap}) if q_of and n > 1 else None)

    def _device_tree(self, feat: torch.Tensor, x0: int, rows: int) -> tuple:
        """plan()'s greedy level loop with every level on the device and ONE host read (as eagle's
        _device_tree): each level's top-k, the `beam` best children by path probability (float64 products,
        stable sort: the loop's sorted()), their tokens and tree mask go straight into the next draft
        forward; the host then makes the loop's nodes, early stop included, from the read. The device runs
        every pick and every level: the rows and levels the early stop skips run anyway (their cache rows
        are never kept). Returns (nodes, conf, stopped, region_of, forwards, rows)."""
        dev, dtype, n0 = feat.device, feat.dtype, self.n
        x, score = feat, torch.ones(1, dtype=torch.float64, device=dev)
        vals, toks, picks = [], [], []
        anc = torch.zeros((0, 0), dtype=torch.bool, device=dev)  # region rows x region rows: ancestor-or-self
        first, forwards = 0, 1
        for d in range(1, self.depth + 1):
            probs = self.head.logits(x).float().softmax(-1)  # as DraftLM.topk
            top = torch.topk(probs, min(self.branch, probs.shape[-1]))
            ids = top.indices if self.head.ids is None else self.head.ids[top.indices]
            vals.append(top.values)
            toks.append(ids)
            if d == self.depth:
                break
            k = top.values.shape[-1]
            cand = (score[:, None] * top.values.double()).reshape(-1)
            n = min(self.beam, cand.shape[0])
            order = torch.sort(cand, descending=True, stable=True).indices[:n]
            score, par = cand.index_select(0, order), order // k
            first, (anc, mask) = anc.shape[0], grow_level(anc, first, par, n0, dtype)
            mask = mask[None, None]
            pos = torch.full((1, n), n0 + d - 1, dtype=torch.long, device=dev)  # filled there: no upload
            emb = self.inner.embed_tokens(ids.reshape(-1).index_select(0, order)[None])
            x = self.inner.norm(run_layers(self.inner, self.layers, emb, pos, mask, self.cache))[0]
            forwards, rows = forwards + 1, rows + n
            picks.append(order)
        k = vals[0].shape[-1]
        per = [1] + [o.shape[0] for o in picks]  # read rows per level
        flat = torch.cat([torch.cat(vals).double().reshape(-1), torch.cat(toks).double().reshape(-1)]
                         + [o.double() for o in picks]).tolist()  # the one read
        total = sum(per) * k
        probs_, toks_, at = flat[:total], flat[total:2 * total], 2 * total
        nodes, conf, stopped, region_of = [[x0, -1, 0, None, 1.0, None]], [None], None, {}
        frontier, row_of, base, fed = [0], {0: 0}, 0, 0  # fed: region rows of the levels before
        for d in range(1, len(vals) + 1):
            new = []
            for i in frontier:
                r0 = (base + row_of[i]) * k
                for r in range(k):
                    p = probs_[r0 + r]
                    nodes.append([int(toks_[r0 + r]), i, d, p, nodes[i][4] * p, r])
                    conf.append(round(p, 6))
                    new.append(len(nodes) - 1)
            if d == self.depth or d > len(picks):
                break
            ranked = sorted(new, key=lambda j: -nodes[j][4])
            frontier = [j for j in ranked[:self.beam] if nodes[j][3] >= self.stop]  # Kangaroo's early stop
            if not frontier:
                stopped = ranked[0] if ranked else None
                break
            slot = {int(c): s for s, c in enumerate(flat[at:at + per[d]])}  # candidate -> its row at level d + 1
            cands = {j: row_of[nodes[j][1]] * k + nodes[j][5] for j in frontier}
            if any(c not in slot for c in cands.values()):  # the device ran the loop's best: cannot happen
                raise RuntimeError("self_speculative: the device's frontier misses a node of the host's")
            row_of = {j: slot[c] for j, c in cands.items()}
            region_of.update({j: fed + s for j, s in row_of.items()})
            at, base, fed = at + per[d], base + per[d - 1], fed + per[d]
        return nodes, conf, stopped, region_of, forwards, rows

    @torch.inference_mode()  # the draft cache holds inference tensors: compacting it in place needs the mode
    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        """Keep the draft-cache rows of the accepted nodes the draft expanded (a prefix of the path), drop
        the rest; the target's time for the step goes in the trace beside the draft's."""
        plan.info["target_ms"] = (time.perf_counter() - self._t_plan) * 1e3
        rows = []
        for i in verdict.path[1:]:
            if i not in self.region_row:
                break
            rows.append(self.region_row[i])
        keep_rows(self.cache, self.n, rows)
        self.n += len(rows)
        self.parents, self.region = [], []
        record_verdict(plan, verdict, self.tracing)


def _device_draft(device: torch.device) -> bool:
    """Whether greedy levels chain on the device: draft_tree.DEVICE_DRAFT when set, else on CUDA (a host read
    per level stalls the GPU; on the CPU a read is free and the level loop skips what the early stop leaves)."""
    from decoding.methods.draft_model import draft_tree
    return draft_tree.DEVICE_DRAFT if draft_tree.DEVICE_DRAFT is not None else device.type == "cuda"


@dataclass
class SelfSpeculativeParams:
    adapter: object = knob(None, cli="--adapter", kind="path",
                           help="self_speculative: adapter folder (train-heads --kind self_speculative); default: the "
                                "shipped assets/heads/smollm2-self_speculative for SmolLM2-135M-Instruct")
    depth: int = knob(6, shared=True, lo=1, hi=LIMITS["draft_tokens"][1], cli="--draft-tokens",
                      help="self_speculative: draft depth (default 6)")
    branch: int = knob(1, shared=True, lo=1, hi=64, help="children per expanded node (1 = a chain)")
    beam: int = knob(1, shared=True, lo=1, hi=64, help="nodes expanded per level")
    budget: int = knob(None, shared=True, lo=1, hi=MAX_TREE_NODES, cli="--budget", help="tree nodes verified per step")
    stop: float = knob(STOP, lo=0.0, hi=1.0, cli="--draft-confidence",
                       help="self_speculative: Kangaroo's early stop, do not expand a draft token below it (default "
                            "0.8, below 1)")
    draft_vocab: int = knob(None, shared=True, lo=LIMITS["draft_vocab"][0], hi=LIMITS["draft_vocab"][1], cli="--draft-vocab",
                            help="draft only the N tokens the target chose most often in the adapter's training "
                                 "(FR-Spec; 0 = all)")


def prepare(p: dict, model, tokenizer) -> dict:
    """The shipped adapter, for the model it fits, unless one is given."""
    return p if p.get("adapter") else {**p, "adapter": default_adapter(model)}


SPEC = MethodSpec(
    name="self_speculative", drafter=SelfSpeculative, params=SelfSpeculativeParams, label="self-speculative",
    colour="#1f78b4",
    summary="the target drafts with its own first layers plus a trained adapter, then verifies with all of them",
    explain=(
    "### Self-speculative decoding\n"
    "The target drafts for itself (Kangaroo, Liu et al. 2024): its first few layers plus a small trained "
    "**adapter** and its own LM head make a cheap shallow model that proposes the next tokens; drafting stops"
    " early when the shallow model's confidence drops below the **stop** threshold. The full target then "
    "verifies the draft in one forward. No second model is loaded; the *draft cost* view shows the draft's "
    "milliseconds against the target's per step. Greedy output equals the target's own."),
    paper="Liu et al. 2024, Kangaroo (arXiv 2404.18911)",
    needs=("adapter",), prepare=prepare, presets={"cpu_embedded": {}},
    pictures=("mask", "tree", "draft_cost"),
    learns=False,  # drafts from the context with the target's own first layers; observe() keeps cache rows
    query_tokens=lambda p: p["depth"] + 1,  # x0 and a chain of `depth` drafts (branch and beam are 1)
    origins={ORIGIN: ("#f06090", "early-exit draft (the target's first layers + adapter)")},
    examples=({"depth": 4},))
