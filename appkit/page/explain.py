"""Plain-words explanations shown beside the live pictures (markdown): each method's own, from its spec, and
the paragraph every method shares."""
from __future__ import annotations

from ..run.method_fields import spec

COMMON = ("**Why extra tokens per step are nearly free.** Decoding one token reads every weight of the model "
          "from memory but does little arithmetic with it: the step is *memory-bound*. Checking 10 or 50 "
          "tokens in the same forward pass reads the same weights once, so it costs about the same time — "
          "until the step becomes compute-bound (see the roofline and *step latency vs query tokens* in the "
          "Profile tab). Every method here spends that spare compute on guesses and keeps only the guesses "
          "the model itself agrees with.")


def explain(method: str) -> str:
    """The method's explanation (its spec's, declared next to its drafter), then what every method shares."""
    from .lesson import TEACHING, WINDOW, window_why
    s = spec(method)
    teach = TEACHING.get(method, {})
    cpu = f"\n\n{window_why(method, None, teach)}" if all(k in teach for k in WINDOW) else ""
    return (s.explain if s is not None else "") + cpu + "\n\n" + COMMON
