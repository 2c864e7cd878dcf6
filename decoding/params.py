"""Every decoding parameter's limits, checks and parsing, in one place for the API, the CLI and the app.

Why one module: the CLI, `decoding.api.run` and the app must refuse the same values with the same
sentence, and the app shows the same per-step query-token budget the engine will actually run.
"""
from __future__ import annotations

from .draft_tree import Shape

# Documented caps: beyond them a step's query or a run would be too large to be useful or safe.
LIMITS = {"max_new_tokens": (1, 4096), "window": (1, 64), "ngram": (2, 16), "guesses": (0, 64),
          "num_tokens": (1, 64), "max_ngram": (1, 8), "candidates": (1, 16), "top_k": (0, 100000),
          "draft_tokens": (1, 32), "tree_width": (1, 16), "tree_depth": (1, 16), "tree_budget": (1, 256),
          "text_span": (1, 32), "block": (1, 64), "reference_tokens": (1, 64),
          "draft_vocab": (0, 1_000_000)}
# Lookahead offers text n-grams (prompt, output) with this many tokens of continuation, not only N-1:
# on the embedded model and code prompts W1 N5 G2 compresses 2.49 instead of 2.26
# (bench/results/cpu-embedded-code.md, python bench/lookahead_sources.py); in a one-off sweep of 4, 7
# and 10, 7 was about as fast as 10 with fewer query tokens.
TEXT_SPAN = 7
MAX_TREE_NODES = 256
DEFAULT_CONFIDENCE = 0.4  # drafting stops below this draft probability (HF assisted generation's default)


def check_range(name: str, value: int) -> None:
    lo, hi = LIMITS[name]
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name.replace('_', '-')} must be an integer in [{lo}, {hi}], got {value}")


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


def lookahead_query_tokens(window: int, ngram: int, guesses: int, text_span: int = TEXT_SPAN) -> int:
    """Most query tokens one lookahead step can run: x0 + the window (W-1 + (N-2)W) + G candidates of up
    to max(N-1, text span) tokens (shared prefixes merge, so real steps are often smaller)."""
    return window * (ngram - 1) + guesses * max(ngram - 1, text_span)


def speculative_query_tokens(shape: Shape) -> int:
    """Most query tokens one target step verifies: x0 plus every drafted node."""
    if shape.mode == "dynamic":
        return 1 + shape.budget
    return 1 + tree_nodes(shape.widths)


def agreement(ids: list[int], reference: list[int]) -> dict:
    """Compare an output with a reference (HF greedy): exactness as measured, not as promised.

    Returns {"identical": bool, "first_divergence": k or None, "compared": n}; k indexes new tokens."""
    n = min(len(ids), len(reference))
    k = next((i for i in range(n) if ids[i] != reference[i]), None)
    if k is None and len(ids) != len(reference):
        k = n
    return {"identical": k is None, "first_divergence": k, "compared": n}


def describe_agreement(a: dict) -> str:
    """'identical' or 'first divergence at token k' (the words the CLI, race and trace use)."""
    return "identical" if a["identical"] else f"first divergence at token {a['first_divergence']}"
