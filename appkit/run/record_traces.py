"""Record the traces shipped for the app's Replay tab (assets/traces/) on the default model, SmolLM2-135M-Instruct.

    python scripts/record_traces.py [--target NAME] [--draft DIR|auto] [--out assets/traces]
                                    [--max-new-tokens 80] [--only STEM]

Each file is a plain decoding.Trace JSON (kept small: a few dozen kB) so a workshop without a GPU can step
through it. The requests are the lesson's chat requests (appkit/page/lesson.py), whose greedy answers on the
default model are right code; speculative runs use the draft shipped for it (assets/drafts/smollm2). Replay
opens each on the step viz.exports.teach picks for the method's point and says why (the script prints it).
"""
from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import torch

from decoding import load, run
from decoding.models import DEFAULT_MODEL

from .method_fields import needs
from ..page.lesson import CALC
from ..page.tables import public_trace

ROOT = Path(__file__).resolve().parents[2]  # the repository (appkit/<room>/<module>.py)
RECORDINGS = [  # (file stem, chat request, method, parameters): the lesson's requests and settings
    ("lookahead_W5_N4_G5", CALC, "lookahead", dict(window=5, ngram=4, guesses=5)),  # four functions: window n-grams
    ("prompt_lookup", CALC, "prompt_lookup", dict(max_ngram=3, num_tokens=10)),  # copies its own earlier functions
    ("speculative_tree_3-2-1", CALC, "speculative", dict(tree=[3, 2, 1])),
    ("speculative_staged_chain", CALC, "speculative", dict(draft_tokens=4, staged=True)),
    ("jacobi_block_5", CALC, "jacobi", dict(block=5)),  # the lesson's Jacobi stop: its guesses, step by step
]
MAX_BYTES = 150_000  # each file; the five together stay a few hundred kB


def public(tr, where: str):
    """The trace as shipped: no server path (tables.public_trace), and where it was recorded."""
    public_trace(tr)
    tr.model = {**(tr.model or {}), "recorded_on": where}
    return tr


def main(argv=None) -> int:
    from viz.exports.teach import teaching_step
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=DEFAULT_MODEL)
    ap.add_argument("--draft", default="auto", help="the draft for speculative (auto: the one shipped for the target)")
    ap.add_argument("--out", default=str(ROOT / "assets" / "traces"))
    ap.add_argument("--max-new-tokens", type=int, default=80)  # the four functions, whole
    ap.add_argument("--only", action="append", default=None, help="record this file stem only (repeatable)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)  # steadier step times on a shared CPU
    model, tok = load(a.target, device="cpu")
    where = (f"{platform.machine()} CPU ({os.cpu_count()} cores, {torch.get_num_threads()} thread), "
             f"torch {torch.__version__}, by python scripts/record_traces.py")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for stem, request, method, params in RECORDINGS:
        if a.only and stem not in a.only:
            continue
        prompt = tok.apply_chat_template([{"role": "user", "content": request}], add_generation_prompt=True,
                                         tokenize=False)
        kw = dict(params, draft_model=a.draft) if needs(method, "draft_model") else params
        n = a.max_new_tokens
        while True:
            tr = run(model, tok, prompt, method, max_new_tokens=n, **kw)
            text = public(tr, where).to_json()
            if len(text.encode()) <= MAX_BYTES or n <= 8:
                break
            n //= 2
        path = out / f"{stem}.json"
        path.write_text(text)
        st = tr.stats()
        print(f"{path.name}: {st['new_tokens']} tokens in {st['steps']} steps "
              f"(compression {st['compression']:.2f}), {len(text) / 1e3:.0f} kB; {teaching_step(tr)['shows']}")
        print("   " + repr(tr.text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
