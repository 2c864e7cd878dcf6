"""Train DecodeScope's default tokenizer, draft and target models.

    python scripts/assets/train_models.py --device cuda         # v2 (shipped): stdlib corpus, ~1.5 min on one H100
    python scripts/assets/build_corpus.py && python scripts/assets/train_models.py --preset v3 --device cuda   # v3, see README
    python scripts/assets/train_models.py                       # CPU: the same schedule, hours (it prints its ETA)
    python scripts/assets/train_models.py --resume              # continue from assets/.ckpt after an interruption
    python scripts/assets/train_models.py --tiny --out-dir /tmp/x --ckpt-dir /tmp/x/ckpt   # seconds, for tests

The schedule is counted in tokens (--tokens-*, the v3 preset) or epochs over the fit tokens (--epochs-*, v2;
--steps-* for an exact step count), never in wall-clock minutes, so the same command trains the same model on
any machine. Preset v3 reads the memory-mapped token files of build_corpus.py (its own tokenizer, split by
package) and, on CUDA, trains with bf16 autocast, fused AdamW and torch.compile. One training file in
--valid-modulus (by a salted hash; never a held-out evaluation file) forms a validation slice; the weights
with the best validation loss are saved. Deterministic given --seed and the step counts. See assets/README.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stdlib_corpus  # noqa: E402
from eval_models import evaluate_dirs, heldout_nll, bits_per_byte  # noqa: E402

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[1] / "assets"  # writes target/ and draft/ there; .corpus and .ckpt are git-ignored there
# name -> (hidden, layers, heads, intermediate, lr)
ARCH = {
    "target": dict(hidden_size=320, num_hidden_layers=6, num_attention_heads=5, intermediate_size=864),
    "draft": dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3, intermediate_size=512),
    "tiny-target": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    "tiny-draft": dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=1, intermediate_size=32),
    # v3: ~36M-parameter target, ~4.5M draft (8x smaller), same 8192-token vocabulary
    "target-v3": dict(hidden_size=512, num_hidden_layers=10, num_attention_heads=8, intermediate_size=1408),
    "draft-v3": dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, intermediate_size=704),
}
# Size/data presets. v2 reproduces the shipped weights' recipe (stdlib corpus, epochs); v3 is the scaled recipe
# for one H100 in <= 20 minutes: tokens chosen from v2's measured 560k tokens/s scaled by parameters (an
# estimate until a GPU run measures it; the run prints its throughput and ETA after five steps).
PRESETS = {
    "v2": dict(corpus="stdlib", arch_target="target", arch_draft="draft", seq_len=256, warmup=60,
               lr_target=2e-3, lr_draft=3e-3, tokens_target=None, tokens_draft=None, batch=64),
    "v3": dict(corpus="v3", arch_target="target-v3", arch_draft="draft-v3", seq_len=512, warmup=300,
               lr_target=1e-3, lr_draft=2e-3, tokens_target=120e6, tokens_draft=60e6, batch=64),
}


# Default schedule in epochs over the fit tokens: the best points measured on a GPU (docs/engineering-notes.md,
# "Training schedule": target 1200 steps x 64 x 256 tokens = 6.3 epochs -> 0.893 bits/byte, 3000 steps -> 1.084
# (over-fitted); draft 1500 steps = 7.9 epochs -> 1.076, 3000 steps -> 1.096). The validation slice guards the rest.
EPOCHS = {"target": 6.3, "draft": 7.9}


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def make_config(name: str, vocab: int, eos: int, max_pos: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab, max_position_embeddings=max_pos, num_key_value_heads=ARCH[name]["num_attention_heads"],
        tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, initializer_range=0.02,
        attention_bias=False, mlp_bias=False, use_cache=True, **ARCH[name],
    )


def batch_at(ids: np.ndarray, step: int, seed: int, bsz: int, seq: int) -> torch.Tensor:
    """Batch of random windows; depends only on (seed, step), so resuming replays the same data order."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, ids.size - seq - 1, size=bsz)
    return torch.from_numpy(np.stack([ids[s : s + seq + 1] for s in starts]).astype(np.int64))


def lr_at(step: int, total: int, warmup: int, peak: float, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def valid_loss(model, ids: np.ndarray, seq: int, device, max_windows: int) -> float:
    """Mean next-token loss on the validation slice (the first max_windows non-overlapping windows)."""
    n = min(max_windows, (ids.size - 1) // seq)
    if n <= 0:
        return float("nan")
    x = torch.from_numpy(ids[: n * seq + 1].astype(np.int64))
    total = 0.0
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
        for i in range(0, n, 16):
            rows = torch.stack([x[j * seq : j * seq + seq + 1] for j in range(i, min(n, i + 16))]).to(device)
            logits = model(input_ids=rows[:, :-1]).logits.float()
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1),
                                     reduction="sum").item()
    model.train()
    return total / (n * seq)


class BestCheckpoint:
    """The weights with the lowest validation loss seen so far (ties keep the earlier step; a non-finite loss
    never wins). train_one offers every validation; restore() puts the best weights back before saving."""

    def __init__(self, best: dict | None = None):
        self.best = best

    def offer(self, step: int, loss: float, model) -> bool:
        if not math.isfinite(loss) or (self.best is not None and loss >= self.best["loss"]):
            return False
        self.best = {"loss": loss, "step": step,
                     "model": {k: t.detach().to("cpu", copy=True) for k, t in model.state_dict().items()}}
        return True

    def restore(self, model) -> int | None:
        """Load the best weights into `model`; returns their step (None: nothing was validated)."""
        if self.best is None:
            return None
        model.load_state_dict(self.best["model"])
        return self.best["step"]


def steps_for(epochs: float, tokens: int, bsz: int, seq: int) -> int:
    """Optimizer steps that show the model `epochs` passes over `tokens` training tokens."""
    return max(1, round(epochs * tokens / (bsz * seq)))


def train_one(name, args, tok, fit_ids, valid_ids, device, steps, lr, bsz):
    """Train one model for `steps` steps; keep the weights with the best validation loss (the corpus is
    small: past ~6 epochs the model over-fits while the train loss still falls). Returns (model, stats);
    checkpoints (latest and best) go to ckpt_dir/<name>.pt."""
    from transformers import LlamaForCausalLM

    arch = f"tiny-{name}" if args.tiny else PRESETS[args.preset][f"arch_{name}"]
    cfg = make_config(arch, len(tok), tok.eos_token_id, args.max_positions)
    cfg._attn_implementation = "sdpa"  # fused attention kernels (flash / memory-efficient) on CUDA
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    # compiled forward for training; `model` (uncompiled, same parameters) is what is saved and validated
    fwd = torch.compile(model) if args.compile else model
    ckpt = Path(args.ckpt_dir) / f"{name}.pt"
    step, elapsed, tokens_seen, ema, keeper, history = 0, 0.0, 0, None, BestCheckpoint(), []
    if args.resume and ckpt.exists():
        st = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, elapsed, tokens_seen, ema = st["step"], st["elapsed"], st["tokens"], st["ema"]
        keeper, history = BestCheckpoint(st.get("best")), st.get("history", [])
        log(f"[{name}] resumed at step {step}/{steps}")
    epochs = steps * bsz * args.seq_len / fit_ids.size
    every = args.eval_every or max(1, steps // 12)
    log(f"[{name}] {n_params/1e6:.2f}M params, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
        f"batch {bsz}x{args.seq_len}, {steps} steps = {epochs:.2f} epochs of {fit_ids.size:,} tokens, "
        f"peak lr {lr}, device {device}; validation every {every} steps on {valid_ids.size:,} tokens")
    use_amp = device.type == "cuda"
    warmup = max(2, min(args.warmup, steps // 10))
    first, t_start = step, time.time()
    probe = first + max(1, min(5, (steps - first) // 2))
    t_last_ckpt, t0 = t_start, t_start - elapsed
    while step < steps:
        x = batch_at(fit_ids, step, args.seed, bsz, args.seq_len).to(device)
        cur_lr = lr_at(step, steps, warmup, lr)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            logits = fwd(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += x[:, :-1].numel()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        elapsed = time.time() - t0
        if step == probe:  # say early how long this run will take on this machine
            per_step = (time.time() - t_start) / (step - first)
            log(f"[{name}] {per_step*1000:.0f} ms/step on {device}: this run takes about "
                f"{(steps - step) * per_step / 60:.1f} more minutes (ETA, validation not counted)")
        if valid_ids.size and (step % every == 0 or step == steps):
            v = valid_loss(model, valid_ids, args.seq_len, device, args.valid_windows)
            history.append([step, round(v, 4)])
            keeper.offer(step, v, model)
            best = keeper.best or {"loss": float("nan"), "step": None}
            log(f"[{name}] step {step} validation loss {v:.4f} (best {best['loss']:.4f} at step {best['step']})")
        if step % args.log_every == 0 or step == steps:
            tps = tokens_seen / max(elapsed, 1e-9)
            eta = (steps - step) * elapsed / step
            log(f"[{name}] step {step}/{steps} loss {loss.item():.3f} (ema {ema:.3f}) lr {cur_lr:.2e} "
                f"{tps:,.0f} tok/s elapsed {elapsed/60:.1f} min ETA {eta/60:.1f} min")
        if time.time() - t_last_ckpt > args.ckpt_minutes * 60 or step == steps:
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                        "tokens": tokens_seen, "ema": ema, "best": keeper.best, "history": history}, str(ckpt) + ".tmp")
            os.replace(str(ckpt) + ".tmp", ckpt)
            t_last_ckpt = time.time()
    best = keeper.best
    if keeper.restore(model) is not None:
        log(f"[{name}] keeping the best checkpoint: step {best['step']}, validation loss {best['loss']:.4f}")
    return model, {"arch": arch, "params": n_params, "steps": step, "epochs": round(epochs, 3), "minutes": round(elapsed / 60, 2),
                   "tokens": tokens_seen, "train_loss_ema": round(ema, 4), "peak_lr": lr, "batch": bsz,
                   "seq_len": args.seq_len, "best_step": best["step"] if best else step,
                   "best_valid_loss": round(best["loss"], 4) if best else None, "valid_history": history}


def save_model(model, tok, out: Path, dtype: str) -> None:
    """HF dir: safetensors shards <= 15 MB (stored in `dtype`; config says float32 so loading upcasts)."""
    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.safetensors")) + list(out.glob("*.safetensors.index.json")):
        old.unlink()
    m = model.to("cpu").to(getattr(torch, dtype))
    eos = tok.eos_token_id
    m.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, do_sample=False,
                                           max_new_tokens=128)
    m.save_pretrained(out, max_shard_size="15MB")
    cfg = json.loads((out / "config.json").read_text())
    cfg["dtype"] = "float32"  # weights are stored in `dtype` to fit the size budget; compute in fp32 on CPU
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tok.save_pretrained(out)
    model.to(torch.float32)


def load_data(args, ckdir: Path):
    """(tokenizer, fit_ids, valid_ids, {held-out stream: (ids, bytes)}) for the preset's corpus. v3: the
    uint16 token files of build_corpus.py, memory-mapped (the corpus is larger than it needs to be in RAM)."""
    if PRESETS[args.preset]["corpus"] == "v3":
        from tokenizers import Tokenizer

        work = Path(args.corpus_dir)
        if not (work / "meta.json").exists():
            raise SystemExit(f"error: no v3 corpus in {work}: run python scripts/assets/build_corpus.py first")
        meta = json.loads((work / "meta.json").read_text())
        tok = stdlib_corpus.wrap_tokenizer(Tokenizer.from_file(str(work / "tokenizer.json")), args.max_positions)
        ids = {s: np.memmap(work / f"{s}.bin", dtype=np.uint16, mode="r") for s in meta["splits"]
               if meta["splits"][s]["tokens"]}
        streams = {s: (ids[s], meta["splits"][s]["bytes"]) for s in ("heldout_stdlib", "heldout_packages") if s in ids}
        return tok, ids["train"], ids.get("valid", np.zeros(0, np.uint16)), streams
    tok, train_ids, val_ids, meta = stdlib_corpus.prepare(ckdir, args.vocab_size, args.max_positions, args.tiny, log)
    fit_ids, valid_ids = train_ids, np.zeros(0, dtype=np.uint16)
    if args.valid_modulus:
        train_files = stdlib_corpus.load_split(tiny=args.tiny)[0]
        fit_ids, valid_ids = stdlib_corpus.fit_and_validation(ckdir, train_files, args.valid_modulus, log)
    return tok, fit_ids, valid_ids, {"heldout_stdlib": (val_ids, meta["heldout_bytes"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="v2",
                    help="v2: the shipped recipe (stdlib, 10M/2.5M); v3: build_corpus.py's corpus, 36M/4.5M")
    ap.add_argument("--corpus-dir", default=str(ASSETS / ".corpus"), help="build_corpus.py's output (preset v3)")
    ap.add_argument("--out-dir", default=str(ASSETS), help="writes <out>/target and <out>/draft")
    ap.add_argument("--ckpt-dir", default=str(ASSETS / ".ckpt"), help="checkpoints and token caches (not in git)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores on CPU)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--vocab-size", type=int, default=8192, help="v2 only (v3: build_corpus.py's tokenizer)")
    ap.add_argument("--seq-len", type=int, default=None, help="training context (preset: 256 v2, 512 v3)")
    ap.add_argument("--batch-draft", type=int, default=None, help="sequences per step (default 4 CPU / 64 CUDA)")
    ap.add_argument("--batch-target", type=int, default=None, help="sequences per step (default 8 CPU / 64 CUDA)")
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--tokens-draft", type=float, default=None, help="training tokens (v3 default 60e6)")
    ap.add_argument("--tokens-target", type=float, default=None, help="training tokens (v3 default 120e6)")
    ap.add_argument("--epochs-draft", type=float, default=None, help=f"passes over the fit tokens (v2 default {EPOCHS['draft']})")
    ap.add_argument("--epochs-target", type=float, default=None, help=f"passes over the fit tokens (v2 default {EPOCHS['target']})")
    ap.add_argument("--steps-draft", type=int, default=None, help="exact step count (overrides tokens/epochs)")
    ap.add_argument("--steps-target", type=int, default=None, help="exact step count (overrides tokens/epochs)")
    ap.add_argument("--valid-modulus", type=int, default=40,
                    help="v2: 1 in M training files (by hash) is the validation slice that picks the best checkpoint; "
                         "0 = none (fit on every training file, keep the last weights). v3: build_corpus.py's split")
    ap.add_argument("--eval-every", type=int, default=None, help="steps between validations (default: 12 per run)")
    ap.add_argument("--valid-windows", type=int, default=96, help="validation windows of seq-len tokens")
    ap.add_argument("--lr-draft", type=float, default=None, help="peak lr (preset: 3e-3 v2, 2e-3 v3)")
    ap.add_argument("--lr-target", type=float, default=None, help="peak lr (preset: 2e-3 v2, 1e-3 v3)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (preset: 60 v2, 300 v3)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                    help="torch.compile the training forward (default: on for CUDA)")
    ap.add_argument("--only", choices=["all", "draft", "target", "eval"], default="all")
    ap.add_argument("--resume", action="store_true", help="continue from checkpoints in --ckpt-dir")
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--save-dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--tiny", action="store_true", help="tiny corpus/models/steps: an end-to-end smoke run")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = device.type == "cuda"
    pre = PRESETS[args.preset]
    for key in ("seq_len", "warmup", "lr_target", "lr_draft", "tokens_target", "tokens_draft"):
        if getattr(args, key) is None:
            setattr(args, key, pre[key])
    args.compile = cuda if args.compile is None else args.compile
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if args.tiny:
        args.vocab_size, args.seq_len, args.batch_draft, args.batch_target, args.log_every = 384, 64, 4, 4, 2
        args.warmup, args.max_positions, args.valid_modulus, args.valid_windows = 2, 256, 4, 4
        args.tokens_draft = args.tokens_target = None
        if args.epochs_draft is None:
            args.steps_draft = args.steps_draft or 4
        if args.epochs_target is None:
            args.steps_target = args.steps_target or 4
    args.batch_draft = args.batch_draft or (pre["batch"] if cuda else 4)
    args.batch_target = args.batch_target or (pre["batch"] if cuda else 8)
    log(f"args: {vars(args)} threads={torch.get_num_threads()}")
    out, ckdir = Path(args.out_dir), Path(args.ckpt_dir)
    tok, fit_ids, valid_ids, streams = load_data(args, ckdir)
    results_path = ckdir / "train_stats.json"
    ckdir.mkdir(parents=True, exist_ok=True)
    stats = json.loads(results_path.read_text()) if results_path.exists() and args.resume else {}
    stats["seed"], stats["device"], stats["threads"] = args.seed, str(device), torch.get_num_threads()
    stats["preset"], stats["compile"] = args.preset, args.compile
    stats["valid_modulus"], stats["fit_tokens"], stats["valid_tokens"] = args.valid_modulus, int(fit_ids.size), \
        int(valid_ids.size)
    for name, epochs, tokens, steps, lr, bsz in (
            ("draft", args.epochs_draft or EPOCHS["draft"], args.tokens_draft, args.steps_draft, args.lr_draft,
             args.batch_draft),
            ("target", args.epochs_target or EPOCHS["target"], args.tokens_target, args.steps_target, args.lr_target,
             args.batch_target)):
        if args.only not in ("all", name):
            continue
        if not steps and tokens and not (args.epochs_draft if name == "draft" else args.epochs_target):
            steps = max(1, round(tokens / (bsz * args.seq_len)))
        steps = steps or steps_for(epochs, fit_ids.size, bsz, args.seq_len)
        model, st = train_one(name, args, tok, fit_ids, valid_ids, device, steps, lr, bsz)
        stats[name] = st
        save_model(model, tok, out / name, args.save_dtype)
        results_path.write_text(json.dumps(stats, indent=1))
        log(f"[{name}] saved to {out / name}")
    ids, n_bytes = streams["heldout_stdlib"]
    ev = evaluate_dirs(out, np.asarray(ids), n_bytes, args.seq_len, log=log, completions=not args.tiny,
                       device="cuda" if cuda else "cpu")
    for sname, (sids, sbytes) in streams.items():  # v3: also the held-out packages
        for name, r in ev["models"].items():
            if sname != "heldout_stdlib":
                from transformers import AutoModelForCausalLM

                m = AutoModelForCausalLM.from_pretrained(out / name).to(device).eval()
                nll, n = heldout_nll(m, np.asarray(sids), args.seq_len)
                r[sname] = {"loss": nll / n, "bits_per_byte": bits_per_byte(nll, sbytes), "tokens": n}
            else:
                r[sname] = {"loss": r["loss"], "bits_per_byte": r["bits_per_byte"], "tokens": r["tokens"]}
            log(f"[eval] {name} on {sname}: loss {r[sname]['loss']:.4f} nats/token, "
                f"{r[sname]['bits_per_byte']:.4f} bits/byte ({r[sname]['tokens']} tokens, {sbytes} bytes)")
    stats["eval"] = ev
    results_path.write_text(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
