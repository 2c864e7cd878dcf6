"""Candidate CPU presets of the default model on the page's example chat requests (what the presets are chosen on).

    python bench/methods/cpu_presets.py                      # every candidate, 4 requests x 64 tokens, 2 interleaved rounds
    DECODESCOPE_DRAFT_BLOCKS=0 python bench/methods/cpu_presets.py --only eagle   # the heads' weights kept float32

The shipped presets (decoding/tuning/device_presets.py SHIPPED_CPU_DEFAULT, declared in each method's spec) are chosen here,
on appkit/page/examples.py's chat requests, never on the held-out bench prompts (bench/prompts/heldout_chat.jsonl),
which measure them afterwards (bench/bench.py). Prints tokens/s, the ratio to greedy in the same round, and the
mean accepted tokens a step; every run is checked against greedy's output (exact). One thread unless --threads.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench.py's helpers (from bench import ...)

from decoding import load  # noqa: E402
from decoding.api import run  # noqa: E402
from decoding.methods.spec import BASELINE  # noqa: E402

from bench import print_load  # noqa: E402

HEADS = ROOT / "assets" / "heads" / "smollm2"
DATASTORE = ROOT / "assets" / "datastore" / "smollm2"
CANDIDATES = {
    BASELINE: (BASELINE, {}),
    "lookahead W1 N3 G1": ("lookahead", dict(window=1, ngram=3, guesses=1)),
    "lookahead W1 N2 G1": ("lookahead", dict(window=1, ngram=2, guesses=1)),
    "prompt lookup copy 10": ("prompt_lookup", dict(max_ngram=3, num_tokens=10)),
    "prompt lookup copy 3": ("prompt_lookup", dict(max_ngram=3, num_tokens=3)),
    "prompt lookup copy 10 adaptive": ("prompt_lookup", dict(max_ngram=3, num_tokens=10, adaptive=1)),
    "eagle budget 4 cut 0.1": ("eagle", dict(heads=str(HEADS / "eagle"), budget=4, confidence=0.1)),
    "eagle budget 8 adaptive": ("eagle", dict(heads=str(HEADS / "eagle"), budget=8, adaptive=1)),
    "eagle budget 16 adaptive": ("eagle", dict(heads=str(HEADS / "eagle"), budget=16, adaptive=1)),
    "eagle budget 8 adaptive vocab 4096": ("eagle", dict(heads=str(HEADS / "eagle"), budget=8, adaptive=1,
                                                         draft_vocab=4096)),
    "retrieval adaptive (datastore)": ("retrieval", dict(datastore=str(DATASTORE), adaptive=1)),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", default=None, help="comma-separated parts of candidate names (greedy always runs)")
    a = ap.parse_args(argv)
    from appkit.page.examples import CHAT
    from decoding.methods.retrieve.suffix_cache import HISTORY
    print_load("before")
    model, tok = load(None, threads=a.threads)
    prompts = [tok.apply_chat_template([{"role": "user", "content": r}], add_generation_prompt=True, tokenize=False)
               for r in CHAT]
    chosen = {n: c for n, c in CANDIDATES.items()
              if c[0] == BASELINE or not a.only or any(o in n for o in a.only.split(","))}
    for method, kw in chosen.values():  # warm: kernels, heads, curves measured once per model
        run(model, tok, prompts[0], method, max_new_tokens=4, trace=False, **kw)
    ref = {p: run(model, tok, p, BASELINE, max_new_tokens=a.tokens, trace=False).output_ids for p in prompts}
    got: dict[str, list[tuple[float, float]]] = {}
    for _ in range(a.rounds):
        for name, (method, kw) in chosen.items():
            secs = tokens = steps = 0
            for p in prompts:
                HISTORY.clear()  # the suffix cache would hold this round's earlier answers
                t = time.perf_counter()
                tr = run(model, tok, p, method, max_new_tokens=a.tokens, trace=False, **kw)
                secs += time.perf_counter() - t
                if tr.output_ids != ref[p]:
                    raise SystemExit(f"{name} diverged from greedy on {p[:40]!r}")
                tokens, steps = tokens + len(tr.output_ids), steps + tr.stats()["steps"]
            got.setdefault(name, []).append((tokens / secs, tokens / steps))
    print_load("after")
    base = statistics.median(r for r, _ in got[BASELINE])
    for name, v in got.items():
        rate, acc = statistics.median(r for r, _ in v), statistics.median(x for _, x in v)
        print(f"{name:34s} {rate:6.1f} tokens/s  {rate / base:4.2f}x greedy  {acc:.2f} accepted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
