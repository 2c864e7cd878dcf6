"""Build the datastore shipped for SmolLM2-135M-Instruct: assets/datastore/smollm2.

    python assets/datastore/build_shipped.py [--chat DIR] [--max-tokens N]

Sources, all redistributable: the pure-Python standard library of this interpreter (PSF-2.0; the file list of
scripts/assets/stdlib_corpus.py: no tests, no site-packages; its held-out files excluded), and optionally --chat DIR,
text files of the model's own greedy answers to our own prompts (chat transcripts, split into one document
each at "<|im_start|>system"). Files are taken in sorted order until
--max-tokens (default 800,000, about 4 MB at 6 bytes a token: the working tree must fit the 64 MiB a GPU
machine receives). CPython's LICENSE is copied
next to the datastore, as the PSF licence asks of derived works.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "assets"))  # stdlib_corpus
import stdlib_corpus  # noqa: E402

MODEL = Path("~/.cache/decodescope/models/smollm2-135m-instruct").expanduser()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chat", default=None, help="folder of the model's own answers (*.txt)")
    ap.add_argument("--max-tokens", type=int, default=800_000)
    ap.add_argument("--out", default=str(HERE / "smollm2"))
    args = ap.parse_args()
    from transformers import AutoTokenizer
    from decoding.methods.retrieve.datastore import build
    tok = AutoTokenizer.from_pretrained(MODEL)
    root = stdlib_corpus.stdlib_root()
    rels = [r for r in stdlib_corpus.list_files(root) if not stdlib_corpus.is_heldout(r)]
    with tempfile.TemporaryDirectory() as tmp:
        staged, chars = Path(tmp), 0
        budget_chars = int(args.max_tokens * 3.2)  # ~3.3 characters a token on code; trimmed again below
        if args.chat:  # one document per transcript: they start at "<|im_start|>system"
            (staged / "chat").mkdir(exist_ok=True)
            k = 0
            for f in sorted(Path(args.chat).glob("*.txt")):
                for doc in f.read_text(encoding="utf-8").split("<|im_start|>system"):
                    if doc.strip():
                        (staged / "chat" / f"{f.stem}-{k:05d}.txt").write_text("<|im_start|>system" + doc,
                                                                                encoding="utf-8")
                        chars, k = chars + len(doc), k + 1
        for r in rels:
            text = stdlib_corpus.read_text(root, r)
            if not text or chars > budget_chars:
                continue
            dest = staged / "stdlib" / r
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
            chars += len(text)
        t0 = time.perf_counter()
        meta = build(tok, [staged], args.out)
        elapsed = time.perf_counter() - t0
    meta_path = Path(args.out) / "datastore.json"
    m = json.loads(meta_path.read_text())
    m["tokenizer_name"] = "HuggingFaceTB/SmolLM2-135M-Instruct"  # not this machine's cache path
    for f in m["files"]:  # names relative to the source, not this machine's temporary folder
        f["name"] = f["name"].split(staged.name + "/", 1)[-1]
    meta_path.write_text(json.dumps(m))
    shutil.copy(root / "LICENSE.txt", Path(args.out) / "LICENSE-python-stdlib.txt")
    print(json.dumps({"tokens": meta["tokens"], "files": len(meta["files"]), "tokenize_s": meta["tokenize_s"],
                      "suffix_array_s": meta["suffix_array_s"], "total_s": round(elapsed, 2)}))


if __name__ == "__main__":
    main()
