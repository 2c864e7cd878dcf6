"""CPU greedy speed of the v2 and v3 architectures (random weights: speed does not depend on the values).

    python scripts/assets/cpu_speed.py --threads 2

HF greedy (model.generate(do_sample=False)) of 128 new tokens after a 64-token prompt, fp32, interleaved
repeats so that a shared machine's noise hits both architectures alike; prints tokens/s (median of repeats).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_models import PRESETS, make_config  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from transformers import LlamaForCausalLM

    models = {}
    for preset in ("v2", "v3"):
        for role in ("target", "draft"):
            torch.manual_seed(0)
            models[f"{preset} {role}"] = LlamaForCausalLM(make_config(PRESETS[preset][f"arch_{role}"], 8192, 0, 2048)).eval()
    prompt = torch.randint(1, 8192, (1, 64), generator=torch.Generator().manual_seed(0))
    times = {k: [] for k in models}
    with torch.no_grad():
        for _ in range(a.repeats):
            for k, m in models.items():
                t0 = time.perf_counter()
                m.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, min_new_tokens=a.new_tokens,
                           max_new_tokens=a.new_tokens, pad_token_id=0, eos_token_id=None)
                times[k].append(time.perf_counter() - t0)
    res = {k: {"params": sum(p.numel() for p in models[k].parameters()),
               "tokens_per_s": round(a.new_tokens / statistics.median(v), 1)} for k, v in times.items()}
    res["threads"], res["new_tokens"] = a.threads, a.new_tokens
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
