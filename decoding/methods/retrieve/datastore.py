"""REST's datastore (He et al., 2023, arXiv 2311.08252): a tokenised corpus plus its suffix array, memory-mapped.

Why this layout: the lookup REST needs, "the longest suffix of the context that occurs in the corpus, and what
followed it", is a binary search over a suffix array, and a suffix array over a file can be searched in place
(np.memmap), so a datastore of millions of tokens opens in milliseconds and costs no RAM until touched.

Files in the datastore folder:
  tokens.bin      the corpus, token ids as big-endian uint16 (uint32 for vocabularies over 65,535), documents
                  separated by the all-ones id (SEP). Big-endian, so comparing bytes compares token sequences.
  sa.bin          the suffix array: little-endian uint32 token positions, sorted by the suffix starting there
                  (optional up to 8M tokens: rebuilt at load and checked against the recorded CRC-32).
  datastore.json  format, tokenizer fingerprint, token count, widths, the source files (name, first token,
                  tokens), and the CRC-32 of both binary files (checked on load: a truncated or corrupt file
                  is one clear error, never a wrong draft).
The suffix array is built by pydivsufsort 0.0.20 (libdivsufsort, MIT) over the big-endian bytes; keeping the
suffixes at token boundaries gives the token-level suffix array, since byte order equals token order there.
"""
from __future__ import annotations

from dataclasses import dataclass
import hashlib
import json
import mmap
import time
import zlib
from pathlib import Path

import numpy as np

FORMAT = "decodescope.datastore/1"
META, TOKENS, SA = "datastore.json", "tokens.bin", "sa.bin"
MAX_META_BYTES = 4 * 2**20          # datastore.json: the file list is the only part that grows
MAX_FILES = 200_000                 # source files recorded (and read when building)
MAX_FILE_BYTES = 64 * 2**20         # one source file
MAX_TOKENS = 2**31 - 2              # positions fit uint32 with room for SEP
MAX_TOKENS_WITHOUT_SA = 8_000_000   # a datastore without sa.bin gets its suffix array at load up to this size
TEXT_SUFFIXES = {".txt", ".md", ".py", ".rst", ".json", ".jsonl", ".c", ".h", ".js", ".ts", ".java", ".go", ".rs",
                 ".toml", ".yaml", ".yml", ".cfg", ".ini", ".sh", ".html", ".css", ".tex", ""}


class DatastoreError(ValueError):
    """A datastore that cannot be used (missing, truncated, corrupt, another tokenizer); str() is one line."""


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of the vocabulary (token text -> id) and the tokenizer's class: the same ids mean the same
    text only when these agree. Special tokens are in the vocabulary, so they count too."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    h = hashlib.sha256(type(tokenizer).__name__.removesuffix("Fast").encode())
    h.update(json.dumps(vocab, ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def source_files(paths: list[str | Path]) -> list[Path]:
    """The text files named, or found under the folders named (sorted; hidden entries skipped), bounded."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES
                           and not any(part.startswith(".") for part in f.relative_to(p).parts))
        elif p.is_file():
            found = [p]
        else:
            raise DatastoreError(f"no file or folder at {p}")
        out += found
        if len(out) > MAX_FILES:
            raise DatastoreError(f"more than {MAX_FILES:,} source files: build from fewer")
    if not out:
        raise DatastoreError("no text files found in " + " ".join(map(str, paths)))
    return out


def _width(vocab_size: int) -> int:
    return 2 if vocab_size <= 0xFFFF else 4  # the all-ones id of the width is the separator


def batch_encoder(tokenizer):
    """texts -> token ids as tokenizer(text, add_special_tokens=False) gives them. A fast tokenizer's Rust
    backend without offsets (encode_batch_fast, tokenizers >= 0.21) halves the build's tokenising time."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch_fast"):
        return lambda texts: [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
    return lambda texts: tokenizer(texts, add_special_tokens=False)["input_ids"]


def build(tokenizer, paths: list[str | Path], out: str | Path, progress=None) -> dict:
    """Tokenise the files (UTF-8; undecodable ones skipped) and write the datastore to `out`; returns its
    metadata plus timings. progress(done_files, total_files, tokens) is called as files are read (the CLI
    draws a tqdm bar from it)."""
    files = source_files(paths)
    t0 = time.perf_counter()
    docs, names, n, batch = [], [], 0, []
    encode = batch_encoder(tokenizer)

    def flush() -> None:
        nonlocal n
        enc = encode([t for _, t in batch])
        for (f, _), ids in zip(batch, enc):
            if ids:
                docs.append(np.asarray(ids, dtype=np.int64))
                names.append(f.name if len(files) == 1 else str(f))
                n += len(ids) + 1
        batch.clear()

    for i, f in enumerate(files):
        if f.stat().st_size > MAX_FILE_BYTES:
            raise DatastoreError(f"{f} is larger than {MAX_FILE_BYTES // 2**20} MB: split it")
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            text = ""
        if text.strip():
            batch.append((f, text))
        if sum(len(t) for _, t in batch) > 4_000_000 or i == len(files) - 1:
            flush()
            if n > MAX_TOKENS:
                raise DatastoreError(f"more than {MAX_TOKENS:,} tokens: build from fewer files")
        if progress is not None:
            progress(i + 1, len(files), n)
    t_tok = time.perf_counter() - t0
    meta = write(out, docs, names, tokenizer_fingerprint(tokenizer), len(tokenizer),
                 str(getattr(tokenizer, "name_or_path", "")))
    return {**meta, "tokenize_s": round(t_tok, 3), "total_s": round(time.perf_counter() - t0, 3)}


def write(out: str | Path, docs: list, names: list[str], fingerprint: str, vocab_size: int,
          tokenizer_name: str = "") -> dict:
    """Write token documents (lists or arrays of ids) as a datastore: tokens.bin, sa.bin, datastore.json.
    The suffix array comes from pydivsufsort over the big-endian bytes, kept at token boundaries."""
    from pydivsufsort import divsufsort

    if not docs or not any(len(d) for d in docs):
        raise DatastoreError("the source files hold no text")
    w = _width(vocab_size)
    dtype, sep = np.dtype(">u2" if w == 2 else ">u4"), (1 << (8 * w)) - 1
    t0 = time.perf_counter()
    parts, files, n = [], [], 0
    for d, name in zip(docs, names):
        arr = np.asarray(d, dtype=np.int64)
        if len(arr) == 0:
            continue
        if arr.min() < 0 or arr.max() >= vocab_size:
            raise DatastoreError(f"{name}: token ids outside the vocabulary [0, {vocab_size})")
        parts += [arr, np.array([sep], dtype=np.int64)]
        files.append({"name": name, "start": n, "tokens": len(arr)})
        n += len(arr) + 1
    data = np.concatenate(parts).astype(dtype)  # big-endian after the join (concatenate returns native order)
    raw = data.view(np.uint8)  # the big-endian bytes, writable (divsufsort refuses read-only buffers)
    sa = divsufsort(raw)
    sa = (sa[sa % w == 0] // w).astype("<u4")  # suffixes at token boundaries, in token positions
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok_bytes, sa_bytes = data.tobytes(), sa.tobytes()
    (out / TOKENS).write_bytes(tok_bytes)
    (out / SA).write_bytes(sa_bytes)
    meta = {"format": FORMAT, "tokenizer": fingerprint, "tokenizer_name": tokenizer_name[-200:],
            "vocab_size": int(vocab_size), "width": w, "tokens": int(n), "files": files,
            "crc32": {TOKENS: zlib.crc32(tok_bytes), SA: zlib.crc32(sa_bytes)}}
    (out / META).write_text(json.dumps(meta))
    return {**meta, "suffix_array_s": round(time.perf_counter() - t0, 3)}


@dataclass
class Match:
    """The longest suffix of the context found in a token store, and what followed its occurrences.
    conts: [k, span] continuation tokens (-1 past a document's end); starts: where each occurrence of the
    suffix begins (a token position in the store); count: occurrences in all (k may be fewer: sampled)."""
    length: int
    count: int
    conts: np.ndarray
    starts: np.ndarray


def _check_meta(meta: object, where: str) -> dict:
    """Types and ranges of datastore.json, before any number from it is used to size or index anything."""
    ok = (isinstance(meta, dict) and meta.get("format") == FORMAT and isinstance(meta.get("tokenizer"), str)
          and meta.get("width") in (2, 4) and isinstance(meta.get("tokens"), int) and 0 < meta["tokens"] <= MAX_TOKENS
          and isinstance(meta.get("vocab_size"), int) and 0 < meta["vocab_size"] < (1 << (8 * meta["width"])) - 1
          and isinstance(meta.get("files"), list) and len(meta["files"]) <= MAX_FILES
          and isinstance(meta.get("crc32"), dict)
          and all(isinstance(meta["crc32"].get(k), int) for k in (TOKENS, SA)))
    if not ok:
        raise DatastoreError(f"{where}: {META} is not a DecodeScope datastore description ({FORMAT})")
    for f in meta["files"]:
        if not (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("start"), int)
                and isinstance(f.get("tokens"), int) and 0 <= f["start"] < meta["tokens"]):
            raise DatastoreError(f"{where}: {META} lists a source file it cannot describe")
    return meta


class Datastore:
    """A built datastore, memory-mapped; lookup() is REST's retrieval (longest matching suffix by binary search
    over the suffix array, then the continuations of its occurrences)."""

    def __init__(self, path: str | Path, tokenizer=None, fingerprint: str | None = None):
        p = Path(path).expanduser()
        where = p.name or str(p)
        if not (p / META).is_file():
            raise DatastoreError(f"no datastore at {p} (no {META}; build one with python -m decoding build-datastore)")
        if (p / META).stat().st_size > MAX_META_BYTES:
            raise DatastoreError(f"{where}: {META} is larger than {MAX_META_BYTES // 2**20} MB")
        try:
            meta = json.loads((p / META).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise DatastoreError(f"{where}: {META} is not valid JSON") from None
        self.meta = _check_meta(meta, where)
        self.path, self.n, self.w = p, meta["tokens"], meta["width"]
        fp = fingerprint or (tokenizer_fingerprint(tokenizer) if tokenizer is not None else None)
        if fp is not None:
            self.check_tokenizer(fp)
        self.sep = (1 << (8 * self.w)) - 1
        self._maps = []
        self.data = self._map(TOKENS, self.n * self.w)
        self.sa_buf = self._map(SA, self.n * 4) if (p / SA).exists() else self._suffix_array()
        self.tokens = np.frombuffer(self.data, dtype=">u2" if self.w == 2 else ">u4")
        self.sa = np.frombuffer(self.sa_buf, dtype="<u4")
        self.file_starts = np.array([f["start"] for f in meta["files"]], dtype=np.int64)
        self.file_names = [f["name"] for f in meta["files"]]

    def max_id(self) -> int:
        """The largest token id the corpus holds (-1 when empty). Read from the tokens themselves, not from
        vocab_size: that is the tokenizer's size, which can exceed the model's embedding (added tokens, or
        an embedding padded the other way) while every id actually stored fits the model."""
        ids = self.tokens[self.tokens != self.sep]
        return int(ids.max()) if len(ids) else -1

    def check_tokenizer(self, fingerprint: str) -> None:
        """Refuse a datastore built with another tokenizer: its ids would mean other text."""
        if fingerprint != self.meta["tokenizer"]:
            raise DatastoreError(f"{self.path.name} was built with another tokenizer "
                                 f"({self.meta.get('tokenizer_name') or '?'}, fingerprint {self.meta['tokenizer']}; "
                                 f"this model's is {fingerprint}): build one with this model's tokenizer")

    def _map(self, name: str, size: int) -> mmap.mmap:
        f = self.path / name
        if not f.is_file():
            raise DatastoreError(f"{self.path.name}: {name} is missing")
        if f.stat().st_size != size:
            raise DatastoreError(f"{self.path.name}: {name} has {f.stat().st_size:,} bytes, {size:,} expected "
                                 "(truncated or from another build)")
        with open(f, "rb") as fh:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        if zlib.crc32(m) != self.meta["crc32"][name]:  # ~0.5 ms per MB, once per load
            raise DatastoreError(f"{self.path.name}: {name} is corrupt (its CRC-32 differs from {META})")
        self._maps.append(m)
        return m

    def _suffix_array(self) -> bytes:
        """The suffix array built now from tokens.bin, for a datastore shipped without sa.bin (the shipped one
        for the default model: the working tree must fit the 64 MiB a GPU machine receives; 0.66M tokens take
        about half a second). Bounded, and checked against the CRC-32 that datastore.json records for sa.bin."""
        from pydivsufsort import divsufsort
        if self.n > MAX_TOKENS_WITHOUT_SA:
            raise DatastoreError(f"{self.path.name}: {SA} is missing (it is rebuilt at load only for datastores "
                                 f"up to {MAX_TOKENS_WITHOUT_SA:,} tokens)")
        raw = np.frombuffer(self.data, dtype=np.uint8).copy()  # writable: divsufsort refuses read-only buffers
        sa = divsufsort(raw)
        sa = (sa[sa % self.w == 0] // self.w).astype("<u4").tobytes()
        if zlib.crc32(sa) != self.meta["crc32"][SA]:
            raise DatastoreError(f"{self.path.name}: the suffix array rebuilt from {TOKENS} differs from the one "
                                 f"{META} records")
        return sa

    def _bound(self, key: bytes, upper: bool) -> int:
        """First suffix-array index whose suffix is >= key (upper: > key as a prefix): a binary search of
        ~log2(n) byte comparisons on the memory map."""
        lo, hi, k, d, sa = 0, self.n, len(key), self.data, self.sa
        while lo < hi:
            mid = (lo + hi) // 2
            s = int(sa[mid]) * self.w
            probe = d[s:s + k]
            if probe < key or (upper and probe == key):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _range(self, suffix: list[int]) -> tuple[int, int]:
        key = np.asarray(suffix, dtype=self.tokens.dtype).tobytes()
        lo = self._bound(key, False)
        return lo, self._bound(key, True)

    def lookup(self, context: list[int], max_suffix: int = 16, continuations: int = 5000, span: int = 10) -> Match | None:
        """The longest suffix of `context` (at most max_suffix tokens) that occurs in the store, found by a
        binary search over its length (a suffix occurs only if its shorter suffixes do), and the next `span`
        tokens after up to `continuations` of its occurrences, spread evenly over all of them (the first
        ones in suffix-array order would favour lexicographically small continuations)."""
        ctx = list(context[-max_suffix:])
        if ctx and max(ctx) >= self.sep:  # an id the store cannot hold: match only what follows it
            ctx = ctx[max(i for i, t in enumerate(ctx) if t >= self.sep) + 1:]
        best, rng = 0, (0, 0)
        lo_len, hi_len = 1, len(ctx)
        while lo_len <= hi_len:
            m = (lo_len + hi_len) // 2
            r = self._range(ctx[-m:])
            if r[1] > r[0]:
                best, rng, lo_len = m, r, m + 1
            else:
                hi_len = m - 1
        if best == 0:
            return None
        lo, hi = rng
        count = hi - lo
        k = min(count, continuations)
        idx = lo + (np.arange(k, dtype=np.int64) * count) // k
        starts = self.sa[idx].astype(np.int64)
        pos = starts[:, None] + best + np.arange(span, dtype=np.int64)[None, :]
        conts = self.tokens[np.minimum(pos, self.n - 1)].astype(np.int64)
        # past the store's end, a document's end (SEP) or an id outside the vocabulary: nothing more to draft
        dead = (pos >= self.n) | (np.cumsum(conts >= self.meta["vocab_size"], axis=1) > 0)
        conts[dead] = -1
        return Match(best, count, conts, starts)

    def where(self, position: int) -> tuple[str, int]:
        """(source file, token offset in it) of a token position of the store."""
        i = max(0, int(np.searchsorted(self.file_starts, position, side="right")) - 1)
        return (self.file_names[i] if self.file_names else "?"), int(position - (self.file_starts[i] if len(
            self.file_starts) else 0))
