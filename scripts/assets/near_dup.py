"""Near-duplicate files by MinHash over code-token shingles, with LSH banding (numpy only).

Exact duplicates are caught by a hash of the text; near duplicates (a file copied between packages with a
changed header, a backport of a stdlib module, two versions of the same generated table) by the Jaccard
similarity of their sets of SHINGLE-token windows. 64 hash functions in 8 bands of 8 rows make pairs with
Jaccard >= ~0.8 candidates with high probability; a candidate is a duplicate when the share of equal
MinHash values (an unbiased Jaccard estimate) is >= THRESHOLD.
"""
from __future__ import annotations

import re
import zlib

import numpy as np

SHINGLE = 5
NUM_HASHES, BANDS = 64, 8
THRESHOLD = 0.8
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|\S")
_rng = np.random.default_rng(20261123)
_A = _rng.integers(1, 2**63, size=NUM_HASHES, dtype=np.uint64) * np.uint64(2) + np.uint64(1)  # odd: bijective
_B = _rng.integers(0, 2**63, size=NUM_HASHES, dtype=np.uint64)
_MIX = np.uint64(0x9E3779B97F4A7C15)


def token_hashes(text: str, cache: dict[str, int]) -> np.ndarray:
    """Stable 64-bit-ish hash of each code token (identifiers, numbers, single symbols); whitespace ignored."""
    out = []
    for t in TOKEN.findall(text):
        h = cache.get(t)
        if h is None:
            h = cache[t] = zlib.crc32(t.encode("utf-8")) * 2654435761 + len(t)
        out.append(h)
    return np.asarray(out, dtype=np.uint64)


def signature(text: str, cache: dict[str, int]) -> np.ndarray | None:
    """MinHash signature (NUM_HASHES uint64) of the file's token shingles; None when it is too short."""
    th = token_hashes(text, cache)
    if th.size < SHINGLE:
        return None
    n = th.size - SHINGLE + 1
    sh = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(SHINGLE):  # polynomial hash of each window, wrapping mod 2**64
            sh = sh * _MIX + th[j : j + n]
        sh = np.unique(sh)
        sig = np.full(NUM_HASHES, np.iinfo(np.uint64).max, dtype=np.uint64)
        for i in range(0, sh.size, 1 << 15):
            block = sh[i : i + (1 << 15), None] * _A[None, :] + _B[None, :]
            sig = np.minimum(sig, block.min(axis=0))
    return sig


def clusters(sigs: list[np.ndarray | None]) -> list[list[int]]:
    """Groups (of size >= 2) of indices whose signatures agree on >= THRESHOLD of their values."""
    parent = list(range(len(sigs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    rows = NUM_HASHES // BANDS
    for b in range(BANDS):
        seen: dict[bytes, int] = {}
        for i, s in enumerate(sigs):
            if s is None:
                continue
            key = s[b * rows : (b + 1) * rows].tobytes()
            j = seen.setdefault(key, i)
            if j != i and find(i) != find(j) and float(np.mean(sigs[i] == sigs[j])) >= THRESHOLD:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(sigs)):
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]
