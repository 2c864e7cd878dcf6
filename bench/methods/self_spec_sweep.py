"""Choose the self-speculative exit layer k by measurement: for each k, train an adapter briefly (or reuse
one), then decode held-out chat prompts with HF greedy and with self_speculative and report, per k: mean
tokens per step, draft milliseconds per step against the target's, the speed ratio to HF greedy, and
exactness (our ids == HF greedy's). Writes bench/results/self-spec-sweep.{json,md} and a plotly figure
(JSON, open with plotly.io.read_json) of accepted tokens per step and draft cost against k.

  python bench/methods/self_spec_sweep.py --ks 4 8 12 --data /tmp/smol_data --adapters /tmp/selfspec \
      --prompts bench/prompts/heldout_chat.jsonl --max-new-tokens 96
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

from decoding import load, run  # noqa: E402
from decoding.methods.self_draft.self_spec_adapter import CONFIG  # noqa: E402
from decoding.training.self_spec_train import train_adapter  # noqa: E402
from decoding.training.train_heads import read_texts  # noqa: E402
from decoding.trace.stats import spec_decode_stats  # noqa: E402

MODEL = Path("~/.cache/decodescope/models/smollm2-135m-instruct").expanduser()


def chat_ids(tok, text: str) -> list[int]:
    return list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True, return_dict=True)["input_ids"])


def baselines(model, tok, ids: list[int], n: int) -> tuple[list[int], float, float]:
    """(HF greedy's ids, its seconds, our engine's greedy seconds): both baselines, timed back to back."""
    x = torch.tensor([ids])
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    hf = time.perf_counter() - t0
    return out[0, len(ids):].tolist(), hf, run(model, tok, ids, "greedy", max_new_tokens=n).wall_s


def measure(model, tok, adapter: str, prompts: list[list[int]], n: int, ref: list, **params) -> dict:
    """One adapter on every prompt: tokens per step, draft / target ms per step, speed vs HF greedy."""
    tps, draft, target, ours, exact, stops = [], [], [], 0.0, True, []
    run(model, tok, prompts[0], "self_speculative", max_new_tokens=8, adapter=adapter, **params)  # warm-up
    for ids, (ref_ids, _, _) in zip(prompts, ref):
        tr = run(model, tok, ids, "self_speculative", max_new_tokens=n, adapter=adapter, **params)
        ours += tr.wall_s
        exact &= tr.output_ids == ref_ids
        dec = [s for s in tr.steps if s.kind == "decode"]
        tps.append(spec_decode_stats(tr)["spec_accept_length"])
        draft += [s.info["draft_ms"] for s in dec]
        target += [s.info["target_ms"] for s in dec]
        stops += [s.info["self_spec"]["early_stop"] for s in dec]
    hf, greedy = sum(r[1] for r in ref), sum(r[2] for r in ref)
    return {"tokens_per_step": statistics.mean(tps), "draft_ms": statistics.mean(draft),
            "target_ms": statistics.mean(target), "draft_over_target": statistics.mean(draft) / statistics.mean(target),
            "early_stop_rate": sum(stops) / max(1, len(stops)), "ours_s": ours, "hf_greedy_s": hf,
            "speed_vs_hf_greedy": hf / ours, "engine_greedy_s": greedy, "speed_vs_engine_greedy": greedy / ours,
            "exact": exact}


def figure(rows: list[dict], path: Path) -> None:
    """Accepted tokens per step and draft cost / target step against k (plotly JSON, no PNG needed)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    ks = [r["k"] for r in rows]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=ks, y=[r["tokens_per_step"] for r in rows], name="tokens per step", mode="lines+markers"))
    fig.add_trace(go.Scatter(x=ks, y=[r["draft_over_target"] for r in rows], name="draft ms / target ms per step",
                             mode="lines+markers"), secondary_y=True)
    fig.add_trace(go.Scatter(x=ks, y=[r["speed_vs_hf_greedy"] for r in rows], name="speed vs HF greedy",
                             mode="lines+markers", line={"dash": "dot"}))
    fig.update_layout(title="self_speculative: exit layer k (SmolLM2-135M-Instruct, CPU, held-out chat)",
                      xaxis_title="exit layer k")
    path.write_text(fig.to_json())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 8, 12])
    ap.add_argument("--data", nargs="+", default=["/tmp/smol_data"])
    ap.add_argument("--adapters", default="/tmp/selfspec", help="adapters live in DIR/k<K> (trained when missing)")
    ap.add_argument("--prompts", default=str(ROOT / "bench" / "prompts" / "heldout_chat.jsonl"))
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--train-tokens", type=int, default=60_000)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--stop", type=float, default=0.8)
    ap.add_argument("--cache", default="/tmp/selfspec/features", help="the target's features, shared by every k")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "self-spec-sweep"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load(a.model, layout="stock")
    rows = [json.loads(line) for line in open(a.prompts) if line.strip()]
    prompts = [chat_ids(tok, r.get("chat") or r["prompt"]) for r in rows]
    ref = [baselines(model, tok, ids, a.max_new_tokens) for ids in prompts]
    rows = []
    for k in a.ks:
        ad = Path(a.adapters) / f"k{k}"
        if not (ad / CONFIG).is_file():
            train_adapter(model, tok, read_texts(a.data), ad, exit_layer=k, max_tokens=a.train_tokens,
                          epochs=a.epochs, cache=a.cache, also=tuple(a.ks),
                          log=lambda m: print(m, file=sys.stderr, flush=True))
        card = json.loads((ad / CONFIG).read_text())
        r = {"k": k, "valid_top1": card.get("training", {}).get("valid_top1"),
             **measure(model, tok, str(ad), prompts, a.max_new_tokens, ref, depth=a.depth, stop=a.stop)}
        print(json.dumps(r), flush=True)
        rows.append(r)
    out = Path(a.out)
    meta = {"model": a.model, "prompts": a.prompts, "max_new_tokens": a.max_new_tokens, "threads": 1,
            "depth": a.depth, "stop": a.stop, "train_tokens": a.train_tokens, "epochs": a.epochs, "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=1))
    figure(rows, out.with_suffix(".plotly.json"))
    lines = ["| k | valid top-1 | tokens/step | draft ms | target ms | draft/target | early stop | speed vs HF greedy "
             "| speed vs engine greedy | exact |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['k']} | {r['valid_top1']} | {r['tokens_per_step']:.2f} | {r['draft_ms']:.1f} | {r['target_ms']:.1f} | "
              f"{r['draft_over_target']:.2f} | {r['early_stop_rate']:.2f} | {r['speed_vs_hf_greedy']:.2f}x | "
              f"{r['speed_vs_engine_greedy']:.2f}x | {r['exact']} |"
              for r in rows]
    out.with_suffix(".md").write_text(f"# self_speculative exit-layer sweep\n\n`python bench/methods/self_spec_sweep.py "
                                      f"{' '.join(sys.argv[1:])}` (CPU, 1 thread)\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
