"""Where extra query tokens stop being free on a big model, what a first run costs against a warm one, and
decode bandwidth against the device's peak.

    python bench/gpu/gpu_scaling.py             # 7B-shaped Llama, random weights, bf16, on the GPU (~14 GB)
    python bench/gpu/gpu_scaling.py --quick     # tiny shape on CPU: checks the program runs (test suite)

Random weights: latency and bandwidth depend on shapes, not values, and nothing needs downloading. The
latency curve uses the engine's own Core built as a run builds it (the static, CUDA-graph path on CUDA;
every timed row states its path: static/dynamic, graphs, buckets captured, capture errors; the dynamic
path is timed as its own labelled row) (profiling.sweep); a 64-token tree step is timed against the
1-token step at the same cache length (what a draft tree or a lookahead step costs); a greedy run through
`decoding.generate` is timed twice, because a first run meets a new (query, cache) shape every step and
some kernels (cuDNN SDPA) build a plan per shape. Bandwidth = analytic bytes of a 1-token step (weights +
KV cache, profiling.flops) / its measured time. Writes bench/results/<device>-scaling.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from decoding import generate  # noqa: E402
from decoding.engine.masks import depths_of  # noqa: E402
from decoding.engine.runner import precapture  # noqa: E402
from decoding.fast.static_cache import bucket  # noqa: E402
from decoding.engine.timing import path_of, time_step, timing_core  # noqa: E402
from profiling.calibrate import device_name, peaks  # noqa: E402
from profiling.sweep import latency_sweep, tree_parents  # noqa: E402

SHAPE_7B = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, vocab_size=32000, max_position_embeddings=8192)
SHAPE_QUICK = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=128, max_position_embeddings=1024)


def build(shape: dict, device: str, dtype: torch.dtype) -> LlamaForCausalLM:
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # initialise directly in the target dtype: half the memory of fp32 init
    try:
        with torch.device(device):
            model = LlamaForCausalLM(LlamaConfig(**shape, attn_implementation="sdpa")).eval()
    finally:
        torch.set_default_dtype(prev)
    return model


def tree_vs_one(model, kv_len: int, q: int, reps: int, static: bool | None = None) -> dict:
    """Median ms of a q-token binary-tree step and of a 1-token step against the same kv_len cache, on
    the path a run takes (static None) or the one asked for."""
    vocab = model.config.vocab_size
    core = timing_core(model, kv_len + bucket(q), static)
    core.prefill([i % vocab for i in range(kv_len)])
    core.commit(list(range(kv_len)))
    steps = {}
    for name, n in (("one_ms", 1), ("tree_ms", q)):
        parents = tree_parents(n, "tree")
        steps[name] = ([(7 * i + 3) % vocab for i in range(n)], parents, depths_of(parents))
        time_step(core, *steps[name], 2)  # warm-up
    times = {name: [] for name in steps}
    for _ in range(reps):  # interleaved, so a slow moment of the machine hits both sizes alike
        for name, step in steps.items():
            times[name] += time_step(core, *step, 1)
    out = {"kv_len": kv_len, "n_query": q, **{name: statistics.median(t) for name, t in times.items()}}
    out["ratio"] = out["tree_ms"] / out["one_ms"]
    out["path"] = path_of(core)
    return out


def first_vs_warm(model, prompt_len: int, new_tokens: int) -> dict:
    """Mean decode-step ms of a visitor's first greedy run on a fresh prompt length (after the model-load
    pre-capture the app does, decoding.engine.runner.precapture), then of the same run again."""
    vocab = model.config.vocab_size
    rng = random.Random(1)
    prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
    pre = precapture(model, prompt_len + new_tokens + 256)
    runs, paths = [], []
    for _ in range(2):
        tr = generate(model, prompt, max_new_tokens=new_tokens, trace=False)
        runs.append(statistics.mean(s.wall_ms for s in tr.steps[1:]))
        paths.append(run_path(tr.config))
    return {"prompt_len": prompt_len, "new_tokens": new_tokens, "first_ms": runs[0], "warm_ms": runs[1],
            "ratio": runs[0] / runs[1], "precaptured": pre["captured"] if pre else [], "path": paths[0],
            "path_warm": paths[1]}


def run_path(config: dict) -> dict:
    """A run's path from its trace config, in path_of's form."""
    g = config.get("graphs")
    if not config.get("static") or g is None:
        return {"static": False, "graphs": False, "used": [], "captured": [], "failed": {}, "label": "dynamic (eager)"}
    label = (f"static, graphs {'on' if g['on'] else 'off'}, {len(g['captured'])} buckets captured"
             + (f", {len(g['failed'])} capture errors ({next(iter(g['failed'].values()))})" if g["failed"] else ""))
    return {"static": True, "graphs": g["on"], "used": g["used"], "captured": g["captured"], "failed": g["failed"],
            "label": label}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kv-len", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    gpu = torch.cuda.is_available() and not a.quick
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    shape = SHAPE_7B if gpu else SHAPE_QUICK
    kv = a.kv_len if not a.quick else 32
    sizes = tuple(2**i for i in range(9)) if not a.quick else (1, 2, 4)
    reps = a.reps if not a.quick else 2
    model = build(shape, device, dtype)
    sweep = latency_sweep(model, kv_len=kv, sizes=sizes, reps=reps)
    tree = tree_vs_one(model, kv, 64 if not a.quick else 8, reps)
    dynamic = tree_vs_one(model, kv, 64 if not a.quick else 8, reps, static=False)  # the labelled other path
    # a prompt length no step above has used, so every decode step of the first run meets new shapes
    warm = first_vs_warm(model, kv // 2 + 3, 32 if not a.quick else 4)
    one = sweep["points"][0]
    peak = peaks(device, dtype)
    bw = one["bytes"] / (one["ms"] / 1e3)
    decode = {"bytes_per_step": one["bytes"], "ms": one["ms"], "achieved_bandwidth": bw,
              "measured_copy_bandwidth": peak["bandwidth"], "fraction_of_measured": bw / peak["bandwidth"],
              "datasheet": peak.get("datasheet")}
    if peak.get("datasheet"):
        decode["fraction_of_datasheet"] = bw / peak["datasheet"]["bandwidth"]
    doc = {"meta": {"device": device_name(device), "dtype": str(dtype).replace("torch.", ""),
                    "torch": torch.__version__, "shape": shape, "kv_len": kv,
                    "command": "python bench/gpu/gpu_scaling.py" + (" --quick" if a.quick else "")},
           "sweep": sweep, "tree_step": tree, "dynamic_tree_step": dynamic, "first_vs_warm": warm,
           "decode_bandwidth": decode}
    md = [f"Measured on {doc['meta']['device']}, {doc['meta']['dtype']}, torch {torch.__version__}; Llama "
          f"{shape['num_hidden_layers']}x{shape['hidden_size']} random weights, kv length {kv}.\n",
          f"Latency curve path: {sweep['path']['label']}.\n",
          "| query tokens | ms | x one token |", "|---|---|---|"]
    md += [f"| {p['n_query']} | {p['ms']:.2f} | {p['relative']:.2f} |" for p in sweep["points"]]
    md += ["", f"{tree['n_query']}-token tree step: {tree['tree_ms']:.2f} ms = {tree['ratio']:.2f}x the 1-token "
           f"step ({tree['one_ms']:.2f} ms) at kv {kv}; path: {tree['path']['label']}.",
           f"Dynamic path (labelled row): {dynamic['n_query']}-token tree step {dynamic['tree_ms']:.2f} ms, "
           f"1-token step {dynamic['one_ms']:.2f} ms ({dynamic['ratio']:.2f}x); path: {dynamic['path']['label']}.",
           f"Greedy run, {warm['new_tokens']} tokens from a {warm['prompt_len']}-token prompt: first run "
           f"{warm['first_ms']:.2f} ms/step, warm {warm['warm_ms']:.2f} ms/step ({warm['ratio']:.2f}x), after a "
           f"model-load pre-capture of {len(warm['precaptured'])} buckets; path: {warm['path']['label']}.",
           f"Decode (1 token): {bw / 1e9:.0f} GB/s achieved, {decode['fraction_of_measured']:.0%} of the "
           f"measured copy bandwidth ({peak['bandwidth'] / 1e9:.0f} GB/s)."
           + (f" {decode['fraction_of_datasheet']:.0%} of the datasheet." if "fraction_of_datasheet" in decode else "")]
    text = "\n".join(md) + "\n"
    print(text)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{'cuda' if gpu else 'cpu'}-scaling"
        (out / f"{stem}.md").write_text(text)
        (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


if __name__ == "__main__":
    main()
