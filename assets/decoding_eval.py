"""Lookahead compression of a shipped model on held-out code prompts (uses the `decoding` package).

    python assets/decoding_eval.py --model assets/target --window 15 --ngram 5 --guesses 15 --max-new-tokens 96

Prompts: for each held-out file with at least two `def` lines (codec tables under encodings/ excluded), the 12
lines ending with the second `def` signature (the same rule as the greedy completions in eval_models.py).
Compression = generated tokens / decoding steps (one target forward per step), summed over all prompts.
Every lookahead output is checked token for token against plain `model.generate(do_sample=False)`.
With --draft, the draft's mean acceptance length (greedy speculative decoding, k drafted tokens, +1 bonus) is
replayed on that greedy output with plain HF generate (no `decoding` speculative method needed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import stdlib_corpus  # noqa: E402
from eval_models import PROMPT_LINES  # noqa: E402


def prompts(limit: int) -> list[tuple[str, str]]:
    held = stdlib_corpus.load_split()[1]
    out = []
    for rel in sorted(held):
        if rel.startswith("encodings/"):
            continue
        lines = held[rel].splitlines(keepends=True)
        defs = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("def ") and ln.rstrip().endswith(":")]
        if len(defs) >= 2:
            out.append((rel, "".join(lines[max(0, defs[1] - PROMPT_LINES + 1) : defs[1] + 1]).rstrip("\n")))
    return out[:limit]


def speculative_acceptance(target_ids: list[int], prompt_ids: list[int], draft, k: int):
    """Greedy speculative decoding replayed on the target's greedy output: per step the draft proposes k tokens
    greedily, the longest prefix matching the target's own greedy tokens is accepted, plus one bonus token from
    the target.  Returns the accepted length (accepted + 1) of every step."""
    import torch

    lengths, i = [], 0
    while i < len(target_ids):
        ctx = torch.tensor([prompt_ids + target_ids[:i]])
        prop = draft.generate(ctx, attention_mask=torch.ones_like(ctx), do_sample=False, max_new_tokens=k,
                              min_new_tokens=k, pad_token_id=0)[0, ctx.shape[1]:].tolist()
        n = 0
        while n < len(prop) and i + n < len(target_ids) and prop[n] == target_ids[i + n]:
            n += 1
        step = min(n + 1, len(target_ids) - i)
        lengths.append(step)
        i += step
    return lengths


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from decoding.api import make_drafter, run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(HERE / "target"))
    ap.add_argument("--window", type=int, default=15)
    ap.add_argument("--ngram", type=int, default=5)
    ap.add_argument("--guesses", type=int, default=15)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--draft", default=str(HERE / "draft"), help="draft for the speculative replay ('' = skip)")
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model).eval()
    draft = AutoModelForCausalLM.from_pretrained(a.draft).eval() if a.draft else None
    rows, new_total, steps_total, spec = [], 0, 0, []
    for rel, prompt in prompts(a.prompts):
        drafter = make_drafter("lookahead", window=a.window, ngram=a.ngram, guesses=a.guesses,
                               text_span=a.ngram - 1)  # the paper's pool, as the model card reports
        t0 = time.time()
        tr = run(model, tok, prompt, "lookahead", max_new_tokens=a.max_new_tokens, drafter=drafter, trace=False)
        dt = time.time() - t0
        st = tr.stats()
        enc = tok(prompt, return_tensors="pt")
        ref = model.generate(**enc, do_sample=False, max_new_tokens=a.max_new_tokens, pad_token_id=tok.eos_token_id)
        ref_ids = ref[0, enc["input_ids"].shape[1] :].tolist()
        same = ref_ids[: len(tr.output_ids)] == tr.output_ids
        rows.append({"file": rel, "new_tokens": st["new_tokens"], "steps": st["steps"],
                     "compression": st["compression"], "seconds": round(dt, 2), "matches_greedy": same})
        new_total, steps_total = new_total + st["new_tokens"], steps_total + st["steps"]
        msg = ""
        if draft is not None:
            lens = speculative_acceptance(ref_ids, enc["input_ids"][0].tolist(), draft, a.draft_tokens)
            spec.extend(lens)
            rows[-1]["spec_mean_accepted"] = sum(lens) / len(lens)
            msg = f" | draft mean acceptance length {sum(lens) / len(lens):.2f}"
        print(f"{rel:40s} {st['new_tokens']:4d} tokens {st['steps']:4d} steps compression {st['compression']:.2f} "
              f"greedy-identical {same}{msg}", flush=True)
    res = {"model": a.model, "W": a.window, "N": a.ngram, "G": a.guesses, "max_new_tokens": a.max_new_tokens,
           "prompts": len(rows), "compression": new_total / max(1, steps_total),
           "mean_prompt_compression": sum(r["compression"] for r in rows) / max(1, len(rows)),
           "all_match_greedy": all(r["matches_greedy"] for r in rows), "rows": rows,
           "draft": a.draft, "draft_tokens": a.draft_tokens,
           "spec_mean_acceptance_length": sum(spec) / len(spec) if spec else None}
    print(f"overall compression {res['compression']:.3f} tokens/step over {len(rows)} prompts "
          f"(mean per prompt {res['mean_prompt_compression']:.3f}); all identical to greedy: {res['all_match_greedy']}")
    if spec:
        print(f"speculative replay with {a.draft_tokens} drafted tokens: mean acceptance length "
              f"{res['spec_mean_acceptance_length']:.3f} over {len(spec)} steps")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
