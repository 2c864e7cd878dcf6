"""Train an EAGLE-3 head for the default model (SmolLM2-135M-Instruct) on its self-distilled answers, and
measure it against another head on the held-out prompts.

    # train (resumable: the same command continues; more data units on disk: add --init WORK/heads to go on
    # from the best head so far):
    nohup nice -n 19 python assets/heads/train_eagle3.py train --data /work/data/smol_distill \\
        --init assets/heads/smollm2/eagle >> /work/data/eagle3_work/log.txt 2>&1 &
    # measure (mean acceptance length, per-position acceptance rate, exactness), same tree budget for both:
    nice -n 10 python assets/heads/train_eagle3.py measure assets/heads/smollm2/eagle /work/data/eagle3_work/heads \\
        --budgets 8,16 --draft-vocab 4096

Data: assets/heads/smollm2_distill.py's units (OUT/records/<unit>.jsonl: prompt and answer token ids of the
model's int8 greedy answers): the template-*, code-* and asked-* units on disk (ask-* are sampled requests,
not answers). A document whose request or prompt overlaps a held-out prompt of bench/prompts
(distill_requests.Heldout, the data builder's own filter) is dropped again here and counted. The target's
hidden states are computed with the float32 model as the engine loads it (decoding.load), per unit, once
(decoding/training/eagle3.py cache_unit), then the head trains (train_eagle3).

Recipe (EAGLE-3, Li et al. 2025, arXiv 2503.01840): the head reads the fusion of hidden states 2, 15 and 30
(after decoder layers 2 and 15, and the last, normed state of the 30-layer model), is trained on the token loss
only, unrolled 4 levels on its own outputs, over the 4,096 tokens the target chose most in the training answers.
--init starts from the shipped EAGLE head's fc and layer, the fuse starting as that head's feature (see
eagle3.start_from): on a CPU that starts where the shipped head is instead of from zero.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (ROOT, HERE, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402

from decoding.training.eagle3 import Doc, cache_unit, train_eagle3  # noqa: E402
from decoding.training.train_heads import stderr_log, write_card_json  # noqa: E402

SOURCES = ("template", "code", "asked")  # units holding the model's answers
FUSE = [2, 15, 30]


def read_units(data: Path, tok, log) -> dict[str, list[Doc]]:
    """{unit name: its documents} of the complete answer units under data/records, held-out overlaps dropped."""
    import distill_requests as dr
    held, out, dropped = dr.Heldout(), {}, 0
    for f in sorted((data / "records").glob("*.jsonl")):
        if f.stem.split("-")[0] not in SOURCES:
            continue
        docs = []
        for line in f.read_text().splitlines():
            row = json.loads(line)
            prompt, answer = row["prompt_ids"], row["answer_ids"]
            text = row.get("request") or tok.decode(prompt)
            if held.why(text) is not None:
                dropped += 1
                continue
            if answer:
                docs.append(Doc(list(prompt) + list(answer), len(prompt)))
        out[f.stem] = docs
    log(f"[data] {len(out)} units, {sum(map(len, out.values()))} documents, "
        f"{sum(len(d.ids) - d.start for v in out.values() for d in v)} answer tokens; {dropped} dropped as "
        "overlapping a held-out prompt")
    return out


def train(a) -> None:
    from decoding import load
    torch.set_num_threads(a.threads)
    model, tok = load(None, threads=a.threads)
    units = read_units(a.data, tok, stderr_log)
    if a.max_units:
        units = dict(list(units.items())[:a.max_units])
    cached = [cache_unit(model, docs, FUSE if a.fuse is None else a.fuse, a.work / "states" / name, log=stderr_log)
              for name, docs in units.items()]
    t0 = time.perf_counter()
    fuse = FUSE if a.fuse is None else a.fuse
    best = train_eagle3(model, cached, a.work / "heads", fuse=fuse, unroll=a.unroll, epochs=a.epochs,
                        batch_tokens=a.batch_tokens, lr=a.lr, draft_vocab=a.draft_vocab, init=a.init,
                        val_every=a.val_every, log=stderr_log)
    write_card_json(a.work / "heads", {
        "base_model": "SmolLM2-135M-Instruct (decodescope fetch-model)",
        "trained_with": {"command": "python assets/heads/train_eagle3.py " + " ".join(map(shlex.quote, sys.argv[1:])),
                         "data": f"assets/heads/smollm2_distill.py units {', '.join(units)} "
                                 "(the model's int8 greedy answers; see assets/heads/smollm2_data_manifest.json)",
                         "wall_minutes_this_run": round((time.perf_counter() - t0) / 60, 1), "threads": a.threads,
                         "machine": "2-core x86_64 dev CPU, torch " + torch.__version__}})
    stderr_log(f"[done] {a.work / 'heads'} (best {best})")


def measure(a) -> None:
    """Mean acceptance length (accepted tokens per decode step, the target's bonus token included) and the
    per-position acceptance rate (of the steps whose first k-1 drafted tokens were accepted, the share that
    accepted the k-th too) of each heads folder, greedy, at each budget, on the held-out prompt sets; every
    run is checked token for token against HF greedy."""
    from bench import load_prompts
    from decoding import load, run
    from decoding.api import eos_of
    from decoding.exactness import measure as exact
    torch.set_num_threads(a.threads)
    model, tok = load(None, threads=a.threads)
    opts = {} if a.draft_vocab is None else {"draft_vocab": a.draft_vocab}
    for group in a.prompts.split(","):
        prompts = [p["prompt"] for p in load_prompts([group], tok)]
        for b in [int(x) for x in a.budgets.split(",")]:
            for heads in a.heads:
                accepted, ok = [], True
                for p in prompts:
                    tr = run(model, tok, p, "eagle", max_new_tokens=a.max_new_tokens, heads=heads, budget=b, **opts)
                    accepted += [len(s.accepted) for s in tr.steps if s.kind == "decode"]
                    ok &= exact(model, tr.prompt_ids, tr.output_ids, a.max_new_tokens, eos_of(model, tok))["identical"]
                rates = []
                for k in range(1, max(accepted)):
                    reach = sum(n - 1 >= k - 1 for n in accepted)
                    rates.append(sum(n - 1 >= k for n in accepted) / reach if reach else 0.0)
                print(f"{group} budget {b} {heads}: mean acceptance length {sum(accepted) / len(accepted):.3f} over "
                      f"{len(accepted)} steps; per-position acceptance rate "
                      + " ".join(f"{r:.3f}" for r in rates[:8]) + f"; exact {'yes' if ok else 'NO'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", type=Path, default=Path("/work/data/smol_distill"))
    t.add_argument("--work", type=Path, default=Path("/work/data/eagle3_work"))
    t.add_argument("--init", default=None, help="start from this EAGLE head folder (classic or EAGLE-3)")
    t.add_argument("--fuse", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help=f"hidden states to fuse (default {','.join(map(str, FUSE))})")
    t.add_argument("--unroll", type=int, default=4)
    t.add_argument("--epochs", type=float, default=2.0)
    t.add_argument("--batch-tokens", type=int, default=4096)
    t.add_argument("--lr", type=float, default=3e-4)
    t.add_argument("--draft-vocab", type=int, default=4096)
    t.add_argument("--val-every", type=int, default=200)
    t.add_argument("--max-units", type=int, default=0, help="only the first N units (0: all on disk)")
    t.add_argument("--threads", type=int, default=1)
    m = sub.add_parser("measure")
    m.add_argument("heads", nargs="+")
    m.add_argument("--budgets", default="8,16")
    m.add_argument("--prompts", default="heldout_chat,heldout_code")
    m.add_argument("--draft-vocab", type=int, default=None, help="default: each head's own (its card's, else a quarter)")
    m.add_argument("--max-new-tokens", type=int, default=96)
    m.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    (train if a.cmd == "train" else measure)(a)


if __name__ == "__main__":
    main()
