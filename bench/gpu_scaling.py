"""Where extra query tokens stop being free on a big model, decode bandwidth against the device's peak, and
split attention (flash-attn cache pass + masked step pass) against SDPA.

    python bench/gpu_scaling.py             # 7B-shaped Llama, random weights, bf16, on the GPU (~28 GB)
    python bench/gpu_scaling.py --quick     # tiny shape on CPU: checks the program runs (test suite)

Random weights: latency and bandwidth depend on shapes, not values, and nothing needs downloading. The
latency curve uses the engine's own Core (profiling.sweep); bandwidth = analytic bytes of a 1-token step
(weights + KV cache, profiling.flops) / its measured time, against a measured copy bandwidth and the
datasheet. Writes bench/results/<device>-scaling.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from decoding.core import Core  # noqa: E402
from decoding.masks import depths_of  # noqa: E402
from decoding.split_attention import NAME  # noqa: E402
from profiling.calibrate import device_name, peaks  # noqa: E402
from profiling.sweep import latency_sweep, time_step, tree_parents  # noqa: E402

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


def split_vs_sdpa(model, kv_lens: tuple[int, ...], q: int, reps: int) -> list[dict]:
    """One q-token tree step at several cache lengths: max |logit difference| and median ms of each kernel."""
    rows, vocab = [], model.config.vocab_size
    parents = tree_parents(q, "tree")
    depths = depths_of(parents)
    for kv in kv_lens:
        out = {"kv_len": kv, "n_query": q}
        logits = {}
        for impl in ("sdpa", NAME):
            model.set_attn_implementation(impl)
            core = Core(model)
            core.prefill([i % vocab for i in range(kv)])
            core.commit(list(range(kv)))
            tokens = [(7 * i) % vocab for i in range(q)]
            logits[impl] = core.forward(tokens, parents, depths)
            core.commit([])
            ms = sorted(time_step(core, tokens, parents, depths, reps))
            out[f"{impl}_ms"] = ms[len(ms) // 2]
        model.set_attn_implementation("sdpa")
        out["max_abs_diff"] = (logits["sdpa"] - logits[NAME]).abs().max().item()
        out["argmax_equal"] = bool((logits["sdpa"].argmax(-1) == logits[NAME].argmax(-1)).all())
        rows.append(out)
    return rows


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
    model = build(shape, device, dtype)
    sweep = latency_sweep(model, kv_len=kv, sizes=sizes, reps=a.reps if not a.quick else 2)
    one = sweep["points"][0]
    peak = peaks(device, dtype)
    bw = one["bytes"] / (one["ms"] / 1e3)
    decode = {"bytes_per_step": one["bytes"], "ms": one["ms"], "achieved_bandwidth": bw,
              "measured_copy_bandwidth": peak["bandwidth"], "fraction_of_measured": bw / peak["bandwidth"],
              "datasheet": peak.get("datasheet")}
    if peak.get("datasheet"):
        decode["fraction_of_datasheet"] = bw / peak["datasheet"]["bandwidth"]
    split = split_vs_sdpa(model, (kv, 4 * kv) if not a.quick else (8, 32), 64 if not a.quick else 8,
                          a.reps if not a.quick else 2)
    doc = {"meta": {"device": device_name(device), "dtype": str(dtype).replace("torch.", ""),
                    "torch": torch.__version__, "shape": shape, "kv_len": kv,
                    "flash_attn": _has_flash_attn()},
           "sweep": sweep, "decode_bandwidth": decode, "split_attention": split}
    md = [f"Measured on {doc['meta']['device']}, {doc['meta']['dtype']}, torch {torch.__version__}; Llama "
          f"{shape['num_hidden_layers']}x{shape['hidden_size']} random weights, kv length {kv}.\n",
          "| query tokens | ms | x one token |", "|---|---|---|"]
    md += [f"| {p['n_query']} | {p['ms']:.2f} | {p['relative']:.2f} |" for p in sweep["points"]]
    md += ["", f"Decode (1 token): {bw / 1e9:.0f} GB/s achieved, {decode['fraction_of_measured']:.0%} of the "
           f"measured copy bandwidth ({peak['bandwidth'] / 1e9:.0f} GB/s)."
           + (f" {decode['fraction_of_datasheet']:.0%} of the datasheet." if "fraction_of_datasheet" in decode else ""),
           "", "| kv length | step tokens | SDPA ms | split ms | max abs logit diff | same argmax |",
           "|---|---|---|---|---|---|"]
    md += [f"| {r['kv_len']} | {r['n_query']} | {r['sdpa_ms']:.2f} | {r[NAME + '_ms']:.2f} | "
           f"{r['max_abs_diff']:.2e} | {'yes' if r['argmax_equal'] else 'NO'} |" for r in split]
    text = "\n".join(md) + "\n"
    print(text)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{'cuda' if gpu else 'cpu'}-scaling"
        (out / f"{stem}.md").write_text(text)
        (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


def _has_flash_attn() -> bool:
    try:
        import flash_attn  # noqa: F401
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    main()
