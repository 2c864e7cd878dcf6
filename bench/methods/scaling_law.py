"""The lookahead paper's scaling law on our model: compression vs W for several N (G = W), against the
per-step FLOPs each configuration spends (log scale). The paper's claim: with N large enough,
exponentially growing W buys a linear drop in steps.

    python bench/methods/scaling_law.py [--model M] [--prompts 4] [--max-new-tokens 64] [--ws 1,2,4,8,16] [--ns 3,5,7,11]

Writes bench/results/scaling_law.json (data) and scaling_law.html + .png (picture, when Chromium exists).
Compression counts decode steps only (generated tokens after the first / decode steps), so the prefill
does not dilute it. Greedy outputs are checked against plain greedy for every point.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import plotly.graph_objects as go  # noqa: E402

from decoding import load, make_drafter, run  # noqa: E402
from profiling.flops import trace_costs  # noqa: E402


def measure(model, tok, prompts: list[str], ws: list[int], ns: list[int], n_new: int) -> list[dict]:
    greedy = [run(model, tok, p, "greedy", max_new_tokens=n_new, trace=False).output_ids for p in prompts]
    points = []
    for N in ns:
        for W in ws:
            toks = steps = 0
            flops = 0.0
            for p, ref in zip(prompts, greedy):
                tr = run(model, tok, p, "lookahead", max_new_tokens=n_new,
                         drafter=make_drafter("lookahead", window=W, ngram=N, guesses=W,
                                               text_span=N - 1))  # the paper's pool: the law is about W
                assert tr.output_ids == ref, f"W={W} N={N} diverged from greedy"
                costs = trace_costs(tr)[1:]
                toks += len(tr.output_ids) - 1
                steps += len(tr.steps) - 1
                flops += sum(c["flops"] for c in costs)
            points.append({"ngram": N, "window": W, "guesses": W, "compression": toks / steps,
                           "flops_per_step": flops / steps, "decode_steps": steps, "tokens": toks})
            print(f"N={N:2d} W={W:2d}: compression {toks / steps:.2f}, {flops / steps / 1e6:.1f} MFLOP/step",
                  file=sys.stderr)
    return points


def figure(points: list[dict], title: str) -> go.Figure:
    fig = go.Figure()
    for N in sorted({p["ngram"] for p in points}):
        pts = [p for p in points if p["ngram"] == N]
        fig.add_trace(go.Scatter(x=[p["flops_per_step"] for p in pts], y=[p["compression"] for p in pts],
                                 mode="lines+markers+text", text=[f"W{p['window']}" for p in pts],
                                 textposition="top center", name=f"N={N}"))
    fig.update_layout(title=title, xaxis_title="FLOPs per decode step (log)", yaxis_title="compression (tokens/step)",
                      xaxis_type="log", template="plotly_white", width=900, height=560)
    return fig


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--ws", default="1,2,4,8,16")
    ap.add_argument("--ns", default="3,5,7,11")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    model, tok = load(a.model)
    lines = (ROOT / "bench" / "prompts" / "code.jsonl").read_text().splitlines()[:a.prompts]
    prompts = [json.loads(x)["prompt"] for x in lines]
    pts = measure(model, tok, prompts, [int(x) for x in a.ws.split(",")], [int(x) for x in a.ns.split(",")],
                  a.max_new_tokens)
    doc = {"model": a.model or "embedded (assets/target)", "prompts": len(prompts), "max_new_tokens": a.max_new_tokens,
           "points": pts}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scaling_law.json").write_text(json.dumps(doc, indent=1))
    fig = figure(pts, f"Lookahead scaling law on {doc['model']} (G = W, {len(prompts)} code prompts)")
    fig.write_html(out / "scaling_law.html", include_plotlyjs=True)
    try:  # a PNG for reviewers, through the project's own Chromium screenshot helper
        sys.path.insert(0, str(ROOT / "scripts"))
        import screenshots
        screenshots.shoot(out / "scaling_law.html", out / "scaling_law.png", (950, 600))
    except Exception as e:  # noqa: BLE001 - the data and HTML are the result; the PNG is a convenience
        print(f"no PNG: {e}", file=sys.stderr)
    return doc


if __name__ == "__main__":
    main()
