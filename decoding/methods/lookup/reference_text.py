"""Reference texts for reference lookup (prompt lookup over texts the user supplies): read, check, tokenise.

Why one module: the CLI (--reference FILE, repeatable), decoding.api.run(reference=...) and the app's
reference box must refuse the same inputs with the same sentence: an empty text, a binary file, more
than MAX_REFERENCE_CHARS in all.
"""
from __future__ import annotations

from pathlib import Path

MAX_REFERENCE_CHARS = 200_000  # all references together: ~50k tokens, an index built in well under a second
MAX_REFERENCES = 16


def read_reference(path: str | Path) -> str:
    """A reference file's text; a missing, binary (NUL bytes or not UTF-8) or empty file is refused."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"reference file {str(path)!r} does not exist")
    if p.stat().st_size > 4 * MAX_REFERENCE_CHARS:
        raise ValueError(f"reference file {p.name!r} is {p.stat().st_size:,} bytes; references may hold at most "
                         f"{MAX_REFERENCE_CHARS:,} characters in all")
    raw = p.read_bytes()
    try:
        if b"\x00" in raw:
            raise UnicodeDecodeError("utf-8", raw, 0, 1, "NUL byte")
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"reference file {p.name!r} is binary, not UTF-8 text") from None
    if not text.strip():
        raise ValueError(f"reference file {p.name!r} is empty")
    return text


def check_references(reference: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """The reference texts as a list (a str is one reference); empty ones and oversize totals refused."""
    if reference is None:
        return []
    texts = [reference] if isinstance(reference, str) else list(reference)
    if len(texts) > MAX_REFERENCES:
        raise ValueError(f"{len(texts)} reference texts; at most {MAX_REFERENCES}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"reference {i + 1} is not text ({type(t).__name__})")
        if not t.strip():
            raise ValueError("a reference text is empty" if len(texts) == 1 else f"reference {i + 1} is empty")
    total = sum(len(t) for t in texts)
    if total > MAX_REFERENCE_CHARS:
        raise ValueError(f"the reference text is too long ({total:,} characters; at most {MAX_REFERENCE_CHARS:,})")
    return texts


def tokenize_references(tokenizer, reference: str | list[str] | None) -> list[list[int]]:
    """Token ids of each reference, tokenised as tokenizer(text) without special tokens (a BOS inside a
    copied span would never match the output)."""
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in check_references(reference)]
