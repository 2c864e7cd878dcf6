"""Record the traces shipped for the app's Replay tab (assets/traces/) with the embedded models.

    python -m appkit.run.record_traces [--target DIR] [--draft DIR] [--out assets/traces] [--max-new-tokens 64] [--only STEM]

Each file is a plain decoding.Trace JSON (≤ 1 MB) so a workshop without a GPU can step through it.
"""
from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import torch

from decoding import load, run
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET

from .method_fields import needs
from ..page.tables import public_trace

ROOT = Path(__file__).resolve().parents[2]  # the repository (appkit/<room>/<module>.py)
CODE = "import os\n\n\ndef list_python_files(root):\n    \"\"\"Return every .py file under root.\"\"\""
CODE2 = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):"
RECORDINGS = [  # (file stem, prompt, method, parameters)
    ("lookahead_W5_N4_G5", CODE2, "lookahead", dict(window=5, ngram=4, guesses=5)),  # window n-grams hit here
    ("prompt_lookup", CODE2, "prompt_lookup", dict(max_ngram=3, num_tokens=10)),
    ("speculative_tree_3-2-1", CODE, "speculative", dict(tree=[3, 2, 1])),
    ("speculative_staged_chain", CODE2, "speculative", dict(draft_tokens=4, staged=True)),
    ("jacobi_block_5", CODE2, "jacobi", dict(block=5)),  # the lesson's Jacobi stop: its guesses, step by step
]
MAX_BYTES = 1_000_000


def public(tr, where: str):
    """The trace as shipped: no server path (tables.public_trace), and where it was recorded."""
    public_trace(tr)
    tr.model = {**(tr.model or {}), "recorded_on": where}
    return tr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=EMBEDDED_TARGET)
    ap.add_argument("--draft", default=EMBEDDED_DRAFT)
    ap.add_argument("--out", default=str(ROOT / "assets" / "traces"))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--only", action="append", default=None, help="record this file stem only (repeatable)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)  # steadier step times on a shared CPU
    model, tok = load(a.target, device="cpu")
    draft = load(a.draft, device="cpu")[0]
    where = (f"{platform.machine()} CPU ({os.cpu_count()} cores, {torch.get_num_threads()} thread), "
             f"torch {torch.__version__}, by python -m appkit.run.record_traces")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for stem, prompt, method, params in RECORDINGS:
        if a.only and stem not in a.only:
            continue
        kw = dict(params, draft_model=draft) if needs(method, "draft_model") else params
        n = a.max_new_tokens
        while True:
            tr = run(model, tok, prompt, method, max_new_tokens=n, **kw)
            text = public(tr, where).to_json()
            if len(text.encode()) <= MAX_BYTES or n <= 8:
                break
            n //= 2
        path = out / f"{stem}.json"
        path.write_text(public(tr, where).to_json())
        st = tr.stats()
        print(f"{path.name}: {st['new_tokens']} tokens in {st['steps']} steps "
              f"(compression {st['compression']:.2f}), {len(text) / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
