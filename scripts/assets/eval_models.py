"""Held-out evaluation of the shipped models: loss, bits per byte, tokenizer round trip, greedy completions.

    python scripts/assets/eval_models.py [--out-dir assets] [--ckpt-dir assets/.ckpt]

bits/byte = (total NLL in nats over every held-out token after the first) / ln 2 / (UTF-8 bytes of the
held-out files).  The held-out stream is the held-out files in sorted order, each followed by EOS; the EOS
predictions are counted in the NLL (their cost is charged to the source bytes, a slight overestimate).
"""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stdlib_corpus  # noqa: E402

PROMPT_FILES = ["chunk.py", "uu.py", "wsgiref/handlers.py"]


def bits_per_byte(total_nll_nats: float, n_bytes: int) -> float:
    return total_nll_nats / math.log(2) / n_bytes


@torch.no_grad()
def heldout_nll(model, ids: np.ndarray, ctx: int, batch: int = 8) -> tuple[float, int]:
    """Sum of NLL (nats) over ids[1:], in non-overlapping windows of ctx predictions."""
    x = torch.from_numpy(ids.astype(np.int64))
    starts = list(range(0, x.numel() - 1, ctx))
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        chunks = [x[s : s + ctx + 1] for s in starts[i : i + batch]]
        full = [c for c in chunks if c.numel() == ctx + 1]
        rest = [c for c in chunks if c.numel() != ctx + 1]
        groups = ([torch.stack(full)] if full else []) + [c[None] for c in rest]
        for g in groups:
            logits = model(input_ids=g[:, :-1]).logits.float()
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), g[:, 1:].reshape(-1),
                                                    reduction="sum")
            total += nll.item()
            count += g[:, 1:].numel()
    return total, count


PROMPT_LINES = 12  # short prompts: prompt + continuation stay within the 256-token training context


def completion_prompts(held: dict[str, str]) -> list[tuple[str, str]]:
    """(file, prompt): the PROMPT_LINES lines ending with the second def signature line of each prompt file."""
    out = []
    for rel in PROMPT_FILES if all(f in held for f in PROMPT_FILES) else sorted(held)[:3]:
        lines = held[rel].splitlines(keepends=True)
        defs = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("def ") and ln.rstrip().endswith(":")]
        end = defs[1] if len(defs) > 1 else (defs[0] if defs else min(10, len(lines) - 1))
        # no trailing newline: BPE merges "\n" with the next line's indentation, so a prompt ending in a bare
        # "\n" token is a boundary the model never saw in training (it then dedents to column 0)
        out.append((rel, "".join(lines[max(0, end - PROMPT_LINES + 1) : end + 1]).rstrip("\n")))
    return out


def evaluate_dirs(out_dir, val_ids, heldout_bytes, ctx, log=print, completions=True, device="cpu",
                  max_new_tokens=64, loss=True):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir = Path(out_dir)
    tiny = not completions
    _, held = stdlib_corpus.load_split(tiny=tiny)
    res = {"models": {}, "heldout_bytes": heldout_bytes}
    tok = AutoTokenizer.from_pretrained(out_dir / "target" if (out_dir / "target").exists() else out_dir / "draft")
    res["tokenizer_class"] = type(tok).__name__
    rel = sorted(held)[0]
    ids = tok(held[rel])["input_ids"]
    res["roundtrip_file"], res["roundtrip_ok"] = rel, tok.decode(ids) == held[rel]
    log(f"[eval] tokenizer {type(tok).__name__}: round trip of {rel} ({len(ids)} tokens): {res['roundtrip_ok']}")
    prompts = completion_prompts(held) if completions else []
    for name in ("draft", "target"):
        if not (out_dir / name).exists():
            continue
        t0 = time.time()
        model = AutoModelForCausalLM.from_pretrained(out_dir / name).to(device).eval()
        nll, n = heldout_nll(model, val_ids, ctx) if loss else (float("nan"), 1)
        nll2, n2 = heldout_nll(model, val_ids, 2 * ctx) if loss else (float("nan"), 1)  # past the training context
        r = {"loss_ctx_x2": nll2 / n2, "bits_per_byte_ctx_x2": bits_per_byte(nll2, heldout_bytes), "ctx": ctx,
             "params": sum(p.numel() for p in model.parameters()), "dtype_loaded": str(model.dtype),
             "loss": nll / n, "tokens": n, "bits_per_byte": bits_per_byte(nll, heldout_bytes),
             "disk_mb": round(sum(f.stat().st_size for f in (out_dir / name).iterdir()) / 1e6, 2),
             "completions": []}
        for rel, prompt in prompts:
            enc = tok(prompt, return_tensors="pt")
            gen = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tok.eos_token_id)
            r["completions"].append({"file": rel, "prompt": prompt,
                                     "completion": tok.decode(gen[0, enc["input_ids"].shape[1]:])})
        res["models"][name] = r
        log(f"[eval] {name}: loss {r['loss']:.4f}, {r['bits_per_byte']:.4f} bits/byte at ctx {ctx}; at ctx {2 * ctx}: "
            f"{r['loss_ctx_x2']:.4f}, {r['bits_per_byte_ctx_x2']:.4f} bits/byte ({time.time()-t0:.0f} s)")
    return res


LOOP_TOKENS, LOOP_REPEATS = 128, 3


def loop_prompts(held: dict[str, str], per_file: int = 3) -> list[tuple[str, str]]:
    """(file, prompt) for the loop measure: for each held-out file (codec tables excluded), up to `per_file`
    prompts of PROMPT_LINES lines ending at its 2nd, 4th, 6th ... def signature (no trailing newline)."""
    out = []
    for rel in sorted(held):
        if rel.startswith("encodings/"):
            continue
        lines = held[rel].splitlines(keepends=True)
        defs = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("def ") and ln.rstrip().endswith(":")]
        for end in defs[1::2][:per_file]:
            out.append((rel, "".join(lines[max(0, end - PROMPT_LINES + 1) : end + 1]).rstrip("\n")))
    return out


def repeated_line(text: str) -> str | None:
    """The most frequent non-empty line (stripped) when it appears >= LOOP_REPEATS times: the model looped."""
    from collections import Counter

    counts = Counter(ln.strip() for ln in text.splitlines() if ln.strip())
    line, n = counts.most_common(1)[0] if counts else ("", 0)
    return line if n >= LOOP_REPEATS else None


def distinct_4(text: str) -> float:
    """Distinct 4-grams / all 4-grams over code tokens (identifiers, numbers, symbols: tokenizer-independent)."""
    import near_dup

    toks = near_dup.TOKEN.findall(text)
    grams = [tuple(toks[i : i + 4]) for i in range(len(toks) - 3)]
    return len(set(grams)) / len(grams) if grams else 1.0


@torch.no_grad()
def loop_measure(model, tok, prompts: list[tuple[str, str]], max_new_tokens: int = LOOP_TOKENS) -> dict:
    """Share of greedy outputs with a line repeated >= 3 times, and their mean distinct-4 ratio."""
    rows = []
    for rel, prompt in prompts:
        enc = tok(prompt, return_tensors="pt").to(model.device)
        gen = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tok.eos_token_id)
        text = tok.decode(gen[0, enc["input_ids"].shape[1]:])
        rows.append({"file": rel, "loop": repeated_line(text), "distinct_4": round(distinct_4(text), 4),
                     "completion": text})
    return {"prompts": len(rows), "max_new_tokens": max_new_tokens,
            "loop_share": sum(r["loop"] is not None for r in rows) / max(1, len(rows)),
            "distinct_4": sum(r["distinct_4"] for r in rows) / max(1, len(rows)), "outputs": rows}


@torch.no_grad()
def sampled_bits_per_byte(model, tok, texts: list[str], ctx: int, windows: int) -> dict:
    """bits/byte on `windows` evenly spaced ctx-token windows of the texts' stream (each text + EOS): a
    CPU-sized estimate for a large held-out set. Bytes = UTF-8 bytes of the predicted tokens' decoding."""
    ids: list[int] = []
    for t in texts:
        ids += tok(t)["input_ids"] + [tok.eos_token_id]
    starts = np.linspace(0, len(ids) - ctx - 1, num=min(windows, (len(ids) - 1) // ctx)).astype(int)
    nll, n_bytes, n_tok = 0.0, 0, 0
    for s in starts:
        w = torch.tensor([ids[s : s + ctx + 1]])
        logits = model(input_ids=w[:, :-1]).logits.float()
        nll += torch.nn.functional.cross_entropy(logits[0], w[0, 1:], reduction="sum").item()
        n_bytes += len(tok.decode(w[0, 1:].tolist()).encode("utf-8"))
        n_tok += ctx
    return {"bits_per_byte": bits_per_byte(nll, n_bytes), "loss": nll / n_tok, "windows": len(starts),
            "tokens": n_tok, "bytes": n_bytes, "stream_tokens": len(ids)}


def heldout_stream(ckpt_dir: Path, tokenizer_json: Path) -> tuple[np.ndarray, int]:
    """Held-out token stream and its UTF-8 byte count: the training run's cache when there is one, else the
    held-out files encoded with the shipped tokenizer (the same ids), so a fresh clone can evaluate too."""
    import json

    meta_path, ids_path = ckpt_dir / "corpus_meta.json", ckpt_dir / "val_ids.npy"
    if meta_path.exists() and ids_path.exists():
        return np.load(ids_path), json.loads(meta_path.read_text())["heldout_bytes"]
    from tokenizers import Tokenizer

    held = stdlib_corpus.load_split()[1]
    docs = [held[k] for k in sorted(held)]
    return stdlib_corpus.encode_docs(Tokenizer.from_file(str(tokenizer_json)), docs), \
        sum(len(t.encode("utf-8")) for t in docs)


def loops_main(out_dir: Path, names=("target", "draft")) -> dict:
    """The loop measure for each model in out_dir on the held-out stdlib prompts (loop_prompts)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompts = loop_prompts(stdlib_corpus.load_split()[1])
    res = {"prompts": "scripts/assets/eval_models.py: loop_prompts (held-out stdlib files)", "models": {}}
    for name in names:
        tok = AutoTokenizer.from_pretrained(out_dir / name)
        model = AutoModelForCausalLM.from_pretrained(out_dir / name).eval()
        t0 = time.time()
        res["models"][name] = loop_measure(model, tok, prompts)
        r = res["models"][name]
        print(f"[loops] {name}: {r['loop_share']:.1%} of {r['prompts']} outputs loop, distinct-4 "
              f"{r['distinct_4']:.3f} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    return res


def main() -> int:
    import argparse
    import json

    assets = Path(__file__).resolve().parents[2] / "assets"
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=str(assets))
    ap.add_argument("--ckpt-dir", default=str(assets / ".ckpt"))
    ap.add_argument("--ctx", type=int, default=256, help="the training context (seq_len)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--completions-only", action="store_true", help="skip the held-out loss")
    ap.add_argument("--loops", action="store_true", help="only the loop measure (128-token greedy outputs)")
    ap.add_argument("--models", default="target,draft", help="--loops: which of out-dir's models")
    ap.add_argument("--heldout-packages", default=None,
                    help="build_corpus.py's heldout_packages.jsonl: bits/byte of the target on --sample-windows of it")
    ap.add_argument("--sample-windows", type=int, default=200)
    ap.add_argument("--save", default=None, help="also write the JSON here")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.heldout_packages:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        texts = [json.loads(ln)["text"] for ln in open(a.heldout_packages)]
        res = {}
        for name in a.models.split(","):
            tok = AutoTokenizer.from_pretrained(Path(a.out_dir) / name)
            model = AutoModelForCausalLM.from_pretrained(Path(a.out_dir) / name).eval()
            res[name] = sampled_bits_per_byte(model, tok, texts, a.ctx, a.sample_windows)
            print(f"[packages] {name}: {res[name]}", file=sys.stderr, flush=True)
        if a.save:
            Path(a.save).write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(res, indent=1))
        return 0
    if a.loops:
        res = loops_main(Path(a.out_dir), a.models.split(","))
        text = json.dumps(res, indent=1)
        if a.save:
            Path(a.save).write_text(text + "\n")
        print(text)
        return 0
    val_ids, heldout_bytes = heldout_stream(Path(a.ckpt_dir), Path(a.out_dir) / "target" / "tokenizer.json")
    res = evaluate_dirs(a.out_dir, val_ids, heldout_bytes, a.ctx, loss=not a.completions_only)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
