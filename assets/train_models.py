"""Train DecodeScope's default tokenizer, draft and target models on the local Python standard library.

    python assets/train_models.py                       # CPU: ~11 min draft + ~55 min target
    python assets/train_models.py --resume              # continue from assets/.ckpt after an interruption
    python assets/train_models.py --tiny --out-dir /tmp/x --ckpt-dir /tmp/x/ckpt   # seconds, for tests

The run is deterministic given --seed and the step counts (--steps-draft/--steps-target). With a time
budget (--minutes-*) the step count is calibrated from the measured speed of the first steps and printed,
so that the run can be reproduced exactly with --steps-*.  See assets/README.md.
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
from eval_models import evaluate_dirs  # noqa: E402

HERE = Path(__file__).resolve().parent
# name -> (hidden, layers, heads, intermediate, lr)
ARCH = {
    "target": dict(hidden_size=320, num_hidden_layers=6, num_attention_heads=5, intermediate_size=864),
    "draft": dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3, intermediate_size=512),
    "tiny-target": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    "tiny-draft": dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=1, intermediate_size=32),
}


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


def train_one(name, args, tok, train_ids, device, minutes, steps, lr, bsz):
    """Train one model; returns (model, stats). Checkpoints to ckpt_dir/<name>.pt."""
    from transformers import LlamaForCausalLM

    arch = f"tiny-{name}" if args.tiny else name
    cfg = make_config(arch, len(tok), tok.eos_token_id, args.max_positions)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg).to(device)
    model.config._attn_implementation = "sdpa"
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    ckpt = Path(args.ckpt_dir) / f"{name}.pt"
    step, total, elapsed, tokens_seen, ema, replans = 0, steps, 0.0, 0, None, []
    if args.resume and ckpt.exists():
        st = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, total, elapsed, tokens_seen, ema = st["step"], st["total"], st["elapsed"], st["tokens"], st["ema"]
        replans = st.get("replans", [])
        log(f"[{name}] resumed at step {step}/{total}")
    if st_done := (total is not None and step >= total):
        log(f"[{name}] already finished ({step} steps)")
    log(f"[{name}] {n_params/1e6:.2f}M params, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
        f"batch {bsz}x{args.seq_len}, peak lr {lr}, device {device}")
    use_amp = device.type == "cuda"
    warmup = max(2, min(args.warmup, steps // 10)) if steps else args.warmup
    first, t_calib = step, None  # time budget: measure steps first+3 .. first+28 of this process
    t_last_ckpt = time.time()
    t0 = time.time() - elapsed
    while not st_done and (total is None or step < total):
        if total is None and step == first + 3:
            t_calib = time.time()
        x = batch_at(train_ids, step, args.seed, bsz, args.seq_len).to(device)
        cur_lr = lr_at(step, total or 10**9, warmup, lr)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += x[:, :-1].numel()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        elapsed = time.time() - t0
        if total is None and step == first + 28:
            per_step = (time.time() - t_calib) / 25
            total = max(step + 1, int((minutes * 60 - elapsed) / per_step) + step)
            log(f"[{name}] calibrated: {per_step*1000:.0f} ms/step -> total {total} steps "
                f"(reproduce with --steps-{name} {total})")
        if steps is None and total and step % args.log_every == 0 and step < total:
            # time budget: if the machine got slower (shared CPU), shorten the schedule to stay within it
            per_step = elapsed / step
            if elapsed + (total - step) * per_step > minutes * 60 * 1.08:
                new_total = max(step + 1, step + int((minutes * 60 - elapsed) / per_step))
                if new_total < total:
                    log(f"[{name}] running slower than calibrated: total {total} -> {new_total} steps")
                    replans.append([step, total, new_total])
                    total = new_total
        if step % args.log_every == 0 or step == total:
            tps = tokens_seen / max(elapsed, 1e-9)
            eta = (total - step) * elapsed / step if total else float("nan")
            log(f"[{name}] step {step}/{total or '?'} loss {loss.item():.3f} (ema {ema:.3f}) lr {cur_lr:.2e} "
                f"{tps:,.0f} tok/s elapsed {elapsed/60:.1f} min ETA {eta/60:.1f} min")
        if time.time() - t_last_ckpt > args.ckpt_minutes * 60 or step == total:
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "total": total,
                        "elapsed": elapsed, "tokens": tokens_seen, "ema": ema, "replans": replans},
                       str(ckpt) + ".tmp")
            os.replace(str(ckpt) + ".tmp", ckpt)
            t_last_ckpt = time.time()
    return model, {"params": n_params, "steps": step, "minutes": round(elapsed / 60, 2), "tokens": tokens_seen,
                   "train_loss_ema": round(ema, 4), "peak_lr": lr, "batch": bsz, "seq_len": args.seq_len,
                   "schedule_replans": replans}


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=str(HERE), help="writes <out>/target and <out>/draft")
    ap.add_argument("--ckpt-dir", default=str(HERE / ".ckpt"), help="checkpoints and token caches (not in git)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores on CPU)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-draft", type=int, default=None, help="sequences per step (default 4 CPU / 64 CUDA)")
    ap.add_argument("--batch-target", type=int, default=None, help="sequences per step (default 8 CPU / 64 CUDA)")
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--minutes-draft", type=float, default=None, help="time budget (default 11 CPU / 5 CUDA)")
    ap.add_argument("--minutes-target", type=float, default=None, help="time budget (default 55 CPU / 15 CUDA)")
    ap.add_argument("--steps-draft", type=int, default=None, help="exact step count (overrides --minutes-draft)")
    ap.add_argument("--steps-target", type=int, default=None, help="exact step count (overrides --minutes-target)")
    ap.add_argument("--lr-draft", type=float, default=3e-3)
    ap.add_argument("--lr-target", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
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
    if args.tiny:
        args.vocab_size, args.seq_len, args.batch_draft, args.batch_target, args.log_every = 384, 64, 4, 4, 2
        args.warmup = 2
        if args.minutes_draft is None:
            args.steps_draft = args.steps_draft or 4
        if args.minutes_target is None:
            args.steps_target = args.steps_target or 4
        args.max_positions = 256
    args.batch_draft = args.batch_draft or (64 if cuda else 4)
    args.batch_target = args.batch_target or (64 if cuda else 8)
    md = args.minutes_draft or (5 if cuda else 11)
    mt = args.minutes_target or (15 if cuda else 55)
    log(f"args: {vars(args)} threads={torch.get_num_threads()}")
    out, ckdir = Path(args.out_dir), Path(args.ckpt_dir)
    tok, train_ids, val_ids, meta = stdlib_corpus.prepare(ckdir, args.vocab_size, args.max_positions, args.tiny, log)
    results_path = ckdir / "train_stats.json"
    stats = json.loads(results_path.read_text()) if results_path.exists() and args.resume else {}
    stats["seed"], stats["device"], stats["threads"] = args.seed, str(device), torch.get_num_threads()
    for name, minutes, steps, lr, bsz in (("draft", md, args.steps_draft, args.lr_draft, args.batch_draft),
                                          ("target", mt, args.steps_target, args.lr_target, args.batch_target)):
        if args.only not in ("all", name):
            continue
        model, st = train_one(name, args, tok, train_ids, device, minutes, steps, lr, bsz)
        stats[name] = st
        save_model(model, tok, out / name, args.save_dtype)
        results_path.write_text(json.dumps(stats, indent=1))
        log(f"[{name}] saved to {out / name}")
    ev = evaluate_dirs(out, val_ids, meta["heldout_bytes"], args.seq_len, log=log,
                       completions=not args.tiny, device="cpu")
    stats["eval"] = ev
    results_path.write_text(json.dumps(stats, indent=1))
    for name, r in ev["models"].items():
        log(f"[eval] {name}: held-out loss {r['loss']:.4f} nats/token, {r['bits_per_byte']:.4f} bits/byte "
            f"({r['tokens']} tokens, {meta['heldout_bytes']} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
