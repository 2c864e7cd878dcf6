"""Acceptance rules: which drafted nodes of a step's tree the target agrees with.

Input is the step's tree (tokens, parents, which nodes are proposals) and the target's logits at every
node; output is the accepted path (node indices, root x0 first) plus the token the target adds after it.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from .sampling import Sampling, draw, sample, warp


@dataclass
class Verdict:
    path: list[int]        # query indices of x0 and the accepted proposal nodes, in order
    tokens: list[int]      # new tokens: the accepted proposals, then the target's own next token
    # the target's answer the runner hands to observe(): the step's logits (rows as planned) and the
    # hidden states of the plan's hidden_rows ([layers, rows, h]; None unless the drafter asked)
    logits: torch.Tensor | None = field(default=None, repr=False)
    hidden: torch.Tensor | None = field(default=None, repr=False)


def greedy(tokens: list[int], parents: list[int], proposal: list[bool], preds: list[int]) -> Verdict:
    """Longest proposal path that equals the target's argmax chain; first one wins ties.

    A node is accepted iff its parent is accepted and its token is the target's argmax at the parent.
    The target's argmax at the deepest accepted node is the bonus token, so a fully matched chain of
    k proposals yields k + 1 tokens. Output equals plain greedy decoding by construction."""
    n = len(tokens)
    ok = [False] * n
    depth = [0] * n
    ok[0] = True
    best = 0
    for i in range(1, n):
        p = parents[i]
        if proposal[i] and ok[p] and tokens[i] == preds[p]:
            ok[i] = True
            depth[i] = depth[p] + 1
            if depth[i] > depth[best]:
                best = i
    path = _path_to(best, parents)
    return Verdict(path, [tokens[i] for i in path[1:]] + [preds[best]])


def sampled(tokens: list[int], parents: list[int], proposal: list[bool], logits: torch.Tensor,
            s: Sampling, gen: torch.Generator) -> Verdict:
    """Distribution-preserving acceptance of deterministic proposals (lookahead, prompt lookup).

    Rule (multi-candidate rejection with point-mass drafts, as in SpecInfer/LADE): at the current node let
    p be the target's warped distribution and r = p. For each distinct proposed child token d in order,
    accept d with probability r(d) / sum(r); if rejected, set r(d) = 0 and try the next. If all are
    rejected, sample the next token from r / sum(r) and stop. Then P(next = d1) = p(d1),
    P(next = d2) = (1 - p(d1)) * p(d2) / (1 - p(d1)) = p(d2), and any unproposed x gets p(x): every token
    is drawn from exactly p, whatever the proposals were. Accepting d moves to the children of all nodes
    with token d (identical contexts: duplicates of one prefix), so deeper tokens follow the same rule.
    This is speculative()'s rule with q = the point mass on d for each child. Computed on the logits'
    device with one host read (walk)."""
    return walk(tokens, parents, proposal, logits, None, s, gen)[1]


def speculative(tokens: list[int], parents: list[int], proposal: list[bool], logits: torch.Tensor,
                q: torch.Tensor, s: Sampling, gen: torch.Generator) -> Verdict:
    """Exact speculative sampling for drafts SAMPLED from the draft model (chain and token tree).

    q[u] is the draft distribution the children of node u were drawn from, without replacement, in
    query order (a chain has one child per node). Rule (Leviathan et al. for one child; recursive
    rejection sampling, the without-replacement form of SpecInfer's multi-step rule, for several): at
    node u let r = p_u, the target's warped distribution, and q' = q[u]. For each child c (token x) in
    order: accept x with probability min(1, r(x) / q'(x)) and move to c; on rejection set
    r <- norm(max(r - q', 0)) and q' <- norm(q' with x removed) (the law of the next draw), then try the
    next child. If every child is rejected, or u has no children (the bonus token after a fully accepted
    path), sample the next token from r and stop. Each trial is one Leviathan step with proposal q', whose
    output is distributed as the current r; so the token that leaves u is distributed exactly as p_u, and
    the accepted text is distributed exactly as plain sampling from the target. Computed on the logits'
    device with one host read (walk)."""
    return walk(tokens, parents, proposal, logits, q, s, gen)[1]


Upload = Callable[[torch.Tensor], torch.Tensor]


@torch.inference_mode()  # the engine's pinned staging buffers are inference tensors
def walk(tokens: list[int], parents: list[int], proposal: list[bool], logits: torch.Tensor,
         q: torch.Tensor | None, s: Sampling, gen: torch.Generator,
         upload: Upload | None = None) -> tuple[list[int], Verdict]:
    """The exact sampled acceptance (speculative() with the draft's q; sampled() for deterministic
    proposals, q = a point mass per child) on the logits' device, read ONCE together with the target's
    argmax per node: returns (argmax per node, Verdict).

    Why this shape: walking the tree on the host reads the target's warped row at every node it visits
    (a GPU stall each). Here every random number is drawn on the host before the step, a fixed number per
    node (one per child trial, one for the node's own sample), from the run's generator: each node's
    trials use only its own numbers and the walk visits a node at most once, so deciding every node's
    outcome at once (which child it accepts, or none) and then following the outcomes from x0 draws
    exactly what visiting the nodes in turn would. The children of a node are tried slot by slot for all
    nodes together (a slot works on the rows that have such a child only); the end node's token is an
    inverse-CDF draw from its residual r. The host gets the accepted child of every node and the end's
    token in the read, and follows them itself.

    Deterministic proposals first merge nodes with the same token under merged parents (identical
    contexts, sampled()'s duplicates): the rule runs on the trie of distinct token paths, each trie node
    verified at its first tree node. upload: host tensor -> device (the engine's pinned, non-blocking
    uploads; None: a plain copy)."""
    members, kids, depth = _trie(tokens, parents, proposal, merge=q is None)
    m, w = len(members), max(len(k) for k in kids)
    dev = logits.device
    rows = [g[0] for g in members]
    sel = [[u for u in range(m) if len(kids[u]) > j] for j in range(w)]  # walk nodes with a j-th child
    ints = rows + [v for j in range(w) for v in sel[j] + [kids[u][j] for u in sel[j]]
                   + [tokens[members[kids[u][j]][0]] for u in sel[j]]]
    rand = torch.rand((m, w + 1), generator=gen)  # the step's random numbers, before any device work
    ints = torch.tensor(ints, dtype=torch.long)  # one upload: rows, then per slot its nodes, children, tokens
    if dev.type != "cpu":
        up = upload or (lambda t: t.to(dev))
        rand, ints = up(rand), up(ints)
    r = warp(logits.index_select(0, ints[:m]), s)  # [m, V]: the target's warped distribution at each walk node
    acc = torch.full((m,), -1, dtype=torch.long, device=dev)
    if w:
        done = torch.zeros(m, dtype=torch.bool, device=dev)
        if q is not None:  # the draft's rows where they live (host drafts: one more upload)
            qq = q.index_select(0, ints[:m] if q.device == dev else torch.tensor(rows)).float()
            if qq.device != dev:
                qq = (upload or (lambda t: t.to(dev)))(qq)
    at = m
    for j in range(w):  # slot j: the j-th child of every node that has one (rows without one do no work)
        nj = len(sel[j])
        su, cj, x = ints[at:at + nj], ints[at + nj:at + 2 * nj], ints[at + 2 * nj:at + 3 * nj, None]
        at += 3 * nj
        rj, uj = r.index_select(0, su), rand[:, j].index_select(0, su)
        active = done.index_select(0, su).logical_not()
        rx = rj.gather(1, x)[:, 0]
        if q is None:  # a point mass on x: accept with r(x); the residual is r without x
            ok = active & (uj < rx)
            res = rj.scatter(1, x, 0.0)
        else:
            qj = qq.index_select(0, su)
            qx = qj.gather(1, x)[:, 0]
            ok = active & (qx > 0) & (uj * qx < rx)
            res = (rj - qj).clamp_min(0)
        acc.index_copy_(0, su, torch.where(ok, cj, acc.index_select(0, su)))
        no = active & ok.logical_not()
        mass = res.sum(-1, keepdim=True)
        r.index_copy_(0, su, torch.where(no[:, None] & (mass > 1e-12), res / mass.clamp_min(1e-30), rj))
        stop = active.logical_not() | ok
        if q is not None:  # the next child's law: q' without x, renormalised (none left: stop trying)
            qn = torch.where(no[:, None], qj.scatter(1, x, 0.0), qj)
            qm = qn.sum(-1, keepdim=True)
            qq.index_copy_(0, su, torch.where(no[:, None] & (qm > 0), qn / qm.clamp_min(1e-30), qn))
            stop = stop | (no & (qm[:, 0] <= 0))
        done.index_copy_(0, su, stop)
    end = torch.zeros(1, dtype=torch.long, device=dev)
    for _ in range(max(depth)):  # follow the accepted children from x0 (no read)
        nxt = acc.index_select(0, end)
        end = torch.where(nxt >= 0, nxt, end)
    bonus = draw(r.index_select(0, end), rand[:, w].index_select(0, end))  # the end's own token
    preds = logits.argmax(-1)
    got = torch.cat([preds, acc, bonus.view(1)]).tolist()  # the one host read
    n = logits.shape[0]
    preds_l, acc_l = got[:n], got[n:n + m]
    t, out = 0, []
    while acc_l[t] >= 0:
        t = acc_l[t]
        out.append(tokens[members[t][0]])
    out.append(got[-1])
    return preds_l, Verdict(_path_to(members[t][0], parents), out)


def _trie(tokens: list[int], parents: list[int], proposal: list[bool],
          merge: bool) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """The proposal tree below x0 as the walk sees it: per walk node its tree nodes (first one verified),
    its child walk nodes in query order, and its depth. merge: children with one token under one walk node
    are one node (deterministic proposals); otherwise every proposal node is its own."""
    children: dict[int, list[int]] = {}
    for i in range(1, len(tokens)):
        if proposal[i]:
            children.setdefault(parents[i], []).append(i)
    members, kids, depth = [[0]], [], [0]
    for i in itertools.count():
        if i >= len(members):
            break
        groups: dict[int, list[int]] = {}
        for c in (c for u in members[i] for c in children.get(u, [])):
            groups.setdefault(tokens[c] if merge else c, []).append(c)
        kids.append(list(range(len(members), len(members) + len(groups))))
        members += list(groups.values())
        depth += [depth[i] + 1] * len(groups)
    return members, kids, depth


TYPICAL_EPSILON, TYPICAL_DELTA = 0.09, 0.3  # Medusa's posterior_threshold and posterior_alpha (= sqrt(eps))


def typical(tokens: list[int], parents: list[int], proposal: list[bool], logits: torch.Tensor, s: Sampling,
            gen: torch.Generator, epsilon: float = TYPICAL_EPSILON, delta: float = TYPICAL_DELTA) -> Verdict:
    """Medusa's typical acceptance (Cai et al. 2024, section 2.3.1). NOT EXACT: the output no longer
    follows the target's distribution; it trades that for longer accepted paths at high temperatures.

    A proposal c under node u passes when p_u(token c) > min(epsilon, delta * exp(-H(p_u))), p_u the
    target's warped distribution at u, H its entropy: a plausible token passes even when sampling would
    not have picked it. The deepest path of passing nodes wins (ties: the higher sum of log p, as Medusa's
    evaluate_posterior), then the next token is sampled from the target at the path's end. Unlike Medusa,
    p is the run's whole warped distribution (with top-k / top-p when set, so the entropy is that of what
    is sampled from) and the next token is sampled from it (Medusa's fast path takes the argmax)."""
    dist: dict[int, tuple[torch.Tensor, float]] = {}

    def p_at(u: int) -> tuple[torch.Tensor, float]:
        """The target's warped distribution at node u and its passing bar (once per node, not per child)."""
        if u not in dist:
            p = warp(logits[u], s).cpu()
            dist[u] = p, min(epsilon, delta * math.exp(-float(-(p * torch.log(p + 1e-5)).sum())))
        return dist[u]

    ok, depth, score = {0: True}, [0] * len(tokens), [0.0] * len(tokens)
    best = 0
    for i in range(1, len(tokens)):
        u = parents[i]
        if not (proposal[i] and ok.get(u)):
            continue
        p, bar = p_at(u)
        prob = float(p[tokens[i]])
        if prob > bar:
            ok[i], depth[i], score[i] = True, depth[u] + 1, score[u] + math.log(prob)
            if depth[i] > depth[best] or (depth[i] == depth[best] and score[i] > score[best]):
                best = i
    path = _path_to(best, parents)
    return Verdict(path, [tokens[i] for i in path[1:]] + [sample(p_at(best)[0], gen)])


def _path_to(node: int, parents: list[int]) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two sequences share: a candidate's matched length against the accepted text."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
