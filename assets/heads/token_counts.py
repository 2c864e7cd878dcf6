"""Token counts for the shipped heads' drafting vocabulary (heads.DraftLM): how often the embedded target
chooses each token (its argmax) over the stdlib corpus's TRAINING split, the text the heads trained on.

    python assets/heads/token_counts.py [--max-tokens 400000 --seq 320] [--kinds medusa]

Heads trained with `python -m decoding train-heads` get this file from their own training rows (the
shipped heads, retrained on 2026-11-24, carry those); this script is for heads trained before the file
existed: it counts over corpus rows instead (about 3 minutes, 2 threads).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "assets"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from decoding.methods.self_draft.heads import save_counts  # noqa: E402
from decoding.models import EMBEDDED_TARGET, load  # noqa: E402
from decoding.training.train_heads import _eos, chunk  # noqa: E402
from stdlib_corpus import load_split  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=400_000)
    ap.add_argument("--seq", type=int, default=320)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kinds", default="medusa", help="which shipped heads get the file")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load(EMBEDDED_TARGET)
    rows = chunk(tok, [t for _, t in sorted(load_split()[0].items())], a.seq, a.max_tokens, _eos(model, tok))
    vocab = int(model.get_output_embeddings().weight.shape[0])
    counts, t0 = np.zeros(vocab, dtype=np.int64), time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(rows), 16):
            arg = model(input_ids=torch.from_numpy(rows[i:i + 16]).long()).logits.argmax(-1)
            counts += np.bincount(arg.ravel().numpy(), minlength=vocab)[:vocab]
    for kind in a.kinds.split(","):
        save_counts(ROOT / "assets" / "heads" / kind, counts)
    top = np.cumsum(np.sort(counts)[::-1]) / counts.sum()
    print(f"{len(rows)} rows x {a.seq} in {time.perf_counter() - t0:.0f} s; the target's argmax covered by its "
          + ", ".join(f"top {k}: {top[k - 1]:.3f}" for k in (512, 1024, 2048, 4096) if k <= vocab))


if __name__ == "__main__":
    main()
