"""Plain Jacobi beside lookahead, and reference lookup on an edit task (aggressive decoding).

    python bench/methods/jacobi_reference.py                # embedded models, writes bench/results/cpu-jacobi-reference.{md,json}
    python bench/methods/jacobi_reference.py --quick        # seconds, tiny random model (the test suite runs it)

Part 1 (compression, no timing): Jacobi (block K) and lookahead on the held-out code prompts
(bench/prompts/code.jsonl), 96 new tokens each, every output checked against HF greedy.
Part 2 (wall time, interleaved rounds, median per method of the total over tasks): HF greedy, ours
greedy, ours prompt lookup and ours reference lookup on edit tasks whose reference is the input. The
tasks are the codec boilerplate the embedded model knows by heart (encodings/*.py: ~100 copies in the
standard library) with typos in it: a 10M model cannot follow an instruction, so "fixing" means writing
the module again, the one setting where it copies long spans. Also measured: the same input given in the
prompt too (as comment lines), where the model follows the input less closely.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench import hf_runner, load_prompts, machine  # noqa: E402
from decoding import load, run  # noqa: E402
from decoding.exactness import hf_greedy  # noqa: E402

HEAD = "import codecs\n\n### Codec APIs\n\nclass Codec(codecs.Codec):"
MODULE = '''class Codec(codecs.Codec):

    def encode(self,input,errors='strict'):
        return codecs.charmap_encode(input,errors,encoding_map)

    def decode(self,input,errors='strict'):
        return codecs.charmap_decode(input,errors,decoding_table)

class IncrementalEncoder(codecs.IncrementalEncoder):
    def encode(self, input, final=False):
        return codecs.charmap_encode(input,self.errors,encoding_map)[0]

class IncrementalDecoder(codecs.IncrementalDecoder):
    def decode(self, input, final=False):
        return codecs.charmap_decode(input,self.errors,decoding_table)[0]

class StreamWriter(Codec,codecs.StreamWriter):
    pass

class StreamReader(Codec,codecs.StreamReader):
    pass

### encodings module API

def getregentry():
    return codecs.CodecInfo(
        name='NAME',
        encode=Codec().encode,
        decode=Codec().decode,
        incrementalencoder=IncrementalEncoder,
        incrementaldecoder=IncrementalDecoder,
        streamreader=StreamReader,
        streamwriter=StreamWriter,
    )
'''
TYPOS = [  # (codec name, typos): each task's input
    ("cp1251", [("charmap_encode(input,errors", "charmap_encod(input,errors"),
                ("class IncrementalDecoder(", "class IncrementalDecodr("), ("streamreader=StreamReader", "streamreader=StreamReadr")]),
    ("cp1252", [("decode(self,input,errors", "decode(self,inptu,errors"), ("class StreamWriter(", "class StreamWritter(")]),
    ("koi8_r", [("encoding_map)[0]", "encodng_map)[0]"), ("encode=Codec().encode", "encode=Codec().encdoe"),
                ("### encodings module API", "### encodings modul API")]),
]


def edit_tasks() -> list[dict]:
    out = []
    for name, typos in TYPOS:
        src = MODULE.replace("NAME", name)
        for a, b in typos:
            assert a in src, a
            src = src.replace(a, b, 1)
        out.append({"name": name, "input": src,
                    "prompt": '"""Fix the typos in this codec module."""\n\n' + HEAD,
                    "prompt_with_input": "\n".join("# " + ln for ln in src.splitlines()) + "\n\n" + HEAD})
    return out


def compression_rows(model, tok, prompts: list[str], n: int, configs: list[tuple[str, str, dict]]) -> list[dict]:
    refs = [hf_greedy(model, tok(p)["input_ids"], n) for p in prompts]
    rows = []
    for label, method, params in configs:
        toks = steps = acc = dec = 0
        exact = True
        for p, ref in zip(prompts, refs):
            tr = run(model, tok, p, method, max_new_tokens=n, **params)
            exact &= tr.output_ids == ref
            st = tr.stats()
            toks, steps = toks + st["new_tokens"], steps + st["steps"]
            d = [len(s.accepted) for s in tr.steps if s.kind == "decode"]
            acc, dec = acc + sum(d), dec + len(d)
        rows.append({"method": label, "compression": toks / steps, "mean_accepted": acc / max(dec, 1),
                     "prompts": len(prompts), "exact": exact})
    return rows


def timed(fn, tasks, n: int) -> tuple[float, list]:
    t0 = time.perf_counter()
    outs = [fn(t, n) for t in tasks]
    return time.perf_counter() - t0, outs


def edit_rows(model, tok, hf_model, tasks: list[dict], n: int, rounds: int, ref_tokens: int) -> list[dict]:
    hf = hf_runner(hf_model, tok)

    def ours(method: str, key: str = "prompt", ref: bool = False, **kw):
        def go(t: dict, n_: int):
            extra = {"reference": t["input"]} if ref else {}
            tr = run(model, tok, t[key], method, max_new_tokens=n_, **extra, **kw)
            return tr.output_ids, tr
        return go

    runners = {
        "HF greedy": lambda t, n_: hf(t["prompt"], n_),
        "ours greedy": ours("greedy"),
        "ours prompt lookup": ours("prompt_lookup"),
        "ours reference lookup (reference = input)": ours("prompt_lookup", ref=True, reference_tokens=ref_tokens),
        "HF greedy, input also in the prompt": lambda t, n_: hf(t["prompt_with_input"], n_),
        "ours reference lookup, input also in the prompt": ours("prompt_lookup", key="prompt_with_input", ref=True,
                                                                 reference_tokens=ref_tokens),
    }
    times = {k: [] for k in runners}
    outs = {}
    for _ in range(rounds):  # interleaved: every method once per round
        for name, fn in runners.items():
            dt, o = timed(fn, tasks, n)
            times[name].append(dt)
            outs[name] = o
    rows = []
    base = {"prompt": statistics.median(times["HF greedy"]),
            "prompt_with_input": statistics.median(times["HF greedy, input also in the prompt"])}
    for name, o in outs.items():
        key = "prompt_with_input" if "input also" in name else "prompt"
        ref = outs["HF greedy, input also in the prompt" if key != "prompt" else "HF greedy"]
        t = statistics.median(times[name])
        row = {"method": name, "wall_s": t, "vs_hf_greedy": base[key] / t,
               "exact": [x for x, _ in o] == [x for x, _ in ref], "tokens": sum(len(x) for x, _ in o)}
        trs = [tr for _, tr in o if tr is not None and hasattr(tr, "steps")]
        if trs:
            d = [len(s.accepted) for tr in trs for s in tr.steps if s.kind == "decode"]
            row.update(mean_accepted=sum(d) / len(d), longest_step=max(d),
                       reference_tokens=sum(o_ == "reference" for tr in trs for s in tr.steps for o_ in s.origins))
        rows.append(row)
    return rows


def markdown(part1: list[dict], part2: list[dict], meta: dict, args) -> str:
    head = (f"Measured on {meta['gpu'] or meta['machine']} ({meta['cpus']} CPUs, {meta['threads']} threads), "
            f"{meta['device']} {meta['dtype']}, torch {meta['torch']}; a shared machine: read ratios from one "
            f"interleaved run, not absolute times. Command: `python bench/methods/jacobi_reference.py --rounds "
            f"{args.rounds}` (load average {meta.get('load') or 0:.1f} at the end).")
    lines = [head, "", f"**Jacobi vs lookahead**: {part1[0]['prompts']} held-out code prompts, {args.max_new_tokens} "
             "new tokens each (compression = new tokens / forward passes, prefill included).", "",
             "| method | compression | mean accepted per decode step | identical to HF greedy |", "|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['compression']:.2f} | {r['mean_accepted']:.2f} | {'yes' if r['exact'] else 'NO'} |"
              for r in part1]
    lines += ["", f"**Reference lookup on edit tasks** ({meta['tasks']} codec modules with typos; reference = the input; "
              f"{args.edit_tokens} new tokens each; median of {args.rounds} interleaved rounds).", "",
              "| method | wall s | vs HF greedy | mean accepted | longest step | tokens copied from the reference | identical |",
              "|---|---|---|---|---|---|---|"]
    for r in part2:
        acc = f"{r['mean_accepted']:.2f}" if "mean_accepted" in r else "–"
        lines.append(f"| {r['method']} | {r['wall_s']:.2f} | {r['vs_hf_greedy']:.2f}x | {acc} | "
                     f"{r.get('longest_step', '–')} | {r.get('reference_tokens', '–')} | {'yes' if r['exact'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    import os
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny random model, 2 prompts, 1 round (test suite)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--edit-tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reference-tokens", type=int, default=24)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    if args.quick:
        from bench import tiny_dir
        model, tok = load(tiny_dir(), threads=1)
        hf_model = model
        prompts = ["def x ( y ) : return y + 1", "x = 1 y = 2 x = 1"]
        args.max_new_tokens, args.edit_tokens, args.rounds = 16, 16, 1
        tasks = [{"name": "quick", "input": "return y + 1 x = 1", "prompt": prompts[0], "prompt_with_input": prompts[1]}]
    else:
        model, tok = load(threads=1)
        hf_model, _ = load(threads=1, layout="stock")
        prompts = [p["prompt"] for p in load_prompts(["code"])]
        tasks = edit_tasks()
    configs = [(f"jacobi K{k}", "jacobi", {"block": k}) for k in (2, 4, 8, 16)] + [
        ("lookahead W1 N3 G2 (CPU preset)", "lookahead", dict(window=1, ngram=3, guesses=2)),
        ("lookahead W5 N4 G5", "lookahead", dict(window=5, ngram=4, guesses=5)),
        ("lookahead W5 N4 G5, window n-grams only", "lookahead",
         dict(window=5, ngram=4, guesses=5, prompt_ngrams=False, output_ngrams=False))]
    part1 = compression_rows(model, tok, prompts, args.max_new_tokens, configs)
    part2 = edit_rows(model, tok, hf_model, tasks, args.edit_tokens, args.rounds, args.reference_tokens)
    meta = {**machine(model), "tasks": len(tasks), "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    doc = {"meta": meta, "args": vars(args), "jacobi_vs_lookahead": part1, "edit_tasks": part2}
    if not args.quick:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cpu-jacobi-reference.json").write_text(json.dumps(doc, indent=1))
        (out / "cpu-jacobi-reference.md").write_text(markdown(part1, part2, meta, args))
    print(markdown(part1, part2, meta, args))
    return doc


if __name__ == "__main__":
    main()
