"""Attention masks and position ids for one decoding step.

Every step of every method is a *tree* of new tokens rooted at x0 (the last accepted token, not yet in
the KV cache): a greedy step is a single node, a draft chain is a path, a token tree is a tree, and the
lookahead window is a tree too — window token L_l[j] hangs under L_{l-1}[j], and row 0 is a chain under
x0 — so that "each token sees the cache, its ancestors and itself" reproduces the paper's mask exactly.
Position of a node = cache length + its depth. One builder therefore serves all methods.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch


def depths_of(parents: list[int]) -> list[int]:
    """Depth of each node (root = 0); parents must precede their children."""
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        if p >= i:
            raise ValueError(f"node {i} has parent {p}: parents must come first")
        depth[i] = 0 if p < 0 else depth[p] + 1
    return depth


@lru_cache(maxsize=256)
def _tree_visibility(parents: tuple[int, ...]) -> np.ndarray:
    n = len(parents)
    vis = np.zeros((n, n), dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            vis[i] = vis[p]
        vis[i, i] = True
    vis.setflags(write=False)
    return vis


def tree_visibility(parents: list[int] | tuple[int, ...]) -> np.ndarray:
    """Bool [q, q]: True where query i may attend to query j (j is i or an ancestor of i)."""
    return _tree_visibility(tuple(parents))


def step_mask(parents: list[int] | tuple[int, ...], past_len: int, dtype: torch.dtype,
              device: torch.device | str, first: int = 0, upload=None) -> torch.Tensor:
    """Additive float mask [1, 1, q - first, past_len + q]: 0 = attend, finfo.min = masked.

    Float, not bool: transformers' eager attention mis-handles bool 4D masks (docs/engineering-notes.md,
    "Attention masks in transformers").
    The whole cache (the accepted prefix) is visible to every query token. `first`: the rows of nodes
    first.. only (a region already holds nodes 0..first-1 in its cache). Built on the device: only the
    bool tree block travels, through `upload` when given (the Core's pinned, non-blocking staging)."""
    vis = torch.from_numpy(np.array(tree_visibility(parents)[first:]))
    vis = upload(vis) if upload is not None else vis.to(device)
    mask = torch.full((1, 1, vis.shape[0], past_len + vis.shape[1]), torch.finfo(dtype).min, dtype=dtype,
                      device=device)
    mask[0, 0, :, :past_len] = 0
    mask[0, 0, :, past_len:].masked_fill_(vis, 0)
    return mask


def grow_level(anc: torch.Tensor, first: int, par: torch.Tensor, past_len: int,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A tree level whose parents were picked on the device (no host read): `anc` is the bool [R, R]
    ancestor-or-self matrix of the region's rows so far, `par` the new rows' parents as rows of the level
    starting at region row `first` (unused while R is 0: the first level hangs under the accepted text
    only). Returns the grown
    matrix [R + n, R + n] and the new rows' additive mask [n, past_len + R + n] (step_mask's values: the
    accepted text and each row's ancestors and itself visible), both built on anc's device."""
    dev, R = anc.device, anc.shape[0]
    n = par.shape[0]
    vis = torch.zeros((n, R + n), dtype=torch.bool, device=dev)
    if R:
        vis[:, :R] = anc.index_select(0, par + first)
    vis[:, R:] = torch.eye(n, dtype=torch.bool, device=dev)
    grown = torch.zeros((R + n, R + n), dtype=torch.bool, device=dev)
    grown[:R, :R] = anc
    grown[R:] = vis
    mask = torch.full((n, past_len + R + n), torch.finfo(dtype).min, dtype=dtype, device=dev)
    mask[:, :past_len] = 0
    mask[:, past_len:].masked_fill_(vis, 0)
    return grown, mask


def chain_parents(n: int) -> list[int]:
    """A causal chain of n tokens (prefill, greedy, one draft chain)."""
    return list(range(-1, n - 1))


def add_chains(parents: list[int], roles: list[str], slots: list, lengths: list[int],
               role: str = "candidate") -> None:
    """Append candidate chains, each hanging under x0 (query index 0); slot = (candidate, offset)."""
    for g, n in enumerate(lengths):
        for i in range(n):
            parents.append(0 if i == 0 else len(parents) - 1)
            roles.append(role); slots.append((g, i))


def add_trie(parents: list[int], roles: list[str], slots: list, cands: list[list[int]]) -> list[int]:
    """Append candidates merged into a prefix tree under x0: candidates that share a prefix share its
    nodes, so the step spends no query tokens on repeats. slot = (first candidate, offset) of a node.
    Returns the query tokens appended."""
    children: dict[tuple[int, int], int] = {}
    tokens = []
    for g, cand in enumerate(cands):
        node = 0
        for i, t in enumerate(cand):
            nxt = children.get((node, t))
            if nxt is None:
                nxt = children[(node, t)] = len(parents)
                parents.append(node); roles.append("candidate"); slots.append((g, i)); tokens.append(t)
            node = nxt
    return tokens
