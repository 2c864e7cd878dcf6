"""The embedded models' card on the page: data, size, bits/byte, and what greedy decoding of a small model
does (it loops) and how sampling changes it.

Why: every example yielded repetitive text and the page never said why. The numbers are read from
assets/README.md (the card the asset builder writes), so the page never disagrees with it; only the
teaching paragraph is written here.
"""
from __future__ import annotations

from pathlib import Path

from decoding.models import ASSETS

CARD = ASSETS / "README.md"  # assets/README.md in a checkout, decodescope/assets/README.md installed
TEACH = (
    "**Why the examples repeat themselves.** These are tiny models (sizes above) trained on a small code "
    "corpus. Greedy decoding always takes the single most likely next token, "
    "and on a small model the most likely continuation of a line is often a line it has just written, so "
    "long greedy runs loop (the card's Limitations say so). That repetition is also what lookahead's n-gram "
    "pool and the draft model guess easily, so acceptance here is higher than on a strong model.\n\n"
    "**Sampling changes it.** Open *sampling* and set temperature 0.8 (with a seed): the model draws from its "
    "distribution instead of taking the top token, and the same prompt gives varied code. Every method keeps "
    "that distribution exactly, so the Race then reports exactness as distributional, not token by token.")


def _section(text: str, start: str) -> str:
    """The lines from the one starting with `start` up to the next blank line ('' if absent)."""
    lines = text.splitlines()
    at = next((i for i, x in enumerate(lines) if x.startswith(start)), None)
    if at is None:
        return ""
    out = []
    for x in lines[at:]:
        if not x.strip():
            break
        out.append(x)
    return "\n".join(out)


def card_md(path: Path = CARD) -> str:
    """Markdown for the page: the size/quality table and the data line from the card, then TEACH."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return TEACH
    table = _section(text, "| | target | draft |")
    intro = next((b.strip() for b in text.split("\n\n") if b.strip() and not b.lstrip().startswith("#")), "")
    parts = ["**The embedded models** (`assets/target`, `assets/draft`; the full card is `assets/README.md`)",
             " ".join(intro.split()), table, TEACH]
    return "\n\n".join(p for p in parts if p)
