"""Mean accepted tokens per decode step of any method on a prompt set, one greedy run per prompt (acceptance
does not depend on machine load, so this needs no quiet machine and no interleaving; bench.py times methods).

    python bench/methods/acceptance.py retrieval datastore=assets/datastore/smollm2 prompts=heldout_chat,heldout_code
    python bench/methods/acceptance.py self_speculative depth=8 stop=0.5 --max-new-tokens 128

k=v: the method's options (decoding.run's keyword arguments: numbers are read as numbers); model=M (default:
the default model) and prompts=SETS (bench/prompts sets, comma-separated, default heldout_chat; chat requests
get the chat template). Retrieval's suffix cache starts empty and keeps the earlier prompts' runs, as one app
process would (SuffixDecoding's global tree); each prompt runs once, so no run sees its own earlier output.
Prints one line per prompt set: mean accepted per step (vLLM's mean acceptance length), steps, exact yes/no.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from decoding import load, run  # noqa: E402
from decoding.api import eos_of  # noqa: E402
from decoding.exactness import measure  # noqa: E402
from decoding.methods.retrieve.suffix_cache import HISTORY  # noqa: E402
from heads_acceptance import _value as value  # noqa: E402 - the same k=v reading as the heads script


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("method")
    ap.add_argument("options", nargs="*", metavar="k=v")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-check", action="store_true", help="skip the HF greedy comparison (faster)")
    args = ap.parse_args()
    opts = {k: value(v) for k, v in (o.split("=", 1) for o in args.options)}
    torch.set_num_threads(1)
    name = opts.pop("model", "default")
    model, tok = load(None if name == "default" else name)
    from bench import load_prompts
    HISTORY.clear()
    for group in str(opts.pop("prompts", "heldout_chat")).split(","):
        acc = steps = 0
        exact, t0 = True, time.time()
        for p in load_prompts([group], tok):
            tr = run(model, tok, p["prompt"], args.method, max_new_tokens=args.max_new_tokens, **opts)
            dec = [s for s in tr.steps if s.kind == "decode"]
            acc += sum(len(s.accepted) for s in dec)
            steps += len(dec)
            if not args.no_check:
                exact &= measure(model, tr.prompt_ids, tr.output_ids, args.max_new_tokens,
                                 eos_of(model, tok))["identical"]
        print(f"{args.method} {opts or ''} on {group}: mean accepted/step {acc / max(steps, 1):.3f} over {steps} "
              f"steps, exact {'-' if args.no_check else 'yes' if exact else 'NO'} ({time.time() - t0:.0f} s)",
              flush=True)


if __name__ == "__main__":
    main()
