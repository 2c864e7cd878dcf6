"""Greedy decoding as a method: one token per step, the baseline every accelerated method must reproduce.

The drafter itself (engine/drafter.py: Greedy) is the smallest drafter and lives with the contract; this file
is its spec, so greedy is listed, explained and coloured like every other method.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..engine.drafter import Greedy
from .spec import MethodSpec


@dataclass
class GreedyParams:
    """Greedy takes no parameters."""


SPEC = MethodSpec(
    name="greedy", drafter=Greedy, params=GreedyParams, label="greedy", colour="#4d4d4d",
    summary="the target's own next token, one per forward (the baseline)",
    explain=(
    "### Greedy decoding\n"
    "One forward pass per new token: the model reads the text so far and picks its most likely next token. It"
    " is the baseline every other method is compared with — in greedy mode and fp32 they all return **exactly"
    " these tokens**, only in fewer steps (in bf16/fp16 a many-token step rounds differently, so a near-tie "
    "can flip: the race reports where).\n"
    "\n"
    "The **mask** view shows what each query token may attend to: here a single row (x0, the last accepted "
    "token) that sees the whole cache."),
    pictures=("mask",), learns=False)
