"""Stage-2 drafter for staged speculative decoding: an n-gram model that drafts for the draft model.

Continuation rule: repeatedly take the longest suffix (n = max_n .. 1) of the sequence that occurred
earlier in the prompt/accepted text and append the token that followed its most recent occurrence; if
the text has no match, fall back to an optional corpus table (n-gram -> most frequent next token, built
by `build_table` from tokenised training text). It costs no model forward; the draft model verifies
every proposal, so a poor stage-2 guess only costs a few extra nodes in a draft forward.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

from decoding.methods.lookup.ngrams import NGramIndex

Table = dict[tuple[int, ...], int]


class NGramStage2:
    name = "stage2"

    def __init__(self, max_n: int = 3, table: Table | None = None):
        if max_n < 1:
            raise ValueError("stage-2 n-gram size must be >= 1")
        self.max_n = max_n
        self.table = table or {}

    def config(self) -> dict:
        return {"max_n": self.max_n, "table_entries": len(self.table)}

    def start(self, prompt_ids: list[int]) -> None:
        self.index = NGramIndex(self.max_n, 1, follow=1)
        self.update(prompt_ids)

    def update(self, context: list[int]) -> None:
        """Index every n-gram of the committed text that has a known next token (the latest wins)."""
        self.index.update(context)

    def next_token(self, seq: list[int]) -> int | None:
        for n in range(min(self.max_n, len(seq)), 0, -1):
            key = tuple(seq[-n:])
            t = self.index.latest(key)
            if t is None:
                t = self.table.get(key)
            if t is not None:
                return t
        return None

    def propose(self, seq: list[int], m: int) -> list[int]:
        """Up to m tokens continuing seq (committed context plus the tree path)."""
        tail = list(seq[-self.max_n:])
        out: list[int] = []
        for _ in range(m):
            t = self.next_token(tail)
            if t is None:
                break
            out.append(t)
            tail = (tail + [t])[-self.max_n:]
        return out


def build_table(sequences: Iterable[list[int]], max_n: int = 3, min_count: int = 2,
                max_entries: int = 200_000) -> Table:
    """n-gram -> most frequent next token over tokenised corpus sequences (a small, static stage 2)."""
    counts: dict[tuple[int, ...], Counter] = defaultdict(Counter)
    for seq in sequences:
        index = NGramIndex(max_n, 1, follow=1)
        index.update(seq)
        for key, ends in index.ends.items():
            for end in ends:
                counts[key][seq[end + 1]] += 1
    rows = []
    for key, c in counts.items():
        tok, k = c.most_common(1)[0]
        if k >= min_count:
            rows.append((k, key, tok))
    rows.sort(key=lambda r: -r[0])
    return {key: tok for _, key, tok in rows[:max_entries]}


def save_table(table: Table, path: str | Path) -> None:
    Path(path).write_text(json.dumps({" ".join(map(str, k)): v for k, v in table.items()}))


def load_table(path: str | Path) -> Table:
    try:
        raw = json.loads(Path(path).read_text())
        return {tuple(int(x) for x in k.split()): int(v) for k, v in raw.items()}
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"cannot read n-gram table {path}: {e}") from None


def main(argv: list[str] | None = None) -> int:
    """python -m decoding.methods.draft_model.stage2 --tokenizer DIR --out table.json PATH... (files or directories of .py)"""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m decoding.methods.draft_model.stage2", description="build a stage-2 n-gram table")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-n", type=int, default=3)
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--max-entries", type=int, default=100_000)
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    files = [f for p in map(Path, args.paths) for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    seqs = [tok(f.read_text(errors="replace"))["input_ids"] for f in files]
    table = build_table(seqs, args.max_n, args.min_count, args.max_entries)
    save_table(table, args.out)
    print(f"{len(table)} n-grams from {len(files)} files, {sum(map(len, seqs))} tokens -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
