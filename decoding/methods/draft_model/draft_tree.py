"""The draft side of speculative decoding: the token tree the draft expands in its KV cache (draft_core.py),
replayed from one device read when its levels were chained (tree_replay.py), in a shape (tree_shape.py).

The draft keeps its own Core. Above the accepted prefix its cache holds a *speculative region*: the
catch-up tokens (accepted text the draft has not seen yet, ending with x0) and every tree node already
run through the draft. A node attends to the prefix, its ancestors and itself (a float tree mask over
the region), at position prefix length + depth. The tree grows level by level: ONE draft forward runs
the whole frontier, so draft forwards = depth, not nodes. After the target's verdict `settle` keeps
only the catch-up tokens and the accepted path and drops the rest of the region.

Staged mode: a stage-2 drafter (an n-gram model) proposes a chain under the most probable frontier
node; it rides in the same draft forward and the draft verifies it like the target verifies the draft
(greedy: equal to the draft's argmax; sampling: the point-mass rule, so each child is still a sample
from the draft's distribution). Accepted stage-2 tokens are tree nodes with origin "stage2".

Chained levels (greedy chains, fixed-width trees, staged or not, and dynamic trees; DEVICE_DRAFT, by
default on CUDA when the confidence cut is off, as it is for dynamic trees unless asked for):
the tree's shape does not depend on the draft's values, so each level's children go from the draft's
top-k straight into the next draft forward ON THE DEVICE, and the host reads every level's top-k in ONE
transfer at the end (a step then syncs twice: this read and the target's argmax, instead of once per
level). The host then builds the same nodes as level by level (the confidence cut and zero-probability
children are applied to the read lists); the levels below a cut node ran anyway: forwards the per-level
path saves by reading first (draft_forwards counts what ran: on the tiny random CPU models with the 0.4
cut, 5x the forwards), which is why the default chains only uncut shapes. Staged trees: in greedy mode a
node's child is always the draft's argmax whether stage 2 guessed it or not, so every node a staged tree
runs is a node of the full fixed-width tree; the host replays build() (stage 2's n-gram lookups included)
from the one read. Dynamic trees: each level's best `budget` children by cumulative probability are picked
on the device (their parents reach the mask through Core._run_rows, no host read), then build() is
replayed; the device runs every level while the host's pruning may stop early (2x the forwards on the
tiny CPU models with their flat distributions; a confident draft prunes less). They chain by default on
CUDA all the same: a read per level stalls the GPU on every level of every step (up to depth + 1 syncs
a step), while a wasted level is one more small draft forward queued behind the others; on the CPU, where
a read is free, they keep the level-by-level path. Sampled dynamic trees chain as greedy ones (their
children are the best ones too). Sampled chains and fixed-width trees without a cut chain on every device:
each level's children are drawn without replacement from the draft's warped q on the device, by inverse
CDF from uniforms the run's generator drew on the host before the step, and q stays there for the
verification; one algorithm on CPU and CUDA, so a seed gives the same text on both. With a cut, and for
sampled staged trees (stage 2's checks draw on the host), levels are drawn on the host: a read per level.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from decoding.engine.drafter import best_closed
from decoding.engine.sampling import Sampling, draw_children, uniform, warp
from decoding.methods.draft_model import tree_replay
from decoding.methods.draft_model.draft_core import DraftCore  # noqa: F401 (the builder's type)
from decoding.methods.draft_model.tree_replay import _Replay, _top_list
from decoding.methods.draft_model.tree_shape import Shape, level_rows as _level_rows

# Chain the draft levels on the device (one host read per draft): None = where the draft runs on CUDA and
# no confidence cut could save forwards (a host read per level stalls the GPU; on CPU a read is free).
# DECODESCOPE_DEVICE_DRAFT=1/0 forces it; tests set it to count what a CUDA run syncs.
DEVICE_DRAFT: bool | None = {"1": True, "0": False}.get(os.environ.get("DECODESCOPE_DEVICE_DRAFT", ""))


@dataclass
class Node:
    token: int
    parent: int                 # index in the node list (-1 for the root x0)
    depth: int
    prob: float | None          # draft probability of `token` at its parent (None for the root)
    score: float                # cumulative draft probability of the path
    origin: str                 # "target" (x0), "draft", "stage2"
    spec: int = -1              # index in the draft's speculative region once run, else -1
    dist: torch.Tensor | None = field(default=None, repr=False)  # draft distribution for the children
    top: list[tuple[int, float]] | None = field(default=None, repr=False)  # its best tokens, on the host
    kids: list[int] = field(default_factory=list)
    expanded: bool = False


class TreeBuilder:
    def __init__(self, dcore: DraftCore, shape: Shape, sampling: Sampling, gen: torch.Generator | None,
                 stage2=None):
        self.core, self.shape, self.s, self.gen, self.stage2 = dcore, shape, sampling, gen, stage2

    def _dist(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(-1) if self.gen is None else warp(logits, self.s).cpu()  # CPU generator

    def _dev_dist(self, logits: torch.Tensor) -> torch.Tensor:
        """_dist where the logits live (the chained levels: drawn from on the device)."""
        return logits.softmax(-1) if self.gen is None else warp(logits, self.s)

    def build(self, context: list[int]) -> tuple[list[Node], int, dict]:
        """Expand the draft tree for the next step; returns (nodes, catch-up length, counters)."""
        if self.chained():
            return self._build_chained(context)
        D = self.shape.depth
        catch = context[self.core.length:]
        nodes = [Node(context[-1], -1, 0, None, 1.0, "target")]
        pending = [0]
        stats = {"draft_forwards": 0, "draft_nodes_run": 0, "stage2_proposed": 0, "stage2_accepted": 0}
        first = True
        while pending:
            n0 = len(self.core.spec_parents)
            toks, pars = [], []
            if first:  # catch-up chain; the root x0 is its last token
                toks, pars = list(catch), list(range(-1, len(catch) - 1))
                nodes[0].spec = n0 + len(catch) - 1
                pending = []
            for i in pending:
                nodes[i].spec = n0 + len(toks)
                toks.append(nodes[i].token)
                pars.append(nodes[nodes[i].parent].spec)
            run = ([0] if first else []) + pending
            chain: list[int] = []
            if self.stage2 is not None:
                prim = max(run, key=lambda i: (nodes[i].score, -i))
                path = self._path_tokens(nodes, prim)
                chain = self.stage2.propose(context[:-1] + path, D - nodes[prim].depth)
                stats["stage2_proposed"] += len(chain)
                c0 = n0 + len(toks)
                for j, t in enumerate(chain[:-1]):
                    toks.append(t)
                    pars.append(nodes[prim].spec if j == 0 else c0 + j - 1)
            skip = len(catch) - 1 if first else 0
            logits = self.core.grow(toks, pars, skip)  # row r = batch node skip + r
            n0 += skip
            stats["draft_forwards"] += 1
            stats["draft_nodes_run"] += len(toks)
            dists = self._dist(logits)  # one softmax (sampling: one transfer) for the whole level
            tops = self._tops(dists)    # one transfer: every row's best tokens and their probabilities
            for i in run:
                nodes[i].dist, nodes[i].top = dists[nodes[i].spec - n0], tops[nodes[i].spec - n0]
            if chain:
                stats["stage2_accepted"] += self._take_stage2(nodes, prim, chain, dists, tops, c0 - n0, n0)
            new: list[int] = []
            for i in range(len(nodes)):
                nd = nodes[i]
                if nd.dist is not None and not nd.expanded and self._grows(nd):
                    new += self._expand(nodes, i)
            if self.shape.mode == "dynamic":
                self._prune(nodes, new)
            pending = [i for i in range(len(nodes)) if nodes[i].spec < 0 and self._grows(nodes[i])]
            first = False
        if self.shape.mode == "dynamic":
            nodes = self._select(nodes)
        stats["pruned"] = self._pruned(nodes)
        return nodes, len(catch), stats

    def chained(self) -> bool:
        """Whether the levels run chained on the device (module doc): greedy chains, fixed-width trees
        (staged too: replayed on the host) and dynamic trees (a device-side frontier, _build_frontier);
        sampled chains and fixed-width trees without a cut on every device (draws on the device)."""
        if self.gen is not None and self.stage2 is None and self.shape.mode != "dynamic" and DEVICE_DRAFT is None:
            # sampled chains and trees: one algorithm (inverse-CDF draws from host uniforms) on every device,
            # so a seed gives the same text on CPU and CUDA; with a cut, level by level on every device
            return self.shape.confidence == 0
        on = DEVICE_DRAFT if DEVICE_DRAFT is not None else (  # default: on CUDA, where no cut could save forwards
            self.core.device.type == "cuda" and self.shape.confidence == 0)
        # sampled staged trees draw stage 2's checks on the host: level by level
        return bool(on) and (self.gen is None or self.stage2 is None) and self.shape.mode in ("chain", "tree",
                                                                                                "dynamic")

    def _build_chained(self, context: list[int]) -> tuple[list[Node], int, dict]:
        """build() with every level's children fed to the next draft forward on the device and ONE host
        read of all levels' top-k at the end; the nodes are those build() makes level by level."""
        if self.shape.mode == "dynamic":
            return self._build_frontier(context)
        D, widths = self.shape.depth, self.shape.widths
        catch = context[self.core.length:]
        root_spec = len(self.core.spec_parents) + len(catch) - 1
        logits = self.core.grow(list(catch), list(range(-1, len(catch) - 1)), len(catch) - 1)
        k = min(max(widths) + 1, logits.shape[-1])  # as _tops: the same top-k call, the same order
        vals, idxs, base = [], [], [root_spec]  # base[d]: region index of level d's first node
        runs, n_run = 1, len(catch)
        sampled = self.gen is not None  # children drawn without replacement from q on the device
        if sampled:  # every level's uniforms, drawn on the host before the step: one per full-tree child
            n_draw = [_level_rows(widths, d) * widths[d] for d in range(D)]
            rand = torch.rand(sum(n_draw), generator=self.gen)
            rand = self.core.uploads.upload(rand) if self.core.device.type != "cpu" else rand
            rand, dists, kids, kid_p = list(rand.split(n_draw)), [], [], []
        for d in range(D):
            q = self._dev_dist(logits)
            top = torch.topk(q, k)
            vals.append(top.values)
            idxs.append(top.indices)
            if sampled:
                dists.append(q)
                ids, pr = draw_children(q, rand[d].view(q.shape[0], widths[d]))
                kids.append(ids)
                kid_p.append(pr)
            if d == D - 1:  # the deepest children are leaves: never run
                break
            w = widths[d]
            first = len(self.core.spec_parents)
            parents = [base[d] + j for j in range(top.indices.shape[0]) for _ in range(w)]
            logits = self.core.grow_ids((kids[d] if sampled else top.indices[:, :w]).reshape(-1), parents)
            base.append(first)
            runs, n_run = runs + 1, n_run + len(parents)
        flat = [torch.cat(vals).double().reshape(-1), torch.cat(idxs).double().reshape(-1)]
        if sampled:
            flat += [x.double().reshape(-1) for x in kids + kid_p]
        flat = torch.cat(flat).tolist()  # the one read
        rows = sum(v.shape[0] for v in vals)
        probs = [flat[r * k:(r + 1) * k] for r in range(rows)]
        toks = [flat[(rows + r) * k:(rows + r + 1) * k] for r in range(rows)]
        drawn = []  # sampled: per row, its drawn children (token, q probability) in draw order
        if sampled:
            at, n_kid = 2 * rows * k, sum(n_draw)
            for d in range(D):
                w = widths[d]
                for j in range(_level_rows(widths, d)):
                    ts = flat[at + j * w:at + (j + 1) * w]
                    ps = flat[at + n_kid + j * w:at + n_kid + (j + 1) * w]
                    drawn.append([(int(t), p) for t, p in zip(ts, ps)])
                at += n_draw[d]
        offset = [0]
        for d in range(D - 1):
            offset.append(offset[-1] + _level_rows(widths, d))  # level d's first row in the read
        if self.stage2 is not None:  # every node a staged tree can run is a node of the full tree: replay
            table, paths = {(): (_top_list(toks[0], probs[0]), root_spec)}, [()]
            for d in range(1, D):
                w, nxt = widths[d - 1], []
                for j in range(_level_rows(widths, d)):
                    path = paths[j // w] + (int(toks[offset[d - 1] + j // w][j % w]),)
                    table[path] = (_top_list(toks[offset[d] + j], probs[offset[d] + j]), base[d] + j)
                    nxt.append(path)
                paths = nxt
            return self._replay(context, table, runs, n_run)
        nodes = [Node(context[-1], -1, 0, None, 1.0, "target")]
        pos = {0: 0}  # node -> its index within its level of the full tree
        level = [0]
        for d in range(D):
            nxt = []
            for i in level:
                nd = nodes[i]
                if not self._grows(nd):  # a leaf by the cutoff: the per-level path never ran it
                    continue
                row = offset[d] + pos[i]
                nd.spec, nd.expanded = base[d] + pos[i], True
                nd.top = [(int(t), p) for t, p in zip(toks[row], probs[row])]
                if sampled:  # zero-probability draws (q had fewer tokens than the width) are no children
                    nd.dist = dists[d][pos[i]]
                    picks = [(t, p) for t, p in drawn[row] if p > 0]
                else:
                    picks = [(t, p) for t, p in nd.top if p > 0][:widths[d]]
                for c, (t, p) in enumerate(picks):
                    kid = self._add(nodes, i, t, "draft", p)
                    pos[kid] = pos[i] * widths[d] + c
                    nxt.append(kid)
            level = nxt
        stats = {"draft_forwards": runs, "draft_nodes_run": n_run, "stage2_proposed": 0, "stage2_accepted": 0,
                 "pruned": self._pruned(nodes)}
        return nodes, len(catch), stats

    def _build_frontier(self, context: list[int]) -> tuple[list[Node], int, dict]:
        """Dynamic trees chained on the device: each level runs the best `budget` children of the last level
        by cumulative probability (float64 products in build()'s order, stable sort: ties go to the earlier
        node), parents picked on the device (DraftCore.grow_rows). That frontier holds every node _prune
        keeps: a kept node has fewer than `budget` better candidates, and a node _prune dropped (and its
        descendants) scores below every later cut. ONE host read at the end; build() is then replayed on the
        host from it (_replay), so the tree is the level-by-level tree. Rows _prune would drop ran anyway."""
        D, B, catch = self.shape.depth, self.shape.budget, context[self.core.length:]
        root_spec = len(self.core.spec_parents) + len(catch) - 1
        logits = self.core.grow(list(catch), list(range(-1, len(catch) - 1)), len(catch) - 1)
        root_depth = self.core.spec_depths[root_spec]
        k = min(self.shape.branch + 1, logits.shape[-1])  # as _tops
        bw = min(self.shape.branch, k)
        top = torch.topk(self._dev_dist(logits), k)
        vals, idxs, picks = [top.values], [top.indices], []
        score = torch.ones(1, dtype=torch.float64, device=logits.device)
        base, runs, n_run = [root_spec], 1, len(catch)
        for d in range(1, D):
            p = top.values[:, :bw].double()
            cand = torch.where(p > 0, score[:, None] * p, -1.0).reshape(-1)  # zero-probability: no child
            n = min(B, cand.shape[0])
            order = torch.sort(cand, descending=True, stable=True).indices[:n].sort().values
            score = cand.index_select(0, order)
            base.append(len(self.core.spec_parents))
            logits = self.core.grow_rows(top.indices[:, :bw].reshape(-1).index_select(0, order),
                                         order // bw + base[d - 1], root_depth + d)
            top = torch.topk(self._dev_dist(logits), k)
            vals.append(top.values)
            idxs.append(top.indices)
            picks.append(order)
            runs, n_run = runs + 1, n_run + n
        flat = torch.cat([torch.cat(vals).double().reshape(-1), torch.cat(idxs).double().reshape(-1)]
                         + [o.double() for o in picks]).tolist()  # the one read
        rows = sum(v.shape[0] for v in vals)
        probs = [flat[r * k:(r + 1) * k] for r in range(rows)]
        toks = [flat[(rows + r) * k:(rows + r + 1) * k] for r in range(rows)]
        table, paths, row, at = {(): (_top_list(toks[0], probs[0]), root_spec)}, [()], 1, 2 * rows * k
        for d in range(1, D):
            nxt = []
            for j, o in enumerate(flat[at:at + picks[d - 1].shape[0]]):
                parent, slot = divmod(int(o), bw)
                path = paths[parent] + (int(toks[row - len(paths) + parent][slot]),)
                table[path] = (_top_list(toks[row + j], probs[row + j]), base[d] + j)
                nxt.append(path)
            at, row, paths = at + len(nxt), row + len(nxt), nxt
        return self._replay(context, table, runs, n_run)

    def _replay(self, context: list[int], table: dict, runs: int, n_run: int) -> tuple[list[Node], int, dict]:
        """build() on the host from one read: `table` maps a node's token path below x0 to (its top list, its
        row in the draft's region). The forwards already ran; the replay makes build()'s exact decisions
        (stage 2's n-gram proposals and checks, dynamic pruning) and maps every node to its region row.
        A node the device did not run (cannot happen, see the callers) restarts the step level by level."""
        n_catch = len(context) - self.core.length
        replay = _Replay(self.core.length, len(self.core.spec_parents) - n_run, n_catch, table)
        host = TreeBuilder(replay, self.shape, self.s, None, self.stage2)
        host.chained, host._dist, host._tops = (lambda: False), (lambda rows: rows), replay.tops
        try:
            nodes, n_catch, st = host.build(context)
        except tree_replay._Miss:
            self.core.commit(list(range(n_catch - 1)))  # keep the accepted catch-up text, drop the tree
            host.core, host._dist, host._tops = self.core, self._dist, self._tops
            return host.build(context)
        for nd in nodes:
            nd.spec = replay.real(nd.spec)
        st["draft_forwards"], st["draft_nodes_run"] = runs, n_run
        return nodes, n_catch, st

    def _tops(self, dists: torch.Tensor) -> list[list[tuple[int, float]]]:
        """Per row, the top-k (token, probability) pairs, k = the widest level (+1: a stage-2 child may
        already hold a slot), in ONE device-to-host transfer per level: children, stage-2 checks and
        the pruned record all read these host lists instead of syncing per node."""
        w = self.shape.branch if self.shape.mode == "dynamic" else max(self.shape.widths)
        top = torch.topk(dists, min(w + 1, dists.shape[-1]))
        probs, toks = torch.stack([top.values.double(), top.indices.double()]).tolist()
        return [[(int(t), p) for t, p in zip(ts, ps)] for ts, ps in zip(toks, probs)]

    def _pruned(self, nodes: list[Node]) -> dict[str, list]:
        """The best children the tree left out, for the trace's tree view: for every node whose draft
        distribution is known, its top-`width` tokens (branch in dynamic mode) that are not among its
        children: cut by the width, by sampling (children drawn at random), or by the dynamic budget.
        A node the confidence cutoff stopped never ran through the draft (that is the forward the cutoff
        saves), so its children are unknown; its own draft_prob < confidence marks it in the tree."""
        out: dict[str, list] = {"parents": [], "tokens": [], "draft_prob": []}
        run = [i for i, nd in enumerate(nodes) if nd.top is not None and nd.depth < self.shape.depth]
        for i in run:  # the host lists of each level's transfer: no transfer here
            w = self.shape.branch if self.shape.mode == "dynamic" else self.shape.widths[nodes[i].depth]
            have = {nodes[k].token for k in nodes[i].kids}
            for t, p in nodes[i].top[:w]:
                if t not in have and p > 0:
                    out["parents"].append(i)
                    out["tokens"].append(t)
                    out["draft_prob"].append(round(p, 6))
        return out

    def _grows(self, nd: Node) -> bool:
        """Whether a node gets children: above the depth limit, not pruned, confident enough."""
        return nd.depth < self.shape.depth and nd.token >= 0 and (
            nd.prob is None or nd.prob >= self.shape.confidence or nd.origin == "stage2")

    @staticmethod
    def _path_tokens(nodes: list[Node], i: int) -> list[int]:
        out = []
        while i >= 0:
            out.append(nodes[i].token)
            i = nodes[i].parent
        return out[::-1]

    def _add(self, nodes: list[Node], parent: int, token: int, origin: str, prob: float | None = None) -> int:
        p = nodes[parent]
        prob = float(p.dist[token]) if prob is None else prob
        nodes.append(Node(token, parent, p.depth + 1, prob, p.score * prob, origin))
        p.kids.append(len(nodes) - 1)
        return len(nodes) - 1

    def _take_stage2(self, nodes: list[Node], prim: int, chain: list[int], dists: torch.Tensor, tops: list,
                     c0: int, n0: int) -> int:
        """Draft-level verification of the stage-2 chain under `prim`; returns tokens accepted."""
        u, taken = prim, 0
        for j, t in enumerate(chain):
            q, prob = nodes[u].dist, None
            if self.gen is None:  # the draft's argmax and its probability: from the level's host list
                best, prob = nodes[u].top[0]
                ok = best == t
                tok = t if ok else best
            else:  # point mass: accept t with prob q(t), else sample from q without t -> child ~ q
                ok = uniform(self.gen) < float(q[t])
                if ok:
                    tok = t
                else:
                    r = q.clone()
                    r[t] = 0.0
                    tok = int(torch.multinomial(r / r.sum(), 1, generator=self.gen))
            v = self._add(nodes, u, tok, "stage2" if ok else "draft", prob)
            if not ok:
                return taken
            taken += 1
            if j < len(chain) - 1:  # this chain token ran in the forward: its distribution is known
                nodes[v].spec = n0 + c0 + j
                nodes[v].dist, nodes[v].top = dists[c0 + j], tops[c0 + j]
            u = v
        return taken

    def _expand(self, nodes: list[Node], i: int) -> list[int]:
        """Children of node i (its distribution is known); returns the new node indices."""
        nd = nodes[i]
        nd.expanded = True
        q = nd.dist
        w = self.shape.branch if self.shape.mode == "dynamic" else self.shape.widths[nd.depth]
        have = [nodes[k].token for k in nd.kids]
        if w - len(have) <= 0:
            return []
        if self.gen is None or self.shape.mode == "dynamic":  # deterministic children: the best tokens
            # from the level's host list (zero-probability tokens are no children)
            picks = [(t, p) for t, p in nd.top if t not in have and p > 0][:w - len(have)]
            return [self._add(nodes, i, t, "draft", p) for t, p in picks]
        r = q.clone()  # sampling: q lives on the host (_dist)
        if have:
            r[have] = 0.0
        need = min(w - len(have), int((q > 0).sum()) - len(have))
        if need <= 0:
            return []
        # i.i.d. without replacement from q (given the children already drawn)
        toks = torch.multinomial(r / r.sum(), need, replacement=False, generator=self.gen).tolist()
        return [self._add(nodes, i, t, "draft") for t in toks]

    def _prune(self, nodes: list[Node], new: list[int]) -> list[int]:
        """Dynamic mode: drop this level's candidates that cannot be among the best `budget` nodes."""
        B = self.shape.budget
        if not new:
            return new
        old = [n.score for n in nodes[1:] if n.token >= 0 and n.depth < nodes[new[0]].depth]
        cand = sorted(new, key=lambda k: -nodes[k].score)[:B]
        scores = sorted(old + [nodes[k].score for k in cand], reverse=True)
        cut = scores[B - 1] if len(scores) >= B else -1.0
        keep = {k for k in cand if nodes[k].score >= cut}
        for k in new:
            if k not in keep:
                nodes[k].token = -1  # tombstone: removed by _select
        return [k for k in new if k in keep]

    def _select(self, nodes: list[Node]) -> list[Node]:
        """Dynamic mode: the best `budget` nodes by cumulative draft probability (ancestor-closed:
        a child never scores above its parent, and ties go to the shallower, earlier node)."""
        live = [k for k in range(1, len(nodes)) if nodes[k].token >= 0]
        order = best_closed([nd.parent for nd in nodes], live, self.shape.budget,
                            key=lambda k: (-nodes[k].score, nodes[k].depth, k))
        remap = {old: new for new, old in enumerate(order)}
        out = []
        for k in order:
            nd = nodes[k]
            nd.parent = remap[nd.parent] if nd.parent >= 0 else -1
            nd.kids = [remap[c] for c in nd.kids if c in remap]
            out.append(nd)
        return out
