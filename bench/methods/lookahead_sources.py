"""Where lookahead's accepted guesses come from: prompt n-grams, output n-grams or the Jacobi window.

    python bench/methods/lookahead_sources.py                  # embedded model, code prompts, a few W/N/G
    python bench/methods/lookahead_sources.py --quick          # tiny random model (test suite)

Why: the window is lookahead's own idea, the text n-grams are what prompt lookup also exploits. Knowing
which one pays on a model says how to size W (and why text_span matters). Reads only the traces.
Writes bench/results/<device>-lookahead-sources.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench.py's helpers (from bench import ...)

from decoding import load, run  # noqa: E402

from bench import load_prompts, machine, tiny_dir  # noqa: E402

CONFIGS = [(1, 3, 2, None), (1, 5, 2, None), (1, 5, 2, 4), (2, 5, 2, None), (5, 5, 5, None), (15, 5, 15, None)]


def sources(model, tok, prompts: list[str], W: int, N: int, G: int, span: int | None, n: int) -> dict:
    extra, steps, tokens, empty, queries = Counter(), 0, 0, 0, 0
    for p in prompts:
        tr = run(model, tok, p, "lookahead", max_new_tokens=n, window=W, ngram=N, guesses=G, text_span=span)
        for s in tr.steps[1:]:
            steps, tokens, queries = steps + 1, tokens + len(s.accepted), queries + s.n_query
            info = s.info
            empty += not info["candidates"]
            if info.get("chosen") is not None and len(s.accepted) > 1:
                extra[info["candidate_sources"][info["chosen"]]] += len(s.accepted) - 1
    total = sum(extra.values()) or 1
    return {"W": W, "N": N, "G": G, "text_span": span or "default", "decode_steps": steps,
            "compression": tokens / max(steps, 1), "mean_query_tokens": queries / max(steps, 1),
            "steps_without_candidates": empty, "extra_tokens": dict(extra),
            "share": {k: v / total for k, v in extra.items()}}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="code")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    if a.quick:
        model, tok = load(tiny_dir(), device="cpu")
        prompts, n, configs = ["def x ( y ) : return y + 1 def x ( y ) :"], 16, CONFIGS[:2]
    else:
        model, tok = load(None)
        prompts, n, configs = [p["prompt"] for p in load_prompts(a.prompts.split(","))], a.max_new_tokens, CONFIGS
    rows = [sources(model, tok, prompts, *c, n) for c in configs]
    md = ["| W N G | text span | compression | query tokens/step | steps without candidates | extra tokens: "
          "output / prompt / window |", "|---|---|---|---|---|---|"]
    for r in rows:
        e = r["extra_tokens"]
        md.append(f"| {r['W']} {r['N']} {r['G']} | {r['text_span']} | {r['compression']:.2f} | "
                  f"{r['mean_query_tokens']:.1f} | {r['steps_without_candidates']} of {r['decode_steps']} | "
                  f"{e.get('output', 0)} / {e.get('prompt', 0)} / {e.get('window', 0)} |")
    text = "\n".join(md) + "\n"
    print(text)
    if not a.quick:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = {**machine(model), "prompts": a.prompts, "max_new_tokens": n}
        (out / "cpu-lookahead-sources.md").write_text(
            f"Prompts `{a.prompts}`, {n} new tokens, embedded model (`python bench/methods/lookahead_sources.py`).\n\n" + text)
        (out / "cpu-lookahead-sources.json").write_text(json.dumps({"meta": meta, "configs": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
