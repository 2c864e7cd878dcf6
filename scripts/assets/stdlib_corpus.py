"""Corpus, held-out split, tokenizer and token cache for the DecodeScope default models.

The corpus is the pure-Python part of the local standard library (``sysconfig.get_paths()["stdlib"]``):
every ``*.py`` file, excluding test folders, ``site-packages`` and caches.  The held-out validation set is
fixed and documented: a file is held out when ``sha256(relative_path)`` taken as an integer is divisible by
``HELDOUT_MODULUS`` (relative paths use "/" separators), so the split depends only on the file names.
"""
from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path

import numpy as np

EOS = "<|endoftext|>"
HELDOUT_MODULUS = 40  # ~2.5 % of the files are held out
EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "dist-packages"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(rel: str) -> bool:
    return int(hashlib.sha256(rel.encode("utf-8")).hexdigest(), 16) % HELDOUT_MODULUS == 0


def is_validation(rel: str, modulus: int) -> bool:
    """Training files set aside to pick the best checkpoint (never the held-out evaluation files, which
    is_heldout already removed from the training set); a salted hash, so it is independent of is_heldout."""
    return modulus > 0 and int(hashlib.sha256(b"valid:" + rel.encode("utf-8")).hexdigest(), 16) % modulus == 0


def list_files(root: Path | None = None) -> list[str]:
    """Sorted relative paths ("/"-separated) of the corpus files."""
    root = Path(root or stdlib_root())
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith("."))
        for name in filenames:
            if name.endswith(".py"):
                out.append(Path(dirpath, name).relative_to(root).as_posix())
    return sorted(out)


def read_text(root: Path, rel: str) -> str | None:
    """Exact file text (newlines kept as they are); None when the file is not UTF-8."""
    try:
        with open(root / rel, encoding="utf-8", newline="") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None


def load_split(root: Path | None = None, tiny: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """Return (train, heldout) dicts rel_path -> text. ``tiny`` keeps a small deterministic subset."""
    root = Path(root or stdlib_root())
    train, held = {}, {}
    for rel in list_files(root):
        text = read_text(root, rel)
        if not text:
            continue
        (held if is_heldout(rel) else train)[rel] = text
    if tiny:
        train = {k: train[k] for k in sorted(train)[:40] if len(train[k]) < 60_000}
        held = {k: held[k] for k in sorted(held, key=lambda k: len(held[k]))[:2]}
    return train, held


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE (GPT-2 style pre-tokenisation, no prefix space, no automatic BOS/EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def wrap_tokenizer(tok, max_len: int):
    """PreTrainedTokenizerFast with bos = eos = pad = <|endoftext|>; nothing is added automatically."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=EOS,
        unk_token=None,
        model_max_length=max_len,
        add_bos_token=False,
        add_eos_token=False,
        clean_up_tokenization_spaces=False,
    )


def encode_docs(tok, docs: list[str]) -> np.ndarray:
    """Token stream of the documents, each followed by EOS, as uint16."""
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.uint16)


def prepare(work: Path, vocab_size: int, max_len: int, tiny: bool, log=print):
    """Tokenizer + token caches in ``work`` (reused when present). Returns (hf_tokenizer, train_ids, val_ids, meta)."""
    from tokenizers import Tokenizer

    work.mkdir(parents=True, exist_ok=True)
    train, held = load_split(tiny=tiny)
    tok_path, meta_path = work / "tokenizer.json", work / "corpus_meta.json"
    if tok_path.exists() and meta_path.exists():
        tok = Tokenizer.from_file(str(tok_path))
        log(f"[corpus] reusing tokenizer {tok_path}")
    else:
        log(f"[corpus] training byte-level BPE (vocab {vocab_size}) on {len(train)} files ...")
        tok = train_tokenizer([train[k] for k in sorted(train)], vocab_size)
        tok.save(str(tok_path))
    tr_path, va_path = work / "train_ids.npy", work / "val_ids.npy"
    if tr_path.exists() and va_path.exists() and meta_path.exists():
        train_ids, val_ids = np.load(tr_path), np.load(va_path)
        meta = json.loads(meta_path.read_text())
    else:
        train_ids = encode_docs(tok, [train[k] for k in sorted(train)])
        val_ids = encode_docs(tok, [held[k] for k in sorted(held)])
        meta = {
            "stdlib": str(stdlib_root()),
            "train_files": len(train),
            "train_bytes": sum(len(t.encode("utf-8")) for t in train.values()),
            "train_tokens": int(train_ids.size),
            "heldout_files": sorted(held),
            "heldout_bytes": sum(len(t.encode("utf-8")) for t in held.values()),
            "heldout_tokens": int(val_ids.size),
            "vocab_size": tok.get_vocab_size(),
        }
        np.save(tr_path, train_ids)
        np.save(va_path, val_ids)
        meta_path.write_text(json.dumps(meta, indent=1))
    log(
        f"[corpus] train {meta['train_files']} files {meta['train_bytes']/1e6:.2f} MB -> {meta['train_tokens']} tokens "
        f"({meta['train_bytes']/meta['train_tokens']:.2f} B/tok); held-out {len(meta['heldout_files'])} files "
        f"{meta['heldout_bytes']/1e3:.0f} kB -> {meta['heldout_tokens']} tokens"
    )
    return wrap_tokenizer(tok, max_len), train_ids, val_ids, meta


def fit_and_validation(work: Path, train: dict[str, str], modulus: int, log=print) -> tuple[np.ndarray, np.ndarray]:
    """(fit_ids, valid_ids): the training files minus a validation slice (is_validation) and that slice, both
    encoded with the run's tokenizer (work/tokenizer.json) and cached. modulus 0: no slice (fit = all)."""
    from tokenizers import Tokenizer

    fit_path, valid_path = work / f"fit_ids_m{modulus}.npy", work / f"valid_ids_m{modulus}.npy"
    if fit_path.exists() and valid_path.exists():
        return np.load(fit_path), np.load(valid_path)
    tok = Tokenizer.from_file(str(work / "tokenizer.json"))
    names = sorted(train)
    valid = [k for k in names if is_validation(k, modulus)]
    fit_ids = encode_docs(tok, [train[k] for k in names if k not in set(valid)])
    valid_ids = encode_docs(tok, [train[k] for k in valid]) if valid else np.zeros(0, dtype=np.uint16)
    np.save(fit_path, fit_ids)
    np.save(valid_path, valid_ids)
    log(f"[corpus] validation slice: {len(valid)} training files, {valid_ids.size} tokens (modulus {modulus}); "
        f"fit on {fit_ids.size} tokens")
    return fit_ids, valid_ids
