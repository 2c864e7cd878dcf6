"""Lookahead compression of a shipped model on held-out code prompts (uses the `decoding` package).

    python scripts/assets/decoding_eval.py --model assets/target --window 15 --ngram 5 --guesses 15 --max-new-tokens 96

Prompts: for each held-out file with at least two `def` lines (codec tables under encodings/ excluded), the 12
lines ending with the second `def` signature (the same rule as the greedy completions in eval_models.py).
Compression = generated tokens / decoding steps (one target forward per step), summed over all prompts.
Three lookahead variants per prompt: the engine's defaults, the paper's pool, and the official reference
implementation's rules (ReferenceStyle). Every output is checked token for token against plain
`model.generate(do_sample=False)`. With --draft, the draft's mean acceptance length (k drafted tokens, +1
bonus) is measured twice: replayed on the greedy output with plain HF generate, and on the engine's own
speculative chain (with its default 0.4 confidence cutoff, and without one).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
ASSETS = HERE.parents[1] / "assets"
import stdlib_corpus  # noqa: E402
from eval_models import loop_prompts  # noqa: E402


def prompts(limit: int) -> list[tuple[str, str]]:
    """One prompt per held-out file (ending at its 2nd def signature): the loop measure's first prompts."""
    return loop_prompts(stdlib_corpus.load_split()[1], per_file=1)[:limit]


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


class ReferenceStyle:
    """The official implementation's rules on our engine, for a like-for-like compression comparison: the
    paper's pool (n-grams of N-1 tokens from window, prompt and output, keyed by one token) and at most N-1
    accepted tokens per step (LADE drops the bonus token of a full match). The reference itself cannot run
    here: it monkey-patches transformers 4.36 Llama classes. Candidates cut to N-2 tokens give exactly that cap:
    k matched tokens still yield k + 1, and a full match yields N-1."""

    def __init__(self, drafter):
        self.inner, self.cut = drafter, drafter.N - 2

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def plan(self, context):
        pool = self.inner.pool
        if not hasattr(pool, "_uncut_lookup"):
            pool._uncut_lookup = pool.lookup
            cut = self.cut

            def lookup(key, limit, prev=None, text=None):  # one-token keys, like the reference's pool
                cands, sources = pool._uncut_lookup(key, limit, None, text)
                kept = [(tuple(c[:cut]), s) for c, s in zip(cands, sources) if cut > 0]
                seen, out = set(), []
                for c, s in kept:
                    if c not in seen:
                        seen.add(c)
                        out.append((c, s))
                return [c for c, _ in out], [s for _, s in out]
            pool.lookup = lookup
        return self.inner.plan(context)


def lookahead_row(model, tok, prompt: str, a, variant: str, ref_ids: list[int]) -> dict:
    """One lookahead run: 'engine' (the defaults: text n-grams with up to 7 tokens of continuation),
    'paper' (the paper's pool: N-1 tokens) or 'reference' (paper pool + the reference's N-1 accept cap)."""
    from decoding.api import make_drafter, run

    span = None if variant == "engine" else a.ngram - 1
    drafter = make_drafter("lookahead", window=a.window, ngram=a.ngram, guesses=a.guesses, text_span=span)
    if variant == "reference":
        drafter = ReferenceStyle(drafter)
    tr = run(model, tok, prompt, "lookahead", max_new_tokens=a.max_new_tokens, drafter=drafter, trace=False)
    st = tr.stats()
    return {"new_tokens": st["new_tokens"], "steps": st["steps"], "compression": st["compression"],
            "matches_greedy": ref_ids[: len(tr.output_ids)] == tr.output_ids}


def engine_acceptance(model, tok, draft, prompt: str, a, confidence: float | None) -> tuple[int, int]:
    """(accepted + bonus tokens, verification steps) of the engine's greedy speculative chain."""
    from decoding.api import run
    from decoding.trace.stats import speculative_stats

    tr = run(model, tok, prompt, "speculative", max_new_tokens=a.max_new_tokens, draft_model=draft,
             draft_tokens=a.draft_tokens, confidence=confidence)
    st = speculative_stats(tr)
    steps = len([s for s in tr.steps if s.kind == "decode"])
    return round(st["mean_acceptance_length"] * steps), steps


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ASSETS / "target"))
    ap.add_argument("--window", type=int, default=15)
    ap.add_argument("--ngram", type=int, default=5)
    ap.add_argument("--guesses", type=int, default=15)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--draft", default=str(ASSETS / "draft"), help="draft for the speculative rows ('' = skip)")
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model).eval()
    draft = AutoModelForCausalLM.from_pretrained(a.draft).eval() if a.draft else None
    variants = ("engine", "paper", "reference")
    rows, spec, eng = [], [], {"0.4": [0, 0], "0": [0, 0]}
    for rel, prompt in prompts(a.prompts):
        enc = tok(prompt, return_tensors="pt")
        ref = model.generate(**enc, do_sample=False, max_new_tokens=a.max_new_tokens, pad_token_id=tok.eos_token_id)
        ref_ids = ref[0, enc["input_ids"].shape[1] :].tolist()
        row = {"file": rel, **{v: lookahead_row(model, tok, prompt, a, v, ref_ids) for v in variants}}
        msg = ""
        if draft is not None:
            lens = speculative_acceptance(ref_ids, enc["input_ids"][0].tolist(), draft, a.draft_tokens)
            spec.extend(lens)
            row["spec_replay_mean_accepted"] = sum(lens) / len(lens)
            for key, conf in (("0.4", None), ("0", 0.0)):
                n, steps = engine_acceptance(model, tok, draft, prompt, a, conf)
                eng[key][0] += n
                eng[key][1] += steps
                row[f"spec_engine_mean_accepted_conf{key}"] = n / steps
            msg = (f" | draft K{a.draft_tokens}: replay {row['spec_replay_mean_accepted']:.2f}, engine "
                   f"{row['spec_engine_mean_accepted_conf0.4']:.2f} (cutoff 0.4) / "
                   f"{row['spec_engine_mean_accepted_conf0']:.2f} (no cutoff)")
        rows.append(row)
        print(f"{rel:36s} compression engine {row['engine']['compression']:.2f} paper {row['paper']['compression']:.2f} "
              f"reference {row['reference']['compression']:.2f} identical "
              f"{all(row[v]['matches_greedy'] for v in variants)}{msg}", flush=True)
    res = {"model": a.model, "W": a.window, "N": a.ngram, "G": a.guesses, "max_new_tokens": a.max_new_tokens,
           "prompts": len(rows), "rows": rows, "draft": a.draft, "draft_tokens": a.draft_tokens,
           "spec_replay_mean_acceptance_length": sum(spec) / len(spec) if spec else None,
           "spec_engine_mean_acceptance_length": {k: n / s for k, (n, s) in eng.items() if s}}
    for v in variants:
        new, steps = (sum(r[v][k] for r in rows) for k in ("new_tokens", "steps"))
        res[v] = {"compression": new / max(1, steps), "all_match_greedy": all(r[v]["matches_greedy"] for r in rows),
                  "mean_prompt_compression": sum(r[v]["compression"] for r in rows) / max(1, len(rows))}
        print(f"{v:9s}: compression {res[v]['compression']:.3f} tokens/step over {len(rows)} prompts "
              f"(mean per prompt {res[v]['mean_prompt_compression']:.3f}); identical to greedy: "
              f"{res[v]['all_match_greedy']}")
    res["engine_vs_reference"] = res["engine"]["compression"] / res["reference"]["compression"]
    res["engine_vs_paper_pool"] = res["engine"]["compression"] / res["paper"]["compression"]
    print(f"engine / reference-style compression {res['engine_vs_reference']:.3f}x; "
          f"engine / paper pool {res['engine_vs_paper_pool']:.3f}x")
    if spec:
        print(f"draft, {a.draft_tokens} drafted tokens: mean acceptance length {res['spec_replay_mean_acceptance_length']:.3f}"
              f" (HF replay), engine chain {res['spec_engine_mean_acceptance_length']}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
