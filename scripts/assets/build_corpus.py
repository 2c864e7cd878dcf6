"""Build the v3 training corpus: permissively licensed PyPI packages + the stdlib, cleaned, split, tokenized.

    python scripts/assets/build_corpus.py                      # download, filter, dedup, split, tokenizer, token files
    python scripts/assets/build_corpus.py --skip-download      # reuse the wheels in <work>/wheels

Steps: pip-download the wheels pinned in scripts/assets/corpus_packages.txt; keep a package only if its licence is
MIT / BSD / Apache-2.0 / PSF (corpus_sources.wheel_licence); drop vendored, generated, minified, fixture and
data files; drop exact and near duplicates (near_dup), letting an evaluation file win over a training copy;
split BY PACKAGE (packages marked `heldout` are evaluation only) and keep v2's held-out stdlib files
(stdlib_corpus.is_heldout) out of training so bits/byte stays comparable with v2; train the byte-level BPE on
a sample of the training files; write uint16 token files that train_models.py memory-maps.
Outputs (git-ignored) in --work (default assets/.corpus); the manifest (every package, version, licence,
file counts) goes to scripts/assets/corpus_manifest.tsv and the totals to assets/results/corpus_stats.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_sources as src  # noqa: E402
import near_dup  # noqa: E402
import stdlib_corpus  # noqa: E402

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[1] / "assets"  # what the scripts build and read: the models, results/, the git-ignored .corpus
SPLITS = ("train", "valid", "heldout_packages", "heldout_stdlib")
VALID_MODULUS = 200  # 1 in 200 training files (salted hash) picks the best checkpoint
STDLIB = "python-stdlib"


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def collect(packages, wheels: Path, download: bool, tiny: bool):
    """(docs, manifest rows). docs: dicts package/path/text/rank; rank orders who wins a duplicate cluster:
    0 held-out stdlib (always kept), 1 held-out package, 2 stdlib training file, 3 package training file."""
    docs, rows = [], []
    train, held = stdlib_corpus.load_split(tiny=tiny)
    version = ".".join(map(str, sys.version_info[:3]))
    for rel, text in sorted({**train, **held}.items()):
        docs.append({"package": STDLIB, "path": rel, "text": text.replace("\r\n", "\n"),
                     "rank": 0 if rel in held else 2})
    rows.append({"package": STDLIB, "version": version, "licence": "PSF-2.0", "source": "CPython LICENSE",
                 "split": "train (v2 held-out files: heldout_stdlib)", "status": "used",
                 "files": len(train) + len(held), "dropped": ""})
    for pkg in packages:
        whl = src.download(pkg, wheels, log) if download else src.find_wheel(wheels, pkg)
        row = {"package": pkg.name, "version": pkg.version, "split": "heldout" if pkg.heldout else "train"}
        if whl is None:
            rows.append({**row, "licence": "", "source": "", "status": "no wheel", "files": 0, "dropped": ""})
            continue
        lic = src.wheel_licence(whl)
        row.update(version=lic["version"], licence=lic["licence"], source=lic["source"])
        if not lic["ok"]:
            rows.append({**row, "status": "rejected: licence", "files": 0, "dropped": ""})
            continue
        reasons, kept = Counter(), 0
        for path, text in src.wheel_files(whl):
            why = src.drop_reason(path, text)
            if why:
                reasons[why] += 1
                continue
            docs.append({"package": pkg.name, "path": path, "text": text, "rank": 1 if pkg.heldout else 3})
            kept += 1
        rows.append({**row, "status": "used", "files": kept,
                     "dropped": " ".join(f"{k}:{v}" for k, v in sorted(reasons.items()))})
    return docs, rows


def dedup(docs: list[dict], log=log) -> list[dict]:
    """Drop exact then near duplicates; in each cluster the best-ranked file stays (held-out stdlib always)."""
    by_hash: dict[str, list[int]] = {}
    for i, d in enumerate(docs):
        by_hash.setdefault(hashlib.sha256(d["text"].encode()).hexdigest(), []).append(i)
    groups = [g for g in by_hash.values() if len(g) > 1]
    first = sorted(g[0] for g in by_hash.values())
    t0, cache = time.time(), {}
    sigs = [near_dup.signature(docs[i]["text"], cache) for i in first]
    log(f"[dedup] {len(docs) - len(first)} exact duplicates; MinHash of {len(first)} files in {time.time()-t0:.0f} s")
    near = near_dup.clusters(sigs)
    groups += [[first[j] for j in g] for g in near]
    drop: dict[int, str] = {}
    for g in groups:
        g = sorted(g, key=lambda i: (docs[i]["rank"], i))
        for i in g[1:]:
            if docs[i]["rank"] != 0:
                drop.setdefault(i, "duplicate")
    log(f"[dedup] {len(near)} near-duplicate clusters; {len(drop)} files dropped as duplicates")
    for i in drop:
        docs[i]["dropped"] = True
    return [d for d in docs if not d.get("dropped")]


def split_of(d: dict) -> str:
    if d["rank"] == 0:
        return "heldout_stdlib"
    if d["rank"] == 1:
        return "heldout_packages"
    return "valid" if stdlib_corpus.is_validation(f"{d['package']}/{d['path']}", VALID_MODULUS) else "train"


def tokenizer_sample(texts: list[str], mb: float) -> list[str]:
    """Every k-th training file so that about `mb` MB are used (BPE training on all of it is slow on 2 cores)."""
    total = sum(len(t) for t in texts)
    k = max(1, round(total / (mb * 1e6)))
    return texts[::k]


def bytes_per_token(tok, texts: list[str]) -> float:
    n = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    return sum(len(t.encode()) for t in texts) / max(1, n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", default=str(HERE / "corpus_packages.txt"))
    ap.add_argument("--work", default=str(ASSETS / ".corpus"), help="wheels, docs, tokenizer, token files (git-ignored)")
    ap.add_argument("--manifest", default=None, help="default scripts/assets/corpus_manifest.tsv (--tiny: in --work)")
    ap.add_argument("--stats", default=None, help="default assets/results/corpus_stats.json (--tiny: in --work)")
    ap.add_argument("--skip-download", action="store_true")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--tokenizer-mb", type=float, default=60.0, help="MB of training files the BPE is trained on")
    ap.add_argument("--compare-vocab", default="", help="also measure bytes/token for these vocab sizes, e.g. 16384")
    ap.add_argument("--tiny", action="store_true", help="a small stdlib slice (tests)")
    a = ap.parse_args(argv)
    work, t_start = Path(a.work), time.time()
    a.manifest = Path(a.manifest or (work / "corpus_manifest.tsv" if a.tiny else HERE / "corpus_manifest.tsv"))
    a.stats = Path(a.stats or (work / "corpus_stats.json" if a.tiny else ASSETS / "results" / "corpus_stats.json"))
    work.mkdir(parents=True, exist_ok=True)
    docs, rows = collect(src.read_packages(Path(a.packages)), work / "wheels", not a.skip_download, a.tiny)
    log(f"[collect] {len(docs)} files from {sum(r['status'] == 'used' for r in rows)} packages")
    docs = dedup(docs)
    by_split = {s: [] for s in SPLITS}
    for d in docs:
        by_split[split_of(d)].append(d)
    kept = Counter(d["package"] for d in docs)
    for r in rows:
        r["files_after_dedup"] = kept.get(r["package"], 0)
    texts = [d["text"] for d in by_split["train"]]
    tok = stdlib_corpus.train_tokenizer(tokenizer_sample(texts, a.tokenizer_mb), a.vocab_size)
    tok.save(str(work / "tokenizer.json"))
    log(f"[tokenizer] byte-level BPE, vocab {tok.get_vocab_size()}")
    stats = {"vocab_size": tok.get_vocab_size(), "tokenizer_mb": a.tokenizer_mb, "splits": {}}
    tok_count, eos = Counter(), tok.token_to_id(stdlib_corpus.EOS)
    for s, ds in by_split.items():
        parts = [np.zeros(0, np.uint16)]
        for i in range(0, len(ds), 500):  # in chunks: Encoding objects of 100M tokens would take >10 GB
            chunk = ds[i : i + 500]
            for d, e in zip(chunk, tok.encode_batch([d["text"] for d in chunk], add_special_tokens=False)):
                tok_count[d["package"]] += len(e.ids) + 1
                parts.append(np.asarray(e.ids + [eos], dtype=np.uint16))
        ids = np.concatenate(parts)
        ids.tofile(work / f"{s}.bin")
        stats["splits"][s] = {"files": len(ds), "bytes": sum(len(d["text"].encode()) for d in ds),
                              "tokens": int(ids.size), "packages": len({d["package"] for d in ds})}
        if s == "heldout_packages":
            stats["heldout_packages"] = sorted({d["package"] for d in ds})
        log(f"[split] {s}: {stats['splits'][s]}")
    for r in rows:
        r["tokens"] = tok_count.get(r["package"], 0)
    held = {k: [d["text"] for d in by_split[k]] for k in ("heldout_packages", "heldout_stdlib")}
    from tokenizers import Tokenizer

    candidates = {f"v3 corpus BPE {a.vocab_size}": tok,
                  "v2 stdlib BPE 8192 (shipped)": Tokenizer.from_file(str(ASSETS / "target" / "tokenizer.json"))}
    for v in [int(x) for x in a.compare_vocab.split(",") if x]:
        candidates[f"v3 corpus BPE {v}"] = stdlib_corpus.train_tokenizer(tokenizer_sample(texts, a.tokenizer_mb), v)
    stats["bytes_per_token"] = {name: {k: round(bytes_per_token(t, v), 4) for k, v in held.items() if v}
                                for name, t in candidates.items()}
    log(f"[tokenizer] bytes/token on held-out: {stats['bytes_per_token']}")
    stats["minutes"] = round((time.time() - t_start) / 60, 1)
    (work / "meta.json").write_text(json.dumps(stats, indent=1))
    a.stats.write_text(json.dumps(stats, indent=1) + "\n")
    write_manifest(a.manifest, rows)
    with open(work / "heldout_packages.jsonl", "w") as f:  # prompts for eval_models.py's loop measure
        for d in by_split["heldout_packages"]:
            f.write(json.dumps({"package": d["package"], "path": d["path"], "text": d["text"]}) + "\n")
    log(f"[done] train tokens {stats['splits']['train']['tokens']:,} in {stats['minutes']} min -> {work}")
    return 0


def write_manifest(path: Path, rows: list[dict]) -> None:
    cols = ["package", "version", "licence", "source", "split", "status", "files", "files_after_dedup", "tokens",
            "dropped"]
    lines = ["\t".join(cols)] + ["\t".join(str(r.get(c, "")) for c in cols) for r in rows]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
