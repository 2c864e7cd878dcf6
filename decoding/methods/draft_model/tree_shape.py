"""A speculative draft's shape (chain of K, tree widths per depth, or a node budget): parsed and checked once
for the API, the CLI and the app, and the query tokens one target step verifies with it.
"""
from __future__ import annotations

from dataclasses import dataclass

from decoding.params import DEFAULT_CONFIDENCE, LIMITS, MAX_TREE_NODES, check_range


@dataclass
class Shape:
    """chain: widths [1] * K; tree: widths per depth; dynamic: best `budget` nodes up to depth K."""
    mode: str
    widths: list[int]
    budget: int = 0
    branch: int = 4             # dynamic mode: children considered per node
    confidence: float = 0.0     # a node whose draft probability is below this is a leaf (HF's confidence stop)

    @property
    def depth(self) -> int:
        return len(self.widths)


def level_rows(widths: list[int], d: int) -> int:
    """Nodes at depth d of the full fixed-width tree (depth 0: the root)."""
    n = 1
    for w in widths[:d]:
        n *= w
    return n


# ---- the shape's parameters: checked once for the API, the CLI and the app ----

def parse_tree(text: str | list[int]) -> list[int]:
    """'3,2,1' -> [3, 2, 1] (children per node at depths 1, 2, 3)."""
    if isinstance(text, (list, tuple)):
        return list(text)
    try:
        return [int(x) for x in str(text).replace(" ", "").split(",")]
    except ValueError:
        raise ValueError(f"tree must be comma-separated widths per depth like 3,2,1, got {text!r}") from None


def tree_nodes(widths: list[int]) -> int:
    """Drafted nodes of a full fixed-width tree (x0 not counted): 3,2,1 -> 3 + 6 + 6 = 15."""
    total, level = 0, 1
    for w in widths:
        level *= w
        total += level
    return total


def make_shape(draft_tokens: int | None = None, tree=None, tree_budget: int | None = None,
               staged: bool = False, confidence: float | None = None) -> Shape:
    """Validate the speculative parameters. confidence: a drafted node whose draft probability is below
    it is not expanded further (default 0.4, HF's assisted generation default, for chains and fixed-width
    trees; unused by dynamic trees, which rank nodes by cumulative probability within the budget)."""
    shape = _shape(draft_tokens, tree, tree_budget, staged)
    if confidence is not None:
        if not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
            raise ValueError(f"draft-confidence must be in [0, 1], got {confidence}")
        shape.confidence = float(confidence)
    elif shape.mode != "dynamic":
        shape.confidence = DEFAULT_CONFIDENCE
    return shape


def _shape(draft_tokens, tree, tree_budget, staged) -> Shape:
    if tree is not None and tree_budget is not None:
        raise ValueError("give either tree (fixed widths) or tree-budget (dynamic tree), not both")
    if tree is not None and draft_tokens is not None:
        raise ValueError("tree widths set the depth: do not also give draft-tokens")
    if draft_tokens is not None:
        check_range("draft_tokens", draft_tokens)
    if tree is not None:
        widths = parse_tree(tree)
        lo, hi = LIMITS["tree_depth"]
        if not lo <= len(widths) <= hi:
            raise ValueError(f"tree must have {lo}..{hi} depths, got {len(widths)}")
        for w in widths:
            check_range("tree_width", w)
        total = tree_nodes(widths)
        if total > MAX_TREE_NODES:
            raise ValueError(f"tree {','.join(map(str, widths))} has {total} nodes; at most {MAX_TREE_NODES}")
        return Shape("chain" if all(w == 1 for w in widths) else "tree", widths)
    if tree_budget is not None:
        check_range("tree_budget", tree_budget)
        if staged:
            raise ValueError("staged works with chain and fixed-width tree modes, not tree-budget")
        return Shape("dynamic", [1] * (draft_tokens or 6), budget=tree_budget)
    return Shape("chain", [1] * (draft_tokens or 4))


def speculative_query_tokens(shape: Shape) -> int:
    """Most query tokens one target step verifies: x0 plus every drafted node."""
    if shape.mode == "dynamic":
        return 1 + shape.budget
    return 1 + tree_nodes(shape.widths)
