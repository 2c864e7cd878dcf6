"""Train Medusa or EAGLE heads for any causal LM on the user's text (python -m decoding train-heads).

Why this shape: the base model is frozen, so its features (last normed hidden state) and its greedy
choices are computed ONCE and cached on disk; every epoch then costs only the heads. Labels are the
target's own argmax (what greedy verification accepts), not the corpus token. A validation slice picks
the best checkpoint; state.pt after every evaluation makes a killed run resumable with the same command.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import DynamicCache

from decoding.models import cache_kwarg
from decoding.training.head_loss import head_loss
from decoding.methods.self_draft.heads import KINDS, HeadsError, base_fingerprint, load_heads, new_heads, save_counts, save_heads

TEXT_SUFFIXES = {".py", ".txt", ".md", ".rst", ".json", ".jsonl", ".c", ".h", ".js", ".ts", ".java", ".go", ".rs",
                 ".html", ".css", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".ini", ".tex", ".csv", ""}


def read_texts(paths: list[str]) -> list[str]:
    """Texts of the given files, and of the text files under the given folders (UTF-8 only)."""
    out = []
    for p in map(Path, paths):
        if not p.exists():
            raise HeadsError(f"training data {p} does not exist")
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES
                       and not any(part.startswith(".") for part in f.parts)) if p.is_dir() else [p]
        for f in files:
            try:
                t = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if t.strip():
                out.append(t)
    return out


def chunk(tok, texts: list[str], seq: int, max_tokens: int, eos: int | None, seed: int = 0) -> np.ndarray:
    """Documents (shuffled with a fixed seed), each followed by EOS, as [n, seq] int32 rows."""
    texts = list(texts)
    random.Random(seed).shuffle(texts)
    ids: list[int] = []
    for t in texts:
        ids += tok(t)["input_ids"] + ([] if eos is None else [eos])
        if len(ids) >= max_tokens:
            break
    n = min(len(ids), max_tokens) // seq
    if n < 2:
        raise HeadsError(f"the training data has {len(ids)} tokens: at least {2 * seq} are needed "
                         f"(two rows of --seq {seq})")
    return np.asarray(ids[:n * seq], dtype=np.int32).reshape(n, seq)


def features(model, rows: np.ndarray, cache: Path, batch: int = 8, log=print) -> tuple[np.ndarray, np.ndarray]:
    """(feats [n, seq, h] fp16, argmax [n, seq] int32) of the frozen base model, cached under `cache`."""
    if not (cache / "done").exists():
        hidden_features(model, rows, cache, {"feats": -1}, ["done"], batch, log)
    return np.load(cache / "feats.npy", mmap_mode="r"), np.load(cache / "argmax.npy")


@torch.inference_mode()
def hidden_features(model, rows: np.ndarray, cache: Path, keep: dict[str, int], marks: list[str], batch: int = 8,
                    log=print) -> None:
    """One pass of the frozen model over `rows`, written under `cache`: hidden state keep[name] (an index of
    output_hidden_states, -1 the last, normed one) as name.npy [n, seq, h] fp16, its argmax as argmax.npy
    [n, seq] int32, then the files `marks` (the callers' sign that the cache is whole). Why one function:
    the heads keep the last state, the self-speculative adapter layer k's too; the pass is the same."""
    cache.mkdir(parents=True, exist_ok=True)
    n, seq = rows.shape
    h = int(model.config.get_text_config().hidden_size)
    kept = {name: np.lib.format.open_memmap(cache / f"{name}.npy", mode="w+", dtype=np.float16, shape=(n, seq, h))
            for name in keep}
    arg = np.zeros((n, seq), dtype=np.int32)
    dev = model.get_input_embeddings().weight.device
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        ids = torch.from_numpy(rows[i:i + batch]).long().to(dev)
        with _autocast(dev):
            out = model(input_ids=ids, output_hidden_states=True)
        for name, mm in kept.items():
            mm[i:i + len(ids)] = out.hidden_states[keep[name]].float().cpu().numpy()
        arg[i:i + len(ids)] = out.logits.argmax(-1).cpu().numpy()
        _progress("features", i + len(ids), n, t0, log)
    for mm in kept.values():
        mm.flush()
    np.save(cache / "argmax.npy", arg)
    for mark in marks:
        (cache / mark).write_text("ok")


@torch.inference_mode()
def self_distill(model, rows: np.ndarray, prompt: int, cache: Path, batch: int = 32, log=print) -> np.ndarray:
    """Rows whose tokens after the first `prompt` are the base model's own greedy continuation (cached).

    Why: greedy verification accepts what the target says, not what the corpus says. Teacher-forced labels
    on corpus text only match the target one step ahead; on its own continuations (Medusa-2's
    self-distillation) every depth of a head's guess is trained on the text the target really produces."""
    n, seq = rows.shape
    if not 0 < prompt < seq:
        raise HeadsError(f"--distill {prompt}: the prompt must be shorter than a row (--seq {seq})")
    path = cache.with_suffix(".distill.npy")
    if path.exists():
        return np.load(path)
    out = rows.copy()
    dev = model.get_input_embeddings().weight.device
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        ids = torch.from_numpy(rows[i:i + batch, :prompt]).long().to(dev)
        past = DynamicCache(config=model.config)
        with _autocast(dev):
            logits = model(input_ids=ids, **{cache_kwarg(model): past}, use_cache=True).logits[:, -1]
            gen = []  # stays on the device: one transfer per batch, not one per token
            for t in range(prompt, seq):
                gen.append(logits.argmax(-1, keepdim=True))
                if t + 1 < seq:
                    logits = model(input_ids=gen[-1], **{cache_kwarg(model): past}, use_cache=True).logits[:, -1]
        out[i:i + len(ids), prompt:] = torch.cat(gen, dim=1).cpu().numpy()
        _progress("distill", i + len(ids), n, t0, log)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


def _autocast(dev: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu", enabled=False)


def _progress(what: str, done: int, total: int, t0: float, log, every: float = 15.0, extra: str = "") -> None:
    """One line with rate and ETA, at most every `every` seconds (and at the end)."""
    now = time.perf_counter()
    last = getattr(_progress, "last", {})
    if done < total and now - last.get(what, 0) < every:
        return
    last[what] = now
    _progress.last = last
    el = now - t0
    eta = el / max(done, 1) * (total - done)
    bar = "#" * int(20 * done / total)
    log(f"[{what}] {bar:<20} {done}/{total} {el / 60:5.1f} min, ETA {eta / 60:5.1f} min {extra}")


def split_rows(n: int, batch: int, epochs: float, seed: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """(validation rows: every 20th, or the last of fewer than 20; training rows; optimizer steps; training rows
    in the order the steps take them, shuffled with `seed`): the heads' and the adapter's plan, one rule."""
    val = np.arange(n)[np.arange(n) % 20 == 19] if n >= 20 else np.arange(n)[-1:]
    fit = np.setdiff1d(np.arange(n), val)
    total = max(1, int(math.ceil(len(fit) / batch) * epochs))
    order = np.random.default_rng(seed).permutation(np.tile(fit, int(math.ceil(epochs)) + 1))
    return val, fit, total, order


def frozen_target(model) -> torch.device:
    """The target only supplies features and labels while heads or an adapter train: eval mode, no gradients
    (none of its weights may move); returns the device the training runs on, the target's."""
    model.eval().requires_grad_(False)
    return model.get_input_embeddings().weight.device


def training_rows(model, tok, texts: list[str], seq: int, max_tokens: int, seed: int) -> tuple[np.ndarray, str]:
    """(the [n, seq] token rows, a key naming them with the base model): the heads' and the adapter's data, one
    rule; the key names the cache of the target's features, so other text or another model never reuses it."""
    rows = chunk(tok, texts, seq, max_tokens, _eos(model, tok), seed)
    return rows, hashlib.sha256(base_fingerprint(model).encode() + rows.tobytes()).hexdigest()[:16]


def optimizer_step(loss: torch.Tensor, trained: nn.Module, opt: torch.optim.Optimizer,
                   sched: torch.optim.lr_scheduler.LRScheduler) -> None:
    """One update of the heads or the adapter: gradients clipped to norm 1, then the optimizer and the schedule."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(trained.parameters(), 1.0)
    opt.step()
    sched.step()


def warmup_cosine(opt: torch.optim.Optimizer, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning rate: linear warm-up over the first 5% of `total` steps, then a cosine decay to zero."""
    warm = max(1, total // 20)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total))))


def train(model, tok, kind: str, texts: list[str], out: str | Path, *, n_heads: int = 4, seq: int = 256,
          max_tokens: int = 300_000, epochs: float = 1.0, batch: int = 4, lr: float = 1e-3, val_every: int = 75,
          cache: str | Path | None = None, seed: int = 0, ce_weight: float = 0.1, distill: int = 0,
          noise: float = 0.2, unroll: int = 1, init: str | Path | None = None, log=print) -> dict:
    """Train heads of `kind` for `model` on `texts`; heads land in `out` (best validation checkpoint).
    distill > 0: each row keeps its first `distill` corpus tokens and continues with the model's own greedy
    text (self_distill). unroll > 1 (EAGLE): levels 2..unroll also trained on the head's own predicted
    features (eagle_unrolled). init: start from these heads (same kind, same base model): fine-tuning."""
    if kind not in KINDS:
        raise HeadsError(f"unknown --kind {kind!r}; choose one of {', '.join(KINDS)}")
    if not texts:
        raise HeadsError("no training text: --data names no readable, non-empty text file")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    dev = frozen_target(model)
    rows, key = training_rows(model, tok, texts, seq, max_tokens, seed)
    cache = Path(cache) if cache else out / "features"
    if distill:
        rows = self_distill(model, rows, distill, cache / key, log=log)
        key = hashlib.sha256(key.encode() + rows.tobytes()).hexdigest()[:16]
    feats, arg = features(model, rows, cache / key, log=log)
    val, fit, total, order = split_rows(len(rows), batch, epochs, seed)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    save_counts(out, np.bincount(np.asarray(arg)[fit, distill:].ravel(), minlength=vocab)[:vocab])  # DraftLM's ranking
    torch.manual_seed(seed)
    module, cfg = new_heads(model, kind, n_heads)
    if init is not None:
        try:
            module.load_state_dict(load_heads(init, model, kind)[0].state_dict())
        except RuntimeError as e:  # e.g. another --n-heads than the heads in init
            raise HeadsError(f"--init {init}: those heads do not have this shape ({str(e).splitlines()[0][:120]})") \
                from None
        log(f"[train] starting from the {kind} heads in {init}")
    module.train()
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    sched = warmup_cosine(opt, total)
    state_path, step, best = out / "state.pt", 0, {"loss": float("inf")}
    if state_path.exists():  # resume: same data and shape, else start over
        st = torch.load(state_path, map_location=dev, weights_only=False)
        if (st.get("key"), st.get("kind"), st.get("total"), st.get("start", 0), st.get("unroll", 1),
                st.get("init")) == (key, kind, total, distill, unroll, None if init is None else str(init)):
            module.load_state_dict(st["module"])
            opt.load_state_dict(st["opt"])
            sched.load_state_dict(st["sched"])
            step, best = st["step"], st["best"]
            log(f"[train] resuming {kind} at step {step}/{total}")
    log(f"[train] {kind}: {len(fit)} rows x {seq} tokens for training, {len(val)} for validation, "
        f"{total} steps of {batch} rows on {dev}")
    t0, s0 = time.perf_counter(), step
    while step < total:
        b = np.sort(order[step * batch:(step + 1) * batch])
        ids, f, y = _batch(rows, feats, arg, b, dev)
        with _autocast(dev):
            loss, acc = head_loss(kind, module, model, ids, f, y, noise=noise if kind == "eagle" else 0.0, start=distill,
                                  ce_weight=ce_weight, unroll=unroll if kind == "eagle" else 1)
        optimizer_step(loss, module, opt, sched)
        step += 1
        if step == s0 + 5:
            el = time.perf_counter() - t0
            log(f"[train] ETA for {total - step} more steps: {el / 5 * (total - step) / 60:.1f} min")
        _progress("train", step - s0, total - s0, t0, log, extra=f"loss {loss.item():.3f} acc "
                  + " ".join(f"{a:.2f}" for a in acc))
        if step % val_every == 0 or step == total:
            v = evaluate(kind, module, model, rows, feats, arg, val, batch, dev, ce_weight, distill,
                         unroll if kind == "eagle" else 1)
            log(f"[valid] step {step}: loss {v['loss']:.4f}, top-1 " + " ".join(f"{a:.3f}" for a in v["acc"]))
            if v["loss"] < best["loss"]:
                best = {**v, "step": step}
                save_heads(module, cfg, out, {"training": _record(best, len(fit) * seq, len(val) * seq, epochs,
                                                                  lr, batch, seq, t_start, distill, unroll)})
            torch.save({"key": key, "kind": kind, "total": total, "start": distill, "unroll": unroll,
                        "init": None if init is None else str(init),
                        "module": module.state_dict(),
                        "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step, "best": best},
                       state_path)
    log(f"[train] done in {(time.perf_counter() - t_start) / 60:.1f} min; best step {best['step']}: "
        f"validation top-1 {best['acc']}")
    return best


def _record(best: dict, fit_tokens: int, val_tokens: int, epochs: float, lr: float, batch: int, seq: int,
            t_start: float, distill: int = 0, unroll: int = 1) -> dict:
    return {"self_distill_prompt": distill, "unroll": unroll, "best_step": best["step"], "valid_loss": round(best["loss"], 5),
            "valid_top1": [round(a, 4) for a in best["acc"]], "train_tokens": fit_tokens, "valid_tokens": val_tokens,
            "epochs": epochs, "lr": lr, "batch_rows": batch, "seq": seq,
            "minutes_so_far": round((time.perf_counter() - t_start) / 60, 2)}


def _batch(rows, feats, arg, b, dev):
    ids = torch.from_numpy(rows[b]).long().to(dev)
    f = torch.from_numpy(np.asarray(feats[b], dtype=np.float32)).to(dev)
    y = torch.from_numpy(arg[b]).long().to(dev)
    return ids, f, y


@torch.no_grad()
def evaluate(kind, module, model, rows, feats, arg, val, batch, dev, ce_weight: float = 0.1, start: int = 0,
             unroll: int = 1) -> dict:
    module.eval()
    losses, accs = [], []
    for i in range(0, len(val), batch):
        ids, f, y = _batch(rows, feats, arg, val[i:i + batch], dev)
        with _autocast(dev):
            loss, acc = head_loss(kind, module, model, ids, f, y, ce_weight=ce_weight, start=start, unroll=unroll)
        losses.append(float(loss))
        accs.append(acc)
    module.train()
    return {"loss": float(np.mean(losses)), "acc": [float(a) for a in np.mean(accs, axis=0)]}


def _eos(model, tok) -> int | None:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return eos if eos is not None else getattr(tok, "eos_token_id", None)


def stderr_log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_card_json(out: Path, extra: dict) -> None:
    p = Path(out) / "heads.json"
    cfg = json.loads(p.read_text())
    cfg.update(extra)
    p.write_text(json.dumps(cfg, indent=1))
