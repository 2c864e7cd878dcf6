"""`python -m decoding generate --tp-plan auto | --lp` under torchrun: the options checked before anything
loads, and every rank but 0 kept quiet (rank 0 prints the text and lines and writes --json; the others
run the same steps, which their collectives need)."""
from __future__ import annotations

import argparse
import atexit
import os
import sys
import time

from decoding.methods.windows.lookahead import SPEC as LOOKAHEAD  # lookahead parallelism splits this method's window
from .group import launched


def prepare(args: argparse.Namespace) -> None:
    if args.lp_debug and not args.lp:
        raise ValueError("--lp-debug checks lookahead parallelism: add --lp")
    if args.lp and args.tp_plan:
        raise ValueError("--lp keeps the whole model in every process and --tp-plan shards it: choose one")
    if args.lp and args.method != LOOKAHEAD.name:
        raise ValueError("--lp splits lookahead's window over the processes: use --method lookahead")
    if args.lp and args.temperature:
        raise ValueError("--lp runs greedy decoding: drop --temperature")
    if args.lp and args.auto:
        raise ValueError("--auto times pilot runs in one process: give --window/--ngram/--guesses with --lp")
    if args.stream or args.stop or args.compare:
        raise ValueError("--stream, --stop and --compare run in one process: drop them with --tp-plan / --lp")
    if not launched():
        flag = "--lp" if args.lp else "--tp-plan"
        raise ValueError(f"{flag} runs one process per rank: start it as `torchrun --nproc-per-node P -m decoding "
                         f"generate {flag} ...` (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are not set)")
    if os.environ.get("RANK", "0") != "0":
        args.json = None
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the process's lifetime
    atexit.register(_close)


# Under torchrun every rank runs the same checks and refuses alike: rank 0 says it; the others stay quiet this
# long first, so rank 0's exit (status 2) is the failure torchrun names as the root cause, not a SIGTERM'd rank 0
# whose line never printed.
QUIET_RANK_WAIT_S = 3.0


def say_refusal(line: str) -> None:
    """A refusal's one line: printed once, by rank 0 under torchrun (the caller exits with status 2 on every
    rank, no traceback of ours). torchrun's launcher still prints its own failure report (ChildFailedError)
    for any worker that exits non-zero: that is torch's and cannot be switched off from a worker."""
    if launched() and os.environ.get("RANK", "0") != "0":
        time.sleep(QUIET_RANK_WAIT_S)  # torchrun ends this rank once rank 0 has exited
        return
    print(line, file=sys.stderr, flush=True)


def _close() -> None:
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
