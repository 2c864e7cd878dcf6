"""Distil the draft model shipped for SmolLM2-135M-Instruct (assets/drafts/smollm2): 2 decoder layers of the
target's own shape, trained on the target's own greedy chat answers.

Why this shape: speculative decoding needs a draft that shares the target's tokenizer; the smallest member
of the SmolLM2 family is the target itself, so there is none to borrow. A draft of the target's width can
share its embedding and tied LM head (loaded from the target at run time, never shipped), so only its own
2 layers ship: 7.1M parameters, stored as ggml Q8_0 blocks (7.5 MB; the working tree must fit the 64 MiB a
GPU machine receives). Its layers start as copies of the target's layers 0 and 1 with the target's final norm.

The data is the chat part of the shipped datastore (assets/datastore/smollm2/tokens.bin: 935 transcripts,
each a chat request of our own and the target's greedy answer; the held-out bench requests were never used).
Only answer tokens are labels: greedy verification accepts exactly what the target says, and the answers are
the target's argmax given their prefix, so cross-entropy on them distils the target's greedy choice.

    python assets/drafts/smollm2/train.py [--epochs 4] [--threads 2]       # ~30 min on 2 CPU cores
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from decoding.methods.draft_model.shipped_draft import LAYERS_FROM, draft_config, save_draft  # noqa: E402

DATASTORE = ROOT / "assets" / "datastore" / "smollm2"


def chat_documents(tok) -> list[tuple[list[int], int]]:
    """(token ids, index of the first answer token) of every chat transcript in the shipped datastore."""
    card = json.loads((DATASTORE / "datastore.json").read_text())
    dtype = ">u2" if card["width"] == 2 else ">u4"
    ids = np.fromfile(DATASTORE / "tokens.bin", dtype=dtype)
    head = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    docs = []
    for f in card["files"]:
        if not f["name"].startswith("chat/"):
            continue
        d = ids[f["start"]:f["start"] + f["tokens"]].astype(np.int64).tolist()
        starts = [i + len(head) for i in range(len(d) - len(head)) if d[i:i + len(head)] == head]
        if starts and starts[-1] < len(d) - 1:
            docs.append((d, starts[-1]))
    return docs


def batches(docs, size: int, rng: random.Random):
    """Length-bucketed batches (little padding), in random order."""
    order = sorted(range(len(docs)), key=lambda i: len(docs[i][0]) + rng.random())
    groups = [order[i:i + size] for i in range(0, len(order), size)]
    rng.shuffle(groups)
    for g in groups:
        n = max(len(docs[i][0]) for i in g)
        x = torch.zeros(len(g), n, dtype=torch.long)
        y = torch.full((len(g), n), -100, dtype=torch.long)
        att = torch.zeros(len(g), n, dtype=torch.long)
        for r, i in enumerate(g):
            d, a = docs[i]
            x[r, :len(d)] = torch.tensor(d)
            att[r, :len(d)] = 1
            y[r, a - 1:len(d) - 2] = torch.tensor(d[a:len(d) - 1])  # answer tokens; not the appended <|im_end|>
        yield x, y, att


def loss_of(draft, x, y, att) -> tuple[torch.Tensor, int, int]:
    h = draft.model(input_ids=x, attention_mask=att).last_hidden_state
    keep = y != -100
    logits = draft.lm_head(h[keep])
    target = y[keep]
    loss = torch.nn.functional.cross_entropy(logits, target)
    return loss, int((logits.argmax(-1) == target).sum()), int(keep.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--val", type=int, default=40, help="transcripts kept out for validation")
    ap.add_argument("--out", default=str(HERE))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--init", default=None, help="a draft folder to go on training from")
    ap.add_argument("--storage", default="q8_0", choices=("q4_1", "q8_0"), help="how the layers are stored")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    from transformers import LlamaForCausalLM
    from decoding.models import load
    target, tok = load(None, layout="stock", threads=a.threads, dtype="fp32")
    docs = chat_documents(tok)
    rng.shuffle(docs)
    val, train = docs[:a.val], docs[a.val:]
    print(f"{len(train)} train / {len(val)} val transcripts, "
          f"{sum(len(d) - s for d, s in train)} answer tokens", flush=True)
    draft = LlamaForCausalLM(draft_config(target.config))
    sd = {f"model.layers.{i}.{k}": v for i, src in enumerate(LAYERS_FROM)
          for k, v in target.model.layers[src].state_dict().items()}
    sd["model.norm.weight"] = target.model.norm.weight.detach().clone()
    draft.load_state_dict(sd, strict=False)
    draft.model.embed_tokens = target.model.embed_tokens  # shared and frozen, as at run time
    draft.lm_head = target.lm_head
    if a.init:  # go on from a saved draft (its de-quantised weights)
        from decoding.methods.draft_model.shipped_draft import load_draft_folder
        draft.load_state_dict(load_draft_folder(target, a.init).state_dict())
    for p in target.parameters():
        p.requires_grad_(False)
    params = [p for n, p in draft.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    steps = a.epochs * math.ceil(len(train) / a.batch)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))

    def evaluate() -> tuple[float, float]:
        draft.eval()
        tot, hit, n = 0.0, 0, 0
        with torch.no_grad():
            for x, y, att in batches(val, a.batch, random.Random(0)):
                loss, h, k = loss_of(draft, x, y, att)
                tot, hit, n = tot + float(loss) * k, hit + h, n + k
        draft.train()
        return tot / n, hit / n

    t0, step = time.time(), 0
    print(f"before: val loss {evaluate()[0]:.3f}", flush=True)
    for epoch in range(a.epochs):
        for x, y, att in batches(train, a.batch, rng):
            loss, _, _ = loss_of(draft, x, y, att)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            if step % 10 == 0:
                print(f"step {step}/{steps} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)
        vl, acc = evaluate()
        print(f"epoch {epoch + 1}: val loss {vl:.3f}, top-1 agreement with the target {acc:.3f}", flush=True)
        save_draft(draft, Path(a.out), target, trained_with={  # each epoch: a stopped run still leaves a draft
            "data": "chat transcripts of assets/datastore/smollm2 (the target's greedy answers)",
            "train_transcripts": len(train), "val_transcripts": len(val), "epochs": epoch + 1, "batch": a.batch,
            "lr": a.lr, "seed": a.seed, "minutes": round((time.time() - t0) / 60, 1),
            "val_loss": round(vl, 4), "val_top1_agreement": round(acc, 4)}, storage=a.storage)
    print(f"[done] {(time.time() - t0) / 60:.1f} min -> {a.out}", flush=True)


if __name__ == "__main__":
    main()
