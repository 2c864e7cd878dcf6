"""EAGLE-3 training (Li et al. 2025, arXiv 2503.01840) for any causal LM, on token documents: a prompt and
the model's own answer.

What makes the head EAGLE-3's: it reads a fusion of the target's low, middle and high hidden states (the
card's eagle.fuse, heads.EagleHead.feature), is trained on the token loss only (no feature regression) and
unrolled on its own outputs for `unroll` levels (the training-time test, head_loss.eagle3_loss), over the
drafting vocabulary it will draft from (the `draft_vocab` tokens the target chose most in the training
answers; the card records it, so drafting uses the same).

Why this shape: the target is frozen, so the hidden states the head fuses and the target's greedy choices
are computed once per data unit and cached on disk (fp16 memmaps, cache_unit); units are added as
self-distilled data grows, and training then costs only the head. The loss counts guesses of answer tokens
only (what greedy decoding drafts); the prompt stays in the head's attention context. Each document is its
own row (rows of one batch padded on the right, never attended), so no document sees another's text.
state.pt after every evaluation makes a killed run resumable with the same command.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from decoding.methods.self_draft.heads import (EagleHead, HeadsError, base_fingerprint, draft_ids, load_heads,
                                               new_heads, save_counts, save_heads)
from decoding.training.head_loss import OUT_OF_VOCAB, UNSCORED, eagle3_loss
from decoding.training.train_heads import _progress, frozen_target, optimizer_step, warmup_cosine


@dataclass
class Doc:
    """One training document: token ids, and `start`, the first position whose token is trained (the
    answer's first token; the tokens before it are the prompt)."""
    ids: list[int]
    start: int


class Unit:
    """One cached data unit (cache_unit's folder): every document's tokens, answer start, the target's hidden
    states of the fused layers [tokens, layers, h] (fp16) and greedy choice after each position."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.meta = json.loads((folder / "meta.json").read_text())
        self.tokens = np.load(folder / "tokens.npy", mmap_mode="r")
        self.offsets = np.load(folder / "offsets.npy")
        self.starts = np.load(folder / "starts.npy")
        self.states = np.load(folder / "states.npy", mmap_mode="r")
        self.argmax = np.load(folder / "argmax.npy", mmap_mode="r")

    def __len__(self) -> int:
        return len(self.starts)

    def length(self, i: int) -> int:
        return int(self.offsets[i + 1] - self.offsets[i])

    def answer_choices(self, i: int) -> np.ndarray:
        """The target's choices at the positions whose next token is trained (start - 1 .. end - 2)."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return np.asarray(self.argmax[a + max(int(self.starts[i]) - 1, 0):b - 1])


def unit_key(model, docs: list[Doc], layers: list[int], max_len: int) -> str:
    """Names a unit's cache by the base model, the documents and the layers: other data never reuses it."""
    h = hashlib.sha256(base_fingerprint(model).encode() + json.dumps([layers, max_len]).encode())
    for d in docs:
        h.update(np.asarray(d.ids, dtype=np.int32).tobytes() + d.start.to_bytes(4, "little"))
    return h.hexdigest()[:16]


@torch.inference_mode()
def cache_unit(model, docs: list[Doc], layers: list[int], folder: Path, max_len: int = 512,
               batch_tokens: int = 4096, log=print) -> Unit:
    """The target's hidden states of `layers` (transformers' hidden_states indices) and greedy choices for
    every document, written under `folder` (reused when its key matches). Documents longer than max_len are
    cut; batches group documents of similar length (rows x longest <= batch_tokens)."""
    docs = [Doc(d.ids[:max_len], min(d.start, max_len)) for d in docs]
    key = unit_key(model, docs, layers, max_len)
    meta = folder / "meta.json"
    if meta.is_file() and json.loads(meta.read_text()).get("key") == key:
        return Unit(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta.unlink(missing_ok=True)
    lens = np.array([len(d.ids) for d in docs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    n, h = int(offsets[-1]), int(model.config.get_text_config().hidden_size)
    np.save(folder / "tokens.npy", np.concatenate([np.asarray(d.ids, dtype=np.int32) for d in docs]))
    np.save(folder / "offsets.npy", offsets)
    np.save(folder / "starts.npy", np.array([d.start for d in docs], dtype=np.int32))
    states = np.lib.format.open_memmap(folder / "states.npy", mode="w+", dtype=np.float16, shape=(n, len(layers), h))
    argmax = np.lib.format.open_memmap(folder / "argmax.npy", mode="w+", dtype=np.int32, shape=(n,))
    dev = model.get_input_embeddings().weight.device
    lm, t0, done = model.get_output_embeddings(), time.perf_counter(), 0
    for batch in length_batches(lens, batch_tokens):
        T = int(lens[batch].max())
        ids = torch.zeros((len(batch), T), dtype=torch.long)
        for r, i in enumerate(batch):
            ids[r, :lens[i]] = torch.tensor(docs[i].ids)
        out = model.base_model(input_ids=ids.to(dev), output_hidden_states=True)
        kept = torch.stack([out.hidden_states[k] for k in layers], dim=2)  # [B, T, layers, h]
        for r, i in enumerate(batch):
            a, m = int(offsets[i]), int(lens[i])
            states[a:a + m] = kept[r, :m].float().cpu().numpy()
            argmax[a:a + m] = torch.cat([lm(c).argmax(-1) for c in out.last_hidden_state[r, :m].split(512)]).cpu().numpy()
        done += int(lens[batch].sum())
        _progress(f"states {folder.name}", done, n, t0, log)
    states.flush()
    argmax.flush()
    meta.write_text(json.dumps({"key": key, "layers": list(layers), "documents": len(docs), "tokens": n,
                                "max_len": max_len}))
    return Unit(folder)


def length_batches(lens: np.ndarray, batch_tokens: int) -> list[np.ndarray]:
    """Document indices in batches of similar length: sorted by length (stable), cut where rows x the
    longest would pass batch_tokens (a longer document alone is its own batch)."""
    order = np.argsort(lens, kind="stable")
    out, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * int(lens[i]) > batch_tokens:
            out.append(np.array(cur))
            cur = []
        cur.append(int(i))
    if cur:
        out.append(np.array(cur))
    return out


class Data:
    """Every document of the given units, split into validation (every 20th, at most `val_docs`) and
    training, with the drafting vocabulary ranked on the training answers."""

    def __init__(self, units: list[Unit], vocab: int, draft_vocab: int, val_docs: int = 96):
        self.units = units
        self.docs = [(u, i) for u in units for i in range(len(u))]
        if len(self.docs) < 2:
            raise HeadsError(f"EAGLE-3 training needs at least 2 documents, got {len(self.docs)}")
        every = np.arange(len(self.docs))
        self.val = every[every % 20 == 19][:val_docs] if len(self.docs) >= 20 else every[-1:]
        self.fit = np.setdiff1d(every, self.val)
        counts = np.zeros(vocab, dtype=np.int64)
        for k in self.fit:
            u, i = self.docs[k]
            counts += np.bincount(u.answer_choices(i), minlength=vocab)[:vocab]
        self.counts = counts
        self.ids = draft_ids(torch.from_numpy(counts), draft_vocab) if 0 < draft_vocab < vocab else \
            torch.arange(vocab)
        self.t2d = np.full(vocab, OUT_OF_VOCAB, dtype=np.int64)  # token -> draft-vocabulary index
        self.t2d[self.ids.numpy()] = np.arange(len(self.ids))
        self.coverage = float(counts[self.ids.numpy()].sum() / max(counts.sum(), 1))

    def lengths(self, which: np.ndarray) -> np.ndarray:
        return np.array([self.docs[k][0].length(self.docs[k][1]) for k in which], dtype=np.int64)

    def batch(self, which, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids [B, T], states [B, T, layers, h] float32, labels [B, T]) of these documents, padded on the
        right: labels are draft-vocabulary indices of the target's choice where the next token is an answer
        token, OUT_OF_VOCAB where that choice is not drafted, UNSCORED elsewhere (prompt, last, padding)."""
        docs = [self.docs[k] for k in which]
        T = max(u.length(i) for u, i in docs)
        u0 = docs[0][0]
        ids = np.zeros((len(docs), T), dtype=np.int64)
        states = np.zeros((len(docs), T) + u0.states.shape[1:], dtype=np.float32)
        labels = np.full((len(docs), T), UNSCORED, dtype=np.int64)
        for r, (u, i) in enumerate(docs):
            a, b, s = int(u.offsets[i]), int(u.offsets[i + 1]), int(u.starts[i])
            ids[r, :b - a] = u.tokens[a:b]
            states[r, :b - a] = u.states[a:b]
            q0 = max(s - 1, 0)
            labels[r, q0:b - a - 1] = self.t2d[np.asarray(u.argmax[a + q0:b - 1])]
        return (torch.from_numpy(ids).to(dev), torch.from_numpy(states).to(dev), torch.from_numpy(labels).to(dev))


def draft_head(model, ids: torch.Tensor) -> nn.Linear:
    """The target's LM head restricted to the drafting vocabulary (frozen): what drafting's DraftLM reads."""
    lm = model.get_output_embeddings()
    w = lm.weight.detach()
    head = nn.Linear(w.shape[1], len(ids), bias=lm.bias is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        head.weight.copy_(w[ids.to(w.device)])
        if lm.bias is not None:
            head.bias.copy_(lm.bias.detach()[ids.to(w.device)])
    return head.requires_grad_(False)


def start_from(module: EagleHead, model, init: str | Path, fuse: list[int], log=print) -> None:
    """Initialise from the EAGLE head in `init`: an EAGLE-3 head over the same layers entirely; a classic head
    (top feature only) gives fc and the layer, and where `fuse` holds the last, normed state its block of the
    fuse weight starts as the identity (the others zero), so training starts from that head's drafting."""
    src, cfg = load_heads(init, model, "eagle")
    got = cfg["eagle"].get("fuse")
    if got == list(fuse):
        module.load_state_dict(src.state_dict())
        log(f"[eagle3] starting from the EAGLE-3 head in {init}")
        return
    if got:
        raise HeadsError(f"--init {init}: that head fuses layers {got}, not {list(fuse)}")
    state = {k: v for k, v in src.state_dict().items() if not k.startswith("fuse.")}
    module.load_state_dict(state, strict=False)
    last = int(model.config.get_text_config().num_hidden_layers)
    h = module.fc.weight.shape[0]
    with torch.no_grad():
        module.fuse.weight.zero_()
        if last in fuse:
            j = list(fuse).index(last)
            module.fuse.weight[:, j * h:(j + 1) * h] = torch.eye(h)
    log(f"[eagle3] fc and layer from the EAGLE head in {init}; fuse "
        + ("starts as that head's feature (the last state)" if last in fuse else "starts at zero"))


@torch.no_grad()
def evaluate(module: EagleHead, data: Data, emb: nn.Module, lm: nn.Module, unroll: int, batch_tokens: int,
             dev: torch.device) -> dict:
    """Validation loss and top-1 per drafting level (token-weighted over the validation documents)."""
    module.eval()
    loss = n = 0.0
    hits = np.zeros(unroll)
    for b in length_batches(data.lengths(data.val), batch_tokens):
        ids, states, labels = data.batch(data.val[b], dev)
        lo, acc = eagle3_loss(module, lm, emb(ids), states, labels, unroll)
        w = float((labels >= OUT_OF_VOCAB).sum())
        loss, n, hits = loss + float(lo) * w, n + w, hits + np.array(acc) * w
    module.train()
    return {"loss": loss / max(n, 1), "acc": [float(a) for a in hits / max(n, 1)]}


def train_eagle3(model, units: list[Unit], out: str | Path, *, fuse: list[int], unroll: int = 4,
                 epochs: float = 1.0, batch_tokens: int = 4096, lr: float = 3e-4, draft_vocab: int = 4096,
                 init: str | Path | None = None, val_every: int = 200, val_docs: int = 96, seed: int = 0,
                 log=print) -> dict:
    """Train an EAGLE-3 head for `model` on the cached `units` (fused over `fuse`, cache_unit's layers);
    the best validation checkpoint lands in `out` (heads.safetensors, heads.json with draft_vocab and the
    training record, token_counts.safetensors). init: start from that EAGLE head (start_from)."""
    if unroll < 1 or epochs <= 0 or batch_tokens < 1:
        raise HeadsError("unroll must be >= 1, epochs > 0 and batch_tokens >= 1")
    if any(u.meta["layers"] != list(fuse) for u in units):
        raise HeadsError(f"the cached units hold other layers than {list(fuse)}: cache them again")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    dev = frozen_target(model)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    data = Data(units, vocab, draft_vocab, val_docs)
    save_counts(out, data.counts)
    lm, emb = draft_head(model, data.ids), model.get_input_embeddings()
    batches = length_batches(data.lengths(data.fit), batch_tokens)
    total = max(1, int(np.ceil(len(batches) * epochs)))
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(batches)) for _ in range(int(np.ceil(epochs)) + 1)])
    torch.manual_seed(seed)
    module, cfg = new_heads(model, "eagle", fuse=fuse)
    cfg["draft_vocab"] = len(data.ids)
    if init is not None:
        start_from(module, model, init, fuse, log)
    module.train()
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    sched = warmup_cosine(opt, total)
    key = hashlib.sha256(json.dumps([[u.meta["key"] for u in units], list(fuse), unroll, epochs, batch_tokens, lr,
                                     len(data.ids), None if init is None else str(init), val_docs, seed])
                         .encode()).hexdigest()[:16]
    state_path, step, best = out / "state.pt", 0, {"loss": float("inf"), "step": 0, "acc": []}
    if state_path.exists():
        st = torch.load(state_path, map_location=dev, weights_only=False)
        if st.get("key") == key:
            module.load_state_dict(st["module"])
            opt.load_state_dict(st["opt"])
            sched.load_state_dict(st["sched"])
            step, best = st["step"], st["best"]
            log(f"[eagle3] resuming at step {step}/{total}")
        else:
            log("[eagle3] state.pt is another run's (data or settings changed): starting over")
    fit_tokens = int(data.lengths(data.fit).sum())
    log(f"[eagle3] {len(data.fit)} documents ({fit_tokens} tokens) for training, {len(data.val)} for validation; "
        f"{total} steps of <= {batch_tokens} tokens, unroll {unroll}, fuse {list(fuse)}, draft vocabulary "
        f"{len(data.ids)} (covers {data.coverage:.3f} of the target's answer choices)")
    t0, s0 = time.perf_counter(), step
    while step < total:
        ids, states, labels = data.batch(data.fit[batches[order[step]]], dev)
        loss, acc = eagle3_loss(module, lm, emb(ids).detach(), states, labels, unroll)
        optimizer_step(loss, module, opt, sched)
        step += 1
        _progress("eagle3", step - s0, total - s0, t0, log, every=60.0,
                  extra=f"loss {float(loss.detach()):.3f} top-1 " + " ".join(f"{a:.2f}" for a in acc))
        if step % val_every == 0 or step == total:
            v = evaluate(module, data, emb, lm, unroll, batch_tokens, dev)
            log(f"[valid] step {step}: loss {v['loss']:.4f}, top-1 by level " + " ".join(f"{a:.3f}" for a in v["acc"]))
            if v["loss"] < best["loss"]:
                best = {**v, "step": step}
                record = {"recipe": "EAGLE-3 (arXiv 2503.01840): fused hidden states, token loss only, "
                                    "training-time test", "fuse": list(fuse), "unroll": unroll,
                          "best_step": step, "steps": total, "valid_loss": round(v["loss"], 5),
                          "valid_top1_by_level": [round(a, 4) for a in v["acc"]], "train_tokens": fit_tokens,
                          "train_documents": len(data.fit), "valid_documents": len(data.val), "epochs": epochs,
                          "lr": lr, "batch_tokens": batch_tokens, "draft_vocab": len(data.ids),
                          "draft_vocab_coverage": round(data.coverage, 4),
                          "init": None if init is None else str(init),
                          "minutes_so_far": round((time.perf_counter() - t_start) / 60, 2)}
                save_heads(module, cfg, out, {"training": record})
            torch.save({"key": key, "module": module.state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "step": step, "best": best}, state_path)
    log(f"[eagle3] done in {(time.perf_counter() - t_start) / 60:.1f} min; best step {best['step']}: "
        f"validation top-1 by level {best['acc']}")
    return best
