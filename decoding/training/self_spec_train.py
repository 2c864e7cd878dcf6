"""Train a self-speculative adapter (python -m decoding train-heads --kind self_speculative --exit-layer K).

Self-distilled from the frozen target: for every position of the training text, the adapter reads the
target's hidden state after layer k (and, through its attention, the earlier ones) and must produce the
target's final normed feature: SmoothL1 on the feature (EAGLE's regression) + ce_weight x cross-entropy of
the LM head on it against the target's own argmax (what greedy verification accepts). The LM head of the
loss is the reduced draft vocabulary (heads.DraftLM's top quarter by the target's choices; all of a vocabulary
of <= 4,096): the full
49,152-token head would cost more than the adapter on a CPU. The target's features are computed once
and cached on disk (train_heads.hidden_features, the heads' pass); the best validation checkpoint is kept.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from decoding.engine.shallow import check_exit, decoder_parts, run_layers
from decoding.methods.self_draft.heads import save_counts
from decoding.methods.self_draft.self_spec_adapter import new_adapter, save_adapter
from decoding.training.train_heads import (_autocast, _progress, frozen_target, hidden_features, optimizer_step,
                                          split_rows, training_rows, warmup_cosine)


def layer_features(model, rows: np.ndarray, k: int, cache: Path, batch: int = 8, log=print,
                   also: tuple[int, ...] = ()):
    """(h_k [n, seq, h], final [n, seq, h] fp16, argmax [n, seq] int32) of the frozen target, cached;
    `also`: more exit layers stored by the same pass (a k sweep pays for the target's forward once)."""
    if not (cache / f"done{k}").exists():
        ks = sorted({k, *also})
        hidden_features(model, rows, cache, {**{f"h{j}": j for j in ks}, "final": -1}, [f"done{j}" for j in ks],
                        batch, log)
    return (np.load(cache / f"h{k}.npy", mmap_mode="r"), np.load(cache / "final.npy", mmap_mode="r"),
            np.load(cache / "argmax.npy"))


def draft_head(model, counts: np.ndarray, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight rows [size, h] of the target's LM head for its `size` most chosen tokens, a map from token
    id to row, -100 for tokens outside): the loss's head, as DraftLM drafts with it."""
    w = model.get_output_embeddings().weight.detach()
    ids = torch.from_numpy(np.argsort(-counts, kind="stable")[:size]).sort().values
    where = torch.full((w.shape[0],), -100, dtype=torch.long)
    where[ids] = torch.arange(len(ids))
    return w[ids.to(w.device)].float(), where


def adapter_loss(layer: nn.Module, inner: nn.Module, head_w: torch.Tensor, where: torch.Tensor, hk: torch.Tensor,
                 fin: torch.Tensor, arg: torch.Tensor, ce_weight: float) -> tuple[torch.Tensor, float]:
    """Loss and top-1 agreement (over the draft vocabulary) of the adapter on one batch [B, T, h]."""
    pos = torch.arange(hk.shape[1], device=hk.device)[None]
    pred = inner.norm(run_layers(inner, [layer], hk, pos, None, None))
    logits = pred.float() @ head_w.T
    y = where.to(arg.device)[arg]
    loss = nn.functional.smooth_l1_loss(pred.float(), fin.float()) + \
        ce_weight * nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)
    ok = y >= 0
    acc = float((logits.argmax(-1)[ok] == y[ok]).float().mean()) if bool(ok.any()) else 0.0
    return loss, acc


def train_adapter(model, tok, texts: list[str], out: str | Path, *, exit_layer: int, seq: int = 256,
                  max_tokens: int = 100_000, epochs: float = 1.0, batch: int = 4, lr: float = 1e-3,
                  val_every: int = 50, cache: str | Path | None = None, seed: int = 0, ce_weight: float = 1.0,
                  draft_vocab: int | None = None, also: tuple[int, ...] = (), init: str = "identity", log=print) -> dict:
    """Train an adapter for exit layer k = exit_layer; files land in `out` (best validation checkpoint)."""
    k = check_exit(model, exit_layer)
    inner = decoder_parts(model)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    dev = frozen_target(model)
    rows, key = training_rows(model, tok, texts, seq, max_tokens, seed)
    hk, fin, arg = layer_features(model, rows, k, (Path(cache) if cache else out / "features") / key, log=log,
                                   also=also)
    val, fit, total, order = split_rows(len(rows), batch, epochs, seed)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    counts = np.bincount(np.asarray(arg)[fit].ravel(), minlength=vocab)[:vocab]
    save_counts(out, counts)
    size = (vocab if vocab <= 4096 else vocab // 4) if draft_vocab is None else (draft_vocab or vocab)
    head_w, where = draft_head(model, counts, min(size, vocab))
    torch.manual_seed(seed)
    layer, cfg = new_adapter(model, k, init)
    layer.train().requires_grad_(True)
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.0)
    sched = warmup_cosine(opt, total)
    log(f"[train] self_speculative exit layer {k}: {len(fit)} rows x {seq} tokens for training, {len(val)} for "
        f"validation, {total} steps of {batch} rows on {dev}")

    def tensors(b):
        f = lambda a: torch.from_numpy(np.asarray(a[b], dtype=np.float32)).to(dev)  # noqa: E731
        return f(hk), f(fin), torch.from_numpy(arg[b]).long().to(dev)

    def evaluate() -> dict:
        layer.eval()
        with torch.no_grad():
            res = [adapter_loss(layer, inner, head_w, where, *tensors(val[i:i + batch]), ce_weight)
                   for i in range(0, len(val), batch)]
        layer.train()
        return {"loss": float(np.mean([float(r[0]) for r in res])), "acc": float(np.mean([r[1] for r in res]))}

    best, step, t0 = {"loss": float("inf"), "acc": 0.0, "step": 0}, 0, time.perf_counter()
    while step < total:
        b = np.sort(order[step * batch:(step + 1) * batch])
        with _autocast(dev):
            loss, acc = adapter_loss(layer, inner, head_w, where, *tensors(b), ce_weight)
        optimizer_step(loss, layer, opt, sched)
        step += 1
        _progress("train", step, total, t0, log, extra=f"loss {loss.item():.3f} top-1 {acc:.2f}")
        if step % val_every == 0 or step == total:
            v = evaluate()
            log(f"[valid] step {step}: loss {v['loss']:.4f}, top-1 {v['acc']:.3f}")
            if v["loss"] < best["loss"]:
                best = {**v, "step": step}
                save_adapter(layer, cfg, out, {"training": {
                    "best_step": step, "valid_loss": round(v["loss"], 5), "valid_top1": round(v["acc"], 4),
                    "train_tokens": len(fit) * seq, "valid_tokens": len(val) * seq, "epochs": epochs, "lr": lr,
                    "batch_rows": batch, "seq": seq, "ce_weight": ce_weight, "loss_vocab": int(len(head_w)),
                    "minutes_so_far": round((time.perf_counter() - t_start) / 60, 2)}})
    log(f"[train] done in {(time.perf_counter() - t_start) / 60:.1f} min; best step {best['step']}: "
        f"validation top-1 {best['acc']:.3f}")
    return {**best, "acc": [best["acc"]]}
