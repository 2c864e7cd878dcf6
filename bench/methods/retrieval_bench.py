"""Retrieval drafting on the default model (SmolLM2-135M-Instruct), CPU: exactness, accepted tokens per step and
speed against greedy, plus the datastore's build and lookup times.

    python bench/methods/retrieval_bench.py --prompts heldout_chat,heldout_code    # the figures (held-out prompts)
    python bench/methods/retrieval_bench.py --prompts chat,code --configs ...      # tuning (never on held-out sets)
    python bench/methods/retrieval_bench.py --store-only                           # build 10M tokens + lookups only

Configs: "suffix" (the suffix cache, SuffixDecoding), "datastore" (the shipped REST datastore, with the suffix
cache beside it unless with_cache=0), then ":param=value" options (e.g. datastore:budget=16:with_cache=0).
Interleaved: each prompt runs greedy, then every config, so load changes hit all alike. Each config keeps its
own process history across the prompts (runs after the first see earlier answers, as in a chat session).
Every output is checked token for token against HF generate(do_sample=False). --out writes the Markdown
(bench/results/retrieval-*.md) with the machine, date, command and load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench import load_prompts  # noqa: E402
from decoding.api import eos_of, run  # noqa: E402
from decoding.exactness import hf_greedy  # noqa: E402
from decoding.methods.registry import BASELINE  # noqa: E402
from decoding.methods.retrieve.suffix_cache import HISTORY  # noqa: E402

RETRIEVAL = "retrieval"  # every config here is a retrieval drafter's

MODEL = Path("~/.cache/decodescope/models/smollm2-135m-instruct").expanduser()
SHIPPED = ROOT / "assets" / "datastore" / "smollm2"


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def store_timings(tok, copies: int = 3, lookups: int = 300) -> dict:
    """The whole `build-datastore` path (read, tokenise, suffix array, write) on `copies` copies of the standard
    library's pure-Python files (~3.4M tokens each, so 3 copies are ~10M tokens), then open it and time
    `lookups` lookups with REST's settings (16-token suffix search, 5,000 continuations of 10 tokens) on
    contexts from text that is not in the store (the held-out prompts, every 8th position), where short
    matches with thousands of occurrences are the expensive case."""
    import sys as _sys
    _sys.path.insert(0, str(ROOT / "scripts" / "assets"))
    import stdlib_corpus
    from decoding.methods.retrieve.datastore import Datastore, build
    root = stdlib_corpus.stdlib_root()
    rels = [r for r in stdlib_corpus.list_files(root) if not stdlib_corpus.is_heldout(r)]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        for c in range(copies):
            for r in rels:
                text = stdlib_corpus.read_text(root, r)
                if text:
                    f = src / f"copy{c}" / r
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_text(text, encoding="utf-8")
        t0 = time.perf_counter()
        meta = build(tok, [src], Path(tmp) / "ds")
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ds = Datastore(Path(tmp) / "ds")
        open_ms = (time.perf_counter() - t0) * 1e3
        texts = [json.loads(line).get("prompt") or json.loads(line).get("chat")
                 for name in ("heldout_chat", "heldout_code")
                 for line in (ROOT / "bench" / "prompts" / f"{name}.jsonl").read_text().splitlines()]
        ids = [t for x in texts for t in tok(x)["input_ids"]]
        ctxs = [ids[max(0, i - 32):i] for i in range(8, len(ids), 8)][:lookups]
        times, lengths, counts = [], [], []
        for ctx in ctxs:
            t0 = time.perf_counter()
            m = ds.lookup(ctx, 16, 5000, 10)
            times.append((time.perf_counter() - t0) * 1e3)
            lengths.append(m.length if m else 0)
            counts.append(m.count if m else 0)
        size_mb = sum((Path(tmp) / "ds" / f).stat().st_size for f in ("tokens.bin", "sa.bin")) / 1e6
    return {"tokens": meta["tokens"], "files": len(meta["files"]), "build_s (read + tokenise + suffix array + write)":
            round(build_s, 1), "tokenise_s": meta["tokenize_s"], "suffix_array_s": meta["suffix_array_s"],
            "open_ms (CRC-32 of both files included)": round(open_ms, 1), "lookups": len(times),
            "lookup_ms_median": round(statistics.median(times), 3),
            "lookup_ms_p90": round(float(np.percentile(times, 90)), 3), "lookup_ms_max": round(max(times), 3),
            "mean_match_len": round(float(np.mean(lengths)), 2), "median_occurrences": int(np.median(counts)),
            "size_MB": round(size_mb, 1)}


def cache_timings(lookups: int = 200) -> dict:
    """The suffix cache's lookup: ~1M tokens of history (the shipped datastore's text in 2,000-token runs, the
    history's cap) and a 1,500-token request, contexts taken past the history's text."""
    from decoding.methods.retrieve.datastore import Datastore
    from decoding.methods.retrieve.suffix_cache import History, lookup
    ds = Datastore(SHIPPED)
    toks = ds.tokens.astype(np.int64)
    toks = toks[toks != ds.sep]
    h = History()
    for i in range(0, 990_000, 2000):
        h.add(toks[i:i + 2000].tolist())
    rng, times = np.random.default_rng(0), []
    for _ in range(lookups):
        a = int(rng.integers(1_100_000, len(toks) - 2000))
        ctx = toks[a - 1500:a].tolist()
        t0 = time.perf_counter()
        lookup(ctx, h, 500, 32, 16, 5000)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"history_tokens": sum(len(r) for r in h.runs), "request_tokens": 1500, "lookups": lookups,
            "lookup_ms_median": round(statistics.median(times), 3),
            "lookup_ms_p90": round(float(np.percentile(times, 90)), 3), "lookup_ms_max": round(max(times), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="heldout_chat,heldout_code")
    ap.add_argument("--configs", default="suffix,datastore")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0, help="first N prompts of each set (0 = all)")
    ap.add_argument("--store-only", action="store_true")
    ap.add_argument("--no-store", action="store_true", help="skip the 10M-token build")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from decoding.models import load
    model, tok = load(str(MODEL), device="cpu", threads=1)
    before = load_avg()
    lines = [f"# Retrieval drafting on SmolLM2-135M-Instruct, CPU", "",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {platform.machine()}, "
             f"{os.cpu_count()} cores, {platform.processor() or platform.platform()}; torch {torch.__version__}, "
             f"1 thread, fp32",
             f"- command: `python bench/methods/retrieval_bench.py {' '.join(sys.argv[1:])}`",
             f"- load average before: {before}"]
    if not args.store_only:
        sets = args.prompts.split(",")
        prompts = load_prompts(sets, tok)
        if args.limit:
            prompts = [p for s in sets for p in [q for q in prompts if q["set"] == s][:args.limit]]
        configs = args.configs.split(",")
        eos = eos_of(model, tok)
        rows = {c: {"tokens": 0, "steps": 0, "s": 0.0, "exact": 0, "query": 0} for c in [BASELINE] + configs}
        history = {c: ([], None) for c in configs}  # each config's own process history (runs, pending)
        for p in prompts:  # interleaved: greedy and every config on one prompt, then the next prompt
            ids = tok(p["prompt"])["input_ids"]
            ref = hf_greedy(model, ids, args.max_new_tokens, eos)
            for c in [BASELINE] + configs:
                name, *opts = c.split(":")  # e.g. datastore:budget=16:with_cache=0
                kw = {"datastore": str(SHIPPED)} if name == "datastore" else {}
                for o in opts:
                    k, _, v = o.partition("=")
                    kw[k] = float(v) if "." in v else int(v)
                if "with_cache" in kw:
                    kw["with_cache"] = bool(kw["with_cache"])
                if c != BASELINE:
                    HISTORY.clear()
                    HISTORY.runs[:], HISTORY.pending = history[c]
                tr = run(model, tok, ids, BASELINE if c == BASELINE else RETRIEVAL,
                         max_new_tokens=args.max_new_tokens, **kw)
                if c != BASELINE:
                    history[c] = (list(HISTORY.runs), HISTORY.pending)
                r = rows[c]
                r["tokens"] += len(tr.output_ids); r["steps"] += len(tr.steps) - 1; r["s"] += tr.wall_s
                r["exact"] += tr.output_ids == ref; r["query"] += sum(s.n_query for s in tr.steps[1:])
                r["accepted"] = r.get("accepted", 0) + sum(len(s.accepted) for s in tr.steps[1:])
                print(c, p.get("source", "")[:30], len(tr.output_ids), "tokens", len(tr.steps) - 1, "steps",
                      tr.output_ids == ref, file=sys.stderr, flush=True)
        lines += ["", f"Prompts: {', '.join(sets)} ({len(prompts)} prompts), max {args.max_new_tokens} new tokens, greedy. "
                  "Mean accepted = tokens kept per decode step (one target forward each; the prefill's token not counted), "
                  "the target's own token included: greedy is 1.00.", "",
                  "| method | exact | mean accepted tokens / step | query tokens / step | tokens/s | vs greedy |",
                  "|---|---|---|---|---|---|"]
        g_tps = rows[BASELINE]["tokens"] / rows[BASELINE]["s"]
        for c, r in rows.items():
            tps = r["tokens"] / r["s"]
            lines.append(f"| {c} | {r['exact']}/{len(prompts)} | "
                         f"{r['accepted'] / max(1, r['steps']):.2f} | {r['query'] / max(1, r['steps']):.1f} | {tps:.1f} | "
                         f"{tps / g_tps:.2f}x |")
    if not args.no_store:
        st = store_timings(tok)
        lines += ["", "Datastore (pydivsufsort 0.0.20 suffix array; REST lookup settings 16 / 5,000 / 10):", ""]
        lines += [f"- {k}: {v}" for k, v in st.items()]
        lines += ["", "Suffix cache (numpy, SuffixDecoding's source; max suffix 32, 16-token continuations):", ""]
        lines += [f"- {k}: {v}" for k, v in cache_timings().items()]
    lines += [f"- load average after: {load_avg()}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
