"""Train the shipped heads for the default model (SmolLM2-135M-Instruct) on its own greedy answers.

    python assets/heads/smollm2_data.py --out /tmp/smol_data        # the model's own chat and code answers
    python assets/heads/train_smollm2.py --data /tmp/smol_data [--kinds eagle,medusa]

The text is already the target's greedy output (self-distillation done by smollm2_data.py, batched), so the
heads train on it as is (distill 0). Both kinds share one feature cache. Writes assets/heads/smollm2/<kind>/
(heads.safetensors + heads.json + token_counts.safetensors) with the command and time in heads.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from decoding.models.fetch import fetch_default  # noqa: E402
from decoding.models import load  # noqa: E402
from decoding.training.train_heads import stderr_log, train, write_card_json  # noqa: E402

SETTINGS = {"eagle": dict(epochs=3.0, lr=1e-3, batch=8),
            "medusa": dict(n_heads=3, epochs=1.0, lr=2e-3, batch=4, val_every=50)}


def documents(folder: Path, eos: str) -> list[str]:
    """Each transcript (prompt + the model's answer) of the data folder's .txt files, without its closing EOS
    (train() adds one). The chat template itself holds EOS (<|im_end|>), so transcripts split where a
    system turn starts."""
    out = []
    for f in sorted(folder.glob("*.txt")):
        for d in f.read_text().split(eos + "<|im_start|>system"):
            d = d if d.startswith("<|im_start|>") else "<|im_start|>system" + d
            d = d[:-len(eos)] if d.endswith(eos) else d
            if d.strip():
                out.append(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--max-tokens", type=int, default=160_000)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--kinds", default="eagle,medusa")
    ap.add_argument("--dest", default=str(ROOT / "assets" / "heads" / "smollm2"))
    ap.add_argument("--work", default="/tmp/decodescope_heads_smollm2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=float, default=None, help="override the kind's epochs (SETTINGS)")
    ap.add_argument("--init", action="store_true", help="continue from the heads in DEST/<kind> (fine-tune)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    folder = fetch_default()
    model, tok = load(str(folder), layout="stock", threads=a.threads)
    texts = documents(a.data, tok.eos_token)
    stderr_log(f"[data] {len(texts)} transcripts from {a.data}")
    for kind in a.kinds.split(","):
        settings = SETTINGS[kind] | ({} if a.epochs is None else {"epochs": a.epochs})
        t0 = time.perf_counter()
        out = Path(a.dest) / kind
        init = out if a.init else None
        best = train(model, tok, kind, texts, Path(a.work) / (kind + ("-continued" if a.init else "")),
                     max_tokens=a.max_tokens, seq=a.seq, cache=Path(a.work) / "features", init=init, log=stderr_log,
                     **settings)
        minutes = (time.perf_counter() - t0) / 60
        src = Path(a.work) / (kind + ("-continued" if a.init else ""))
        out.mkdir(parents=True, exist_ok=True)
        for name in ("heads.safetensors", "heads.json", "token_counts.safetensors"):
            (out / name).write_bytes((src / name).read_bytes())
        write_card_json(out, {"base_model": "SmolLM2-135M-Instruct (decodescope fetch-model)", "trained_with": {
            "command": f"python assets/heads/train_smollm2.py --data DIR --max-tokens {a.max_tokens} --seq {a.seq} "
                       f"--kinds {kind}" + ("" if a.epochs is None else f" --epochs {a.epochs:g}")
                       + (" --init" if a.init else ""),
            "data": "assets/heads/smollm2_data.py --chat 480: the model's greedy answers (160 new tokens) to 480 "
                    "template chat requests (the code continuations were skipped for time)",
            "settings": settings, "wall_minutes": round(minutes, 1), "threads": a.threads,
            "machine": "2-core x86_64 dev CPU, torch " + torch.__version__}})
        stderr_log(f"[done] {kind} in {minutes:.1f} min -> {out} (best {best})")


if __name__ == "__main__":
    main()
