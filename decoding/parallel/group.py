"""The process group a distributed run lives in: torchrun's environment, gloo on CPU and NCCL on CUDA.

Why a module of its own: tensor parallelism (transformers initialises the group itself inside
from_pretrained(tp_plan=...)) and lookahead parallelism (we initialise it) must agree on one group, one
backend and one rank-0 rule for printing and writing files.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def launched() -> bool:
    """True under torchrun (or any launcher that sets the env:// variables)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def backend_for(device: str) -> str:
    """NCCL for CUDA tensors, gloo for CPU ones: the two backends torch.distributed ships for them."""
    return "nccl" if str(device).startswith("cuda") else "gloo"


def ensure(device: str = "cpu") -> tuple[int, int, str]:
    """(rank, world size, backend), initialising the default group from torchrun's env if nobody has.
    Outside a launcher this is one clear error, not a hang waiting for peers."""
    if not dist.is_initialized():
        if not launched():
            raise ValueError("distributed decoding needs a launcher: run it as `torchrun --nproc-per-node P -m "
                             "decoding generate ...` (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are not set)")
        backend = backend_for(device)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), dist.get_backend()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    """Rank 0 prints and writes the trace; the others stay quiet."""
    return rank() == 0


def local_device(device: str | None) -> str:
    """cuda:LOCAL_RANK for a CUDA run under a launcher (one GPU per process), else the device as given."""
    if device and device.startswith("cuda") and ":" not in device and launched():
        return f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    return device or "cpu"


def finish() -> None:
    """Tear the group down at the end of a run, so torchrun sees a clean exit (no "destroy_process_group()
    was not called" warning)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
