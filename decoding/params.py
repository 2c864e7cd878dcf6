"""Every decoding parameter's limits and checks, in one place for the API, the CLI and the app.

Why one module: the CLI, `decoding.api.run` and the app must refuse the same values with the same
sentence, and the app shows the same per-step query-token budget the engine will actually run.
"""
from __future__ import annotations

# Documented caps: beyond them a step's query or a run would be too large to be useful or safe.
LIMITS = {"max_new_tokens": (1, 4096), "window": (1, 64), "ngram": (2, 16), "guesses": (0, 64),
          "num_tokens": (1, 64), "max_ngram": (1, 8), "candidates": (1, 16), "top_k": (0, 100000),
          "draft_tokens": (1, 32), "tree_width": (1, 16), "tree_depth": (1, 16), "tree_budget": (1, 256),
          "text_span": (1, 32), "block": (1, 64), "reference_tokens": (1, 64),
          "draft_vocab": (0, 1_000_000)}
MAX_TREE_NODES = 256
DEFAULT_CONFIDENCE = 0.4  # drafting stops below this draft probability (HF assisted generation's default)


def check_range(name: str, value: int) -> None:
    lo, hi = LIMITS[name]
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name.replace('_', '-')} must be an integer in [{lo}, {hi}], got {value}")

