"""Acceptance rules: which drafted nodes of a step's tree the target agrees with.

Input is the step's tree (tokens, parents, which nodes are proposals) and the target's logits at every
node; output is the accepted path (node indices, root x0 first) plus the token the target adds after it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .sampling import Sampling, sample, uniform, warp


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
    with token d (identical contexts: duplicates of one prefix), so deeper tokens follow the same rule."""
    children: dict[int, list[int]] = {}
    for i in range(1, len(tokens)):
        if proposal[i]:
            children.setdefault(parents[i], []).append(i)
    cur, out = [0], []
    while True:
        r = warp(logits[cur[0]], s).cpu()
        kids = [c for u in cur for c in children.get(u, [])]
        chosen = None
        for d in dict.fromkeys(tokens[c] for c in kids):
            mass = float(r.sum())
            if mass > 0 and uniform(gen) < float(r[d]) / mass:
                chosen = d
                break
            r[d] = 0.0
        if chosen is None:
            if float(r.sum()) <= 0:  # every token with mass was proposed and rejected: cannot happen
                r = warp(logits[cur[0]], s).cpu()
            out.append(sample(r / r.sum(), gen))
            break
        out.append(chosen)
        cur = [c for c in kids if tokens[c] == chosen]
    return Verdict(_path_to(cur[0], parents), out)


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
    the accepted text is distributed exactly as plain sampling from the target."""
    children: dict[int, list[int]] = {}
    for i in range(1, len(tokens)):
        if proposal[i]:
            children.setdefault(parents[i], []).append(i)
    u, out = 0, []
    while True:
        r = warp(logits[u], s).cpu()
        qq = q[u].float().cpu().clone()
        nxt = None
        for c in children.get(u, []):
            x = tokens[c]
            if float(qq[x]) > 0 and uniform(gen) < min(1.0, float(r[x]) / float(qq[x])):
                nxt = c
                break
            res = (r - qq).clamp_min(0)
            if float(res.sum()) > 1e-12:  # else r == q' up to rounding: rejection was (almost) impossible
                r = res / res.sum()
            qq[x] = 0.0
            if float(qq.sum()) <= 0:
                break
            qq = qq / qq.sum()
        if nxt is None:
            out.append(sample(r, gen))
            break
        out.append(tokens[nxt])
        u = nxt
    return Verdict(_path_to(u, parents), out)


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
