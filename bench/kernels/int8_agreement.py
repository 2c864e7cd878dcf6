"""How often the int8 kernel's greedy equals HF's float32 greedy, request by request.

    python bench/kernels/int8_agreement.py                                  # held-out chat and code, 96 new tokens
    python bench/kernels/int8_agreement.py --quick                          # tiny random model, seconds (tests)

Why: the int8 mode (decoding/fast/cpu_int8.cpp) makes every method return exactly this mode's own greedy
tokens, by construction, but that greedy multiplies int8-rounded activations, so it is not HF's float32 greedy
token for token. This measures how far apart they are on prompts the presets were not tuned on: per request,
identical or the first diverging token (decoding/exactness.py's agreement), for HF greedy (stock layout,
float32) against our greedy on the int8 kernel, and, as a control, our greedy on the fp32 kernel (which must be
identical). Writes bench/results/int8-agreement-<model>.{md,json} with the machine, date and load average.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench.py's helpers (from bench import ...)

import torch  # noqa: E402

from decoding import load, run  # noqa: E402
from decoding.exactness import agreement  # noqa: E402
from decoding.fast import cpu_gemm  # noqa: E402
from decoding.models import resolve  # noqa: E402

from bench import load_prompts, machine, print_load, provenance, tiny_dir, under_load  # noqa: E402


def hf_greedy_ids(model, tok, prompt: str, n: int) -> list[int]:
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    eos = model.generation_config.eos_token_id
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                             pad_token_id=tok.eos_token_id, eos_token_id=eos)
    return out[0, ids.shape[1]:].tolist()


def compare(models: dict, tok, prompts: list[dict], n: int) -> list[dict]:
    """Per prompt: HF float32 greedy's ids vs each of our kernels' greedy ids."""
    rows = []
    for p in prompts:
        ref = hf_greedy_ids(models["hf"], tok, p["prompt"], n)
        row = {"set": p["set"], "source": p.get("source", ""), "hf_tokens": len(ref)}
        for kernel in ("fp32", "int8"):
            ids = run(models[kernel], tok, p["prompt"], "greedy", max_new_tokens=n, trace=False).output_ids
            row[kernel] = agreement(ids, ref)
        rows.append(row)
        print(f"{p['set']} {row['source'][:40]!r}: fp32 {row['fp32']['identical']}, int8 "
              f"{'identical' if row['int8']['identical'] else 'diverges at ' + str(row['int8']['first_divergence'])}",
              file=sys.stderr, flush=True)
    return rows


def summary(rows: list[dict], kernel: str) -> dict:
    """Requests identical, and the first divergence of the others (median, min), per prompt set and overall."""
    out = {}
    for name in sorted({r["set"] for r in rows}) + ["all"]:
        rs = [r for r in rows if name in ("all", r["set"])]
        div = sorted(r[kernel]["first_divergence"] for r in rs if not r[kernel]["identical"])
        out[name] = {"requests": len(rs), "identical": len(rs) - len(div), "first_divergence": div,
                     "median_first_divergence": div[len(div) // 2] if div else None}
    return out


def markdown(rows: list[dict], meta: dict) -> str:
    s8, s32 = summary(rows, "int8"), summary(rows, "fp32")
    lines = [f"int8 kernel greedy vs HF float32 greedy: {meta['machine']} ({meta['cpus']} CPUs, {meta['threads']} "
             f"threads), torch {meta['torch']}, model {meta['model']}, {meta['max_new_tokens']} new tokens, int8 kernel "
             f"{meta['int8_isa']}. Produced by `{meta['command']}` on {meta['date']}; load average "
             f"{meta['load_before']:.2f} before, {meta['load_after']:.2f} after (1 min)"
             f"{', under load (agreement does not depend on load)' if meta['under_load'] else ''}.", "",
             "| prompts | requests | int8 identical to HF | int8 first divergences (token index) | fp32 identical to HF |",
             "|---|---|---|---|---|"]
    for name in s8:
        a, b = s8[name], s32[name]
        lines.append(f"| {name} | {a['requests']} | {a['identical']} | "
                     f"{', '.join(map(str, a['first_divergence'])) or '–'} | {b['identical']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the default model (SmolLM2-135M-Instruct)")
    ap.add_argument("--prompts", default="heldout_chat,heldout_code")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    before = print_load("before")
    name = tiny_dir() if a.quick else resolve(a.model)[0]
    models = {"hf": load(name, device="cpu", layout="stock", threads=a.threads)[0]}
    models["fp32"], tok = load(name, device="cpu", layout="packed", threads=a.threads, kernel="fp32")
    models["int8"] = load(name, device="cpu", layout="packed", threads=a.threads, kernel="int8")[0]
    prompts = ([{"set": "quick", "prompt": "def x ( y ) : return y + 1"}] if a.quick
               else load_prompts(a.prompts.split(","), tok))
    n = 8 if a.quick else a.max_new_tokens
    rows = compare(models, tok, prompts, n)
    after = print_load("after")
    meta = {**machine(models["hf"]), **provenance(__file__, argv, a.prompts),
            "model": "tiny random" if a.quick else Path(name).name, "max_new_tokens": n,
            "int8_isa": cpu_gemm.int8_isa(), "storage": getattr(models["int8"], "weight_storage_", None),
            "load_before": before, "load_after": after, "under_load": under_load(before, after, a.threads)}
    md = markdown(rows, meta)
    print(md)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"int8-agreement-{meta['model']}"
        (out / f"{stem}.md").write_text(md)
        (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "summary": {
            "int8": summary(rows, "int8"), "fp32": summary(rows, "fp32")}, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
