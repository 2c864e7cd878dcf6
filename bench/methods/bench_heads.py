"""Self-drafting heads (Medusa, EAGLE) against HF greedy and our draft-model and lookahead rows.

    nice -n 19 python bench/methods/bench_heads.py                   # embedded target, assets/heads/, code prompts
    python bench/methods/bench_heads.py --runs 3 --max-new-tokens 96 --budgets 8,16,24 --kinds eagle --cuts 0,0.1
    python bench/methods/bench_heads.py --temperature 0.7 --budgets 8 --runs 3   # sampling: vs HF sampling, + typical rows

Same protocol as bench/bench.py (whose helpers it uses): every row runs every prompt once per round,
rounds interleaved, times are medians over rounds of each row's total; greedy outputs checked token for
token against HF greedy. "mean accepted" = tokens per decode step, the target's bonus token included.
With --temperature T > 0 every row samples (seed 0 per prompt; HF: generate(do_sample=True)) and is timed
against HF sampling; the heads also get a row with Medusa's typical acceptance (not exact); no row can be
checked token for token there.
The bench prompts are held-out stdlib files (scripts/assets/stdlib_corpus.py); the heads never saw them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from bench import (LOAD_LIMIT, for_readme, hf_runner, layout_row, load_prompts, machine, markdown,  # noqa: E402
                   ours_runner, print_load, provenance, refuse_under_load, under_load)
from decoding import Sampling  # noqa: E402
from decoding.models import EMBEDDED_DRAFT, load  # noqa: E402

HEADS = ROOT / "assets" / "heads"


def contenders(model, tok, hf_model, draft, heads: Path, budgets: list[int], kinds=("medusa", "eagle"),
               baselines: bool = True, cuts=(0.0,), temperature: float = 0.0) -> dict:
    s = {} if temperature <= 0 else {"sampling": Sampling(temperature, seed=0)}
    c = {"HF greedy": hf_runner(hf_model, tok)} if not s else {"HF sampling": hf_sampler(hf_model, tok, temperature)}
    if baselines and not s:
        c.update(layout_row(model, hf_model, tok))
    if baselines:
        c["ours lookahead W1 N3 G2"] = ours_runner(model, tok, "lookahead", window=1, ngram=3, guesses=2, **s)
    if draft is not None and baselines:
        c["ours speculative chain K4"] = ours_runner(model, tok, "speculative", draft_model=draft, draft_tokens=4,
                                                     **s)
        c["ours speculative staged tree 2,1,1,1,1"] = ours_runner(model, tok, "speculative", draft_model=draft,
                                                                   tree=[2, 1, 1, 1, 1], staged=True, **s)
    for kind in kinds:
        if (heads / kind / "heads.json").exists():
            for b in budgets:
                for cut in cuts:
                    name = f"ours {kind} budget {b}" + (f", cut {cut:g}" if cut else "")
                    c[name] = ours_runner(model, tok, kind, heads=str(heads / kind), budget=b, confidence=cut, **s)
                    if s:
                        c[name + ", typical (NOT exact)"] = ours_runner(model, tok, kind, heads=str(heads / kind),
                                                                        budget=b, confidence=cut,
                                                                        acceptance="typical", **s)
    return c


def hf_sampler(model, tok, temperature: float):
    """HF generate(do_sample=True) at `temperature`, seeded like our rows (seed 0 before each prompt)."""
    def go(prompt: str, n: int) -> tuple[list[int], None]:
        ids = tok(prompt, return_tensors="pt")["input_ids"].to(model.device)
        torch.manual_seed(0)
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=temperature,
                                 top_k=0, top_p=1.0, max_new_tokens=n, pad_token_id=tok.eos_token_id)
        return out[0, ids.shape[1]:].tolist(), None
    return go


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--heads", default=str(HEADS), help="folder holding medusa/ and eagle/ heads")
    ap.add_argument("--prompts", default="code")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--budgets", default="8,16")
    ap.add_argument("--kinds", default="medusa,eagle")
    ap.add_argument("--cuts", default="0", help="confidence cuts, e.g. 0,0.1 (a row per budget and cut)")
    ap.add_argument("--no-baselines", action="store_true", help="only HF greedy and the heads rows")
    ap.add_argument("--limit", type=int, default=0, help="only the first N prompts (0 = all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default=None, help="cpu, cuda (default: cuda when present)")
    ap.add_argument("--temperature", type=float, default=0.0, help="> 0: every row samples (vs HF sampling)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--allow-load", action="store_true", help=f"run even when the 1-minute load average is above "
                    f"{LOAD_LIMIT}; the output is marked as measured under load")
    a = ap.parse_args(argv)
    if for_readme(Path(a.out)) and (why := refuse_under_load(a.allow_load)):
        print(why, file=sys.stderr)
        raise SystemExit(2)
    before = print_load("before")
    import time
    import statistics
    model, tok = load(a.model, threads=a.threads, device=a.device)
    hf_model = load(a.model, threads=a.threads, layout="stock", device=a.device)[0]
    draft = load(EMBEDDED_DRAFT, threads=a.threads, device=a.device)[0] if a.model is None else None
    dev = model.get_input_embeddings().weight.device.type
    prompts = load_prompts(a.prompts.split(","))[:a.limit or None]
    runners = contenders(model, tok, hf_model, draft, Path(a.heads), [int(b) for b in a.budgets.split(",")],
                         a.kinds.split(","), not a.no_baselines, [float(c) for c in a.cuts.split(",")],
                         a.temperature)
    for fn in runners.values():  # warm-up
        fn(prompts[0]["prompt"], 8)
    times = {name: [] for name in runners}
    results: dict[str, list] = {}
    for r in range(a.runs):
        for name, fn in runners.items():
            t0 = time.perf_counter()
            results[name] = [fn(p["prompt"], a.max_new_tokens) for p in prompts]
            times[name].append(time.perf_counter() - t0)
        print(f"round {r + 1}/{a.runs} done", file=sys.stderr)
    base_name = next(iter(runners))  # HF greedy, or HF sampling
    ref = [ids for ids, _ in results[base_name]]
    base_rate = sum(len(ids) for ids in ref) / statistics.median(times[base_name])  # tokens/s: sampled rows differ
    rows = []
    for name, outs in results.items():
        n_tok = sum(len(ids) for ids, _ in outs)
        stats = [s for _, s in outs if s]
        steps = sum(s["steps"] for s in stats)
        dec = sum(s["steps"] - 1 for s in stats)  # decode steps (prefill excluded)
        t = statistics.median(times[name])
        rows.append({"method": name, "tokens": n_tok, "median_s": t, "tokens_per_s": n_tok / t,
                     "vs_hf_greedy": n_tok / t / base_rate,
                     "exact": [ids for ids, _ in outs] == ref if a.temperature <= 0 else None,
                     "compression": n_tok / steps if steps else None,
                     "mean_accepted": (n_tok - len(outs)) / dec if dec else None, "runs": a.runs})
    after = print_load("after")
    meta = {**machine(model), **provenance(__file__, argv, a.prompts), "load_before": before,
            "load_after": after, "under_load": a.allow_load or under_load(before, after, torch.get_num_threads()), "model": a.model or "embedded (assets/target)", "prompts": a.prompts,
            "max_new_tokens": a.max_new_tokens, "runs": a.runs, "heads": a.heads, "baseline": base_name,
            "temperature": a.temperature}
    md = markdown(rows, meta) + ("\nmean accepted = new tokens after the prefill's first one / decode steps "
                                 "(the bonus token included)." + (" Shared 2-core CPU: read the ratios (one "
                                 "interleaved run), not the absolute speeds." if dev == "cpu" else "") + "\n")
    print(md)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = (f"{dev}-heads-{a.kinds.replace(',', '+')}-{a.prompts.replace(',', '+')}"
            + (f"-t{a.threads}" if dev == "cpu" and a.threads != 1 else "")
            + (f"-T{a.temperature:g}" if a.temperature > 0 else ""))  # a 2-thread run beside the 1-thread one
    (out / f"{name}.md").write_text(md)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
