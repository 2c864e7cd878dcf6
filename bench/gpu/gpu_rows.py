"""The two model-level checks of bench/gpu/gpu_check.py: the exactness matrix against HF greedy and the speed
rows against what a user would run instead (HF greedy, HF static-cache compiled greedy, HF assisted
generation, HF prompt lookup).

Why a separate file: gpu_check.py orchestrates and reports; this file decodes. Imports only torch,
transformers and decoding (the GPU image has no gradio or plotly).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from transformers import GenerationConfig  # noqa: E402

from bench import hf_runner, tiny_dir  # noqa: E402
from decoding import load, run  # noqa: E402
from decoding.api import eos_of  # noqa: E402
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET  # noqa: E402
from decoding.exactness import agreement  # noqa: E402
from decoding.exactness import hf_greedy  # noqa: E402
from decoding.methods.registry import SPECS  # noqa: E402

# our methods: (method, params) -- the draft model is added to speculative rows
OURS = {"ours greedy": ("greedy", {}),
        "ours lookahead W15 N5 G15": ("lookahead", dict(window=15, ngram=5, guesses=15)),
        "ours lookahead W5 N4 G5": ("lookahead", dict(window=5, ngram=4, guesses=5)),
        "ours prompt lookup": ("prompt_lookup", {}),
        "ours speculative chain K4": ("speculative", dict(draft_tokens=4)),
        "ours speculative tree 4,2": ("speculative", dict(tree=[4, 2])),
        "ours speculative dynamic B16": ("speculative", dict(tree_budget=16)),
        "ours speculative staged tree 2,1,1,1,1": ("speculative", dict(tree=[2, 1, 1, 1, 1], staged=True))}
QUICK_PROMPTS = ["def x ( y ) : return y + 1 def x ( y ) :", "class A : def g ( self ) : return self . g"]


def prompts(quick: bool, limit: int = 12) -> tuple[list[str], str]:
    """(prompts, where from): the held-out prompts of scripts/assets/decoding_eval.py (read from this Python's
    stdlib), else bench/prompts/code.jsonl (also held-out stdlib code)."""
    if quick:
        return QUICK_PROMPTS, "quick word prompts"
    try:
        sys.path.insert(0, str(ROOT / "scripts" / "assets"))
        import decoding_eval
        found = [p for _, p in decoding_eval.prompts(limit)]
        if len(found) == limit:
            return found, "scripts/assets/decoding_eval.py prompts()"
    except Exception as e:  # noqa: BLE001 - a missing stdlib source tree: fall back, say so
        print(f"decoding_eval prompts unavailable ({e}); using bench/prompts/code.jsonl", file=sys.stderr)
    lines = (ROOT / "bench" / "prompts" / "code.jsonl").read_text().splitlines()[:limit]
    return [json.loads(x)["prompt"] for x in lines], "bench/prompts/code.jsonl"


def models(quick: bool, device: str, dtype: str | None):
    """(target, tokenizer, draft): the embedded models, or tiny random ones in quick mode. Stock layout:
    HF rows and ours run on the very same weights."""
    if quick:
        t, d = tiny_dir(seed=0), tiny_dir(seed=1)
    else:
        t, d = EMBEDDED_TARGET, EMBEDDED_DRAFT
    target, tok = load(t, device=device, dtype=dtype, layout="stock")
    draft, _ = load(d, device=device, dtype=dtype, layout="stock")
    return target, tok, draft


def hf_contenders(target, tok, draft, k: int = 4) -> dict:
    """HF rows: greedy, static-cache greedy (auto-compiled by transformers on GPUs), prompt lookup, assisted."""
    static = {"cache_implementation": "static"}
    if hasattr(GenerationConfig(), "max_cache_len"):  # one cache size for every prompt: no recompiles
        static["max_cache_len"] = 2048
    gc = draft.generation_config  # HF reads K from the assistant's config; 0.4 is its confidence default
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = k, "constant", 0.4
    return {"HF greedy": hf_runner(target, tok),
            "HF greedy static cache (compiled)": hf_runner(target, tok, **static),
            "HF prompt lookup": hf_runner(target, tok, prompt_lookup_num_tokens=10, max_matching_ngram_size=2),
            f"HF assisted K{k}": hf_runner(target, tok, assistant_model=draft)}


def ours_runner(model, tok, method: str, **params):
    """Like bench.ours_runner, and the stats carry the run's path (trace config: static, graphs)."""
    def go(prompt: str, n: int):
        tr = run(model, tok, prompt, method, max_new_tokens=n, trace=False, **params)
        return tr.output_ids, {**tr.stats(), "static": tr.config.get("static"), "graphs": tr.config.get("graphs")}
    return go


DYNAMIC = ("ours greedy", "ours lookahead W15 N5 G15")  # also timed on the dynamic path, labelled


def our_contenders(target, tok, draft, dynamic: bool = False) -> dict:
    """Our rows on the path a run takes; dynamic=True adds "(dynamic path)" rows of DYNAMIC (on CUDA,
    where the default is the graph path)."""
    out = {}
    for name, (method, params) in OURS.items():
        extra = {"draft_model": draft} if "draft_model" in SPECS[method].needs else {}
        out[name] = ours_runner(target, tok, method, **params, **extra)
        if dynamic and name in DYNAMIC:
            out[f"{name} (dynamic path)"] = ours_runner(target, tok, method, **params, **extra, static=False)
    return out


def path_summary(stats: list[dict]) -> dict:
    """One row's path over its runs: static or not, graphs, buckets used / captured, capture errors."""
    stats = [s for s in stats if s]
    if not stats or not stats[-1].get("static"):
        return {"static": False, "graphs": False, "captured": [], "failed": {}, "label": "dynamic (eager)"}
    g = [s["graphs"] or {} for s in stats]
    used = sorted({b for x in g for b in x.get("used", [])})
    captured = sorted({b for x in g for b in x.get("captured", [])})
    failed = {b: e for x in g for b, e in x.get("failed", {}).items()}
    on = any(x.get("on") for x in g)
    label = (f"static, graphs {'on' if on else 'off'}, {len(captured)} buckets captured"
             + (f", {len(failed)} capture errors ({next(iter(failed.values()))})" if failed else ""))
    return {"static": True, "graphs": on, "used": used, "captured": captured, "failed": failed, "label": label}


def exactness(quick: bool, device: str, n: int) -> dict:
    """Every method x {fp32, bf16} against HF greedy on the same model, prompt by prompt."""
    texts, source = prompts(quick)
    rows = []
    for dtype in ("fp32", "bf16"):
        target, tok, draft = models(quick, device, dtype)
        eos = eos_of(target, tok)
        ids = [tok(p)["input_ids"] for p in texts]
        refs = [hf_greedy(target, x, n, eos) for x in ids]
        contenders = {**our_contenders(target, tok, draft),
                      **{k: v for k, v in hf_contenders(target, tok, draft).items() if k != "HF greedy"}}
        for name, fn in contenders.items():
            try:
                agree = [agreement(fn(p, n)[0], r) for p, r in zip(texts, refs)]
            except Exception as e:  # noqa: BLE001 - one broken contender must not hide the others
                rows.append({"method": name, "dtype": dtype, "ours": name.startswith("ours"), "prompts": len(texts),
                             "identical": 0, "first_divergence": [], "error": f"{type(e).__name__}: {e}"})
                continue
            rows.append({"method": name, "dtype": dtype, "ours": name.startswith("ours"), "prompts": len(texts),
                         "identical": sum(a["identical"] for a in agree),
                         "first_divergence": [a["first_divergence"] for a in agree]})
            print(f"exactness {dtype} {name}: {rows[-1]['identical']}/{len(texts)} identical", file=sys.stderr)
    return {"device": device, "new_tokens": n, "prompt_source": source, "rows": rows}


def speed(quick: bool, device: str, n: int, runs: int, dtype: str | None = None, only: tuple[str, ...] = (),
          limit: int = 12) -> dict:
    """Tokens/s of every contender (dtype None = load()'s default for the device); a full untimed warm-up round first (HF's static
    cache compiles there), then `runs` interleaved rounds; median of each contender's total time.
    only: the contenders named (the runbook's one speed row: HF greedy, ours greedy and lookahead); limit: prompts."""
    texts, source = prompts(quick, limit)
    texts = texts[:limit]
    target, tok, draft = models(quick, device, dtype)
    contenders = {**hf_contenders(target, tok, draft), **our_contenders(target, tok, draft, device != "cpu")}
    if only:
        contenders = {k: v for k, v in contenders.items() if k in only}
    order = sorted(texts, key=len, reverse=True)  # longest first: a static cache sized once for all
    errors = {}
    for name, fn in list(contenders.items()):
        try:
            for p in order:
                fn(p, n)
        except Exception as e:  # noqa: BLE001 - e.g. a compile failure of HF's static cache: report, go on
            errors[name] = f"{type(e).__name__}: {e}"[:500]
            del contenders[name]
    times = {name: [] for name in contenders}
    outs: dict[str, list] = {}
    for _ in range(max(runs, 1)):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            outs[name] = [fn(p, n) for p in texts]
            times[name].append(time.perf_counter() - t0)
    ref = [ids for ids, _ in outs["HF greedy"]]
    base = statistics.median(times["HF greedy"])
    rows = []
    for name in contenders:
        tokens = sum(len(ids) for ids, _ in outs[name])
        stats = [s for _, s in outs[name] if s]
        steps = sum(s["steps"] for s in stats)
        t = statistics.median(times[name])
        rows.append({"method": name, "tokens": tokens, "median_s": t, "tokens_per_s": tokens / t,
                     "vs_hf_greedy": base / t, "same_as_hf_greedy": [ids for ids, _ in outs[name]] == ref,
                     "compression": tokens / steps if steps else None,
                     "path": path_summary(stats) if name.startswith("ours") else {"label": "HF generate"}})
    w = target.get_input_embeddings().weight
    return {"device": device, "dtype": str(w.dtype).replace("torch.", ""), "new_tokens": n, "runs": runs,
            "prompt_source": source, "prompts": len(texts), "rows": rows, "errors": errors}


def best(rows: list[dict], prefix: str) -> dict | None:
    """The fastest row whose name starts with prefix."""
    cands = [r for r in rows if r["method"].startswith(prefix)]
    return max(cands, key=lambda r: r["tokens_per_s"]) if cands else None
