"""Speculative decoding benchmark: DecodeScope chain / tree / staged vs HF assisted generation, same draft.

    python bench/methods/bench_speculative.py                 # the embedded models in assets/ (target, draft)
    python bench/methods/bench_speculative.py --quick         # seconds: tiny random models (draft = target's 1st layer)
    python bench/methods/bench_speculative.py --target T --draft D --draft-tokens 4 --tree 3,2,1 --runs 5

Every configuration runs on every prompt in each round, interleaved (HF plain greedy, HF assisted,
ours...), so load drift on a shared machine hits all of them alike; a configuration's time for a round
is the sum over prompts and the reported number is the median over rounds. HF assisted runs with the
draft's generation config set to num_assistant_tokens=K, constant schedule, confidence stop 0.4 (HF's
default) and 0 ("nostop"); speedups are against the faster of the two. Greedy outputs are checked
token for token against HF's plain greedy. Acceptance: tokens per target forward for every method
(HF's forwards are counted with a forward hook), and our mean acceptance length (1 + accepted/drafts).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from decoding import generate, make_drafter  # noqa: E402
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET, load  # noqa: E402
from decoding.trace.stats import speculative_stats  # noqa: E402

CODE_PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv=None):\n    \"\"\"Parse the command line and run.\"\"\"\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
    "def read_config(path):\n    with open(path) as f:\n        for line in f:\n            line = line.strip()\n",
    "    def __repr__(self):\n        return '%s(%r)' % (self.__class__.__name__, self.",
]


def quick_models():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=6,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024)
    target = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # damp layers 1.. so the 1-layer draft agrees often, but not always
        for layer in target.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(0.03)
            layer.mlp.down_proj.weight.mul_(0.03)
    dcfg = LlamaConfig(**{**cfg.to_dict(), "num_hidden_layers": 1})
    draft = LlamaForCausalLM(dcfg).eval()
    draft.load_state_dict(target.state_dict(), strict=False)  # embeddings, layer 0, norm, head
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (24,), generator=g).tolist() for _ in range(2)]
    return target, draft, prompts, None  # noqa: RET504


def corpus_table(tok, cache=Path("/tmp/decodescope_stage2_table.json")):
    """Stage-2 n-gram table from the training split only (bench prompts are held-out files)."""
    from decoding.methods.draft_model.stage2 import build_table, load_table, save_table
    if cache.exists():
        return load_table(cache)
    sys.path.insert(0, str(ROOT / "scripts" / "assets"))
    import stdlib_corpus
    train, _ = stdlib_corpus.load_split()
    table = build_table((tok(t)["input_ids"] for t in train.values()), 3, 2, 100_000)
    save_table(table, cache)
    return table


class Counter:
    def __init__(self, model):
        self.n = 0
        model.register_forward_hook(lambda *a: setattr(self, "n", self.n + 1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=6, help="how many bench/prompts/code.jsonl prompts")
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--tree", default="4,2")
    ap.add_argument("--staged-tree", default="2,1,1,1,1")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--corpus-table", action="store_true",
                    help="also run staged with an n-gram table from the stdlib TRAIN split (scripts/assets/stdlib_corpus.py)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()

    if args.quick:
        target, draft, prompts, eos = quick_models()
        n_new = args.max_new_tokens or 32
        names = ("tiny-random-llama-6L", "its-first-layer")
    else:
        tdir, ddir = args.target or EMBEDDED_TARGET, args.draft or EMBEDDED_DRAFT
        for d in (tdir, ddir):
            if d.startswith("/") and not Path(d).exists():
                print(f"error: {d} does not exist (train the embedded models, or use --quick)", file=sys.stderr)
                return 2
        target, tok = load(tdir, device="cpu")
        draft, _ = load(ddir, device="cpu")
        pfile = ROOT / "bench" / "prompts" / "code.jsonl"  # held-out stdlib files (bench/bench.py's set)
        texts = ([json.loads(line)["prompt"] for line in pfile.read_text().splitlines()] if pfile.exists()
                 else CODE_PROMPTS)[:args.prompts]
        prompts = [tok(p)["input_ids"] for p in texts]
        eos = target.generation_config.eos_token_id
        n_new = args.max_new_tokens or 96
        names = (tdir, ddir)
    counter = Counter(target)
    K = args.draft_tokens

    def hf(prompt, assisted, threshold=0.4):
        ids = torch.tensor([prompt])
        kw = dict(do_sample=False, max_new_tokens=n_new, attention_mask=torch.ones_like(ids),
                  pad_token_id=eos if eos is not None else 0)
        if eos is None:
            kw.update(min_new_tokens=n_new, eos_token_id=None)
        if assisted:  # HF reads these from the ASSISTANT's generation config (a generate() kwarg is ignored)
            gc = draft.generation_config
            gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = K, "constant"
            gc.assistant_confidence_threshold = threshold
            kw.update(assistant_model=draft, num_assistant_tokens=K)
        with torch.no_grad():
            out = target.generate(ids, **kw)
        return out[0, len(prompt):].tolist(), None

    def ours(params):
        def f(prompt):
            tr = generate(target, prompt, make_drafter("speculative", draft_model=draft, **params),
                          max_new_tokens=n_new, eos_token_id=eos)
            return tr.output_ids, speculative_stats(tr)
        return f

    configs = {
        "hf_greedy": lambda p: hf(p, False),
        f"hf_assisted_K{K}": lambda p: hf(p, True),              # HF default confidence stop 0.4
        f"hf_assisted_K{K}_nostop": lambda p: hf(p, True, 0.0),  # always K draft tokens
        f"ours_chain_K{K}": ours(dict(draft_tokens=K)),
        f"ours_tree_{args.tree}": ours(dict(tree=[int(x) for x in args.tree.split(",")])),
        f"ours_staged_chain_K{K + 2}": ours(dict(draft_tokens=K + 2, staged=True)),
        f"ours_staged_tree_{args.staged_tree}": ours(dict(tree=[int(x) for x in args.staged_tree.split(",")],
                                                          staged=True)),
        f"ours_tree_{args.tree}_adaptive": ours(dict(tree=[int(x) for x in args.tree.split(",")], adaptive=True)),
        f"ours_staged_chain_K{K + 2}_adaptive": ours(dict(draft_tokens=K + 2, staged=True, adaptive=True)),
    }
    if args.corpus_table and not args.quick:
        table = corpus_table(tok)
        configs[f"ours_staged_chain_K{K + 2}+table"] = ours(dict(draft_tokens=K + 2, staged=True, ngram_table=table))
    times = {k: [] for k in configs}
    tokens, forwards, acc_len, exact = {}, {}, {}, {k: True for k in configs}
    reference = {}
    for r in range(args.runs + 1):  # round 0 warms up (not timed)
        for name, fn in configs.items():
            total, n_tok, n_fwd, lens = 0.0, 0, 0, []
            for i, p in enumerate(prompts):
                counter.n = 0
                t0 = time.perf_counter()
                out, st = fn(p)
                total += time.perf_counter() - t0
                n_tok += len(out)
                n_fwd += counter.n
                if st:
                    lens.append(st["mean_acceptance_length"])
                if name == "hf_greedy":
                    reference[i] = out
                elif out != reference[i]:
                    exact[name] = False
            if r:
                times[name].append(total)
            tokens[name], forwards[name] = n_tok, n_fwd
            acc_len[name] = statistics.mean(lens) if lens else None
    rows = {}
    hf_assisted = max((f"hf_assisted_K{K}", f"hf_assisted_K{K}_nostop"), key=lambda k: statistics.median(times[k]) * -1)
    for name in configs:
        med = statistics.median(times[name])
        rows[name] = {"tokens_per_s": tokens[name] / med, "median_s": med, "tokens": tokens[name],
                      "tokens_per_target_forward": tokens[name] / max(forwards[name], 1),
                      "mean_acceptance_length": acc_len[name], "identical_to_hf_greedy": exact[name]}
    base = rows[hf_assisted]["tokens_per_s"]
    print(f"target {names[0]}  draft {names[1]}  prompts {len(prompts)}  new tokens {n_new}  "
          f"runs {args.runs} (median)  threads {args.threads}")
    print(f"{'method':34s} {'tok/s':>8s} {'vs best HF asst':>15s} {'tok/fwd':>8s} {'acc.len':>8s} exact")
    for name, row in rows.items():
        al = f"{row['mean_acceptance_length']:.2f}" if row["mean_acceptance_length"] else "-"
        print(f"{name:34s} {row['tokens_per_s']:8.1f} {row['tokens_per_s'] / base:14.2f}x "
              f"{row['tokens_per_target_forward']:8.2f} {al:>8s} {row['identical_to_hf_greedy']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"target": names[0], "draft": names[1], "rows": rows}, indent=1))
    return 0 if all(exact.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
