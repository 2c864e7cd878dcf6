"""Recover the GGUF quantisation blocks (Q4_1, Q8_0) behind a float32 weight, exactly or not at all.

Why: a model converted from a GGUF file (the default SmolLM2-135M-Instruct comes from a Q4_1 file) holds
float32 weights that are *exactly* de-quantised blocks of 32 consecutive input features: Q4_1 gives
v = fp32(d) * q + fp32(m) with q in 0..15 and d, m float16; Q8_0 gives v = fp32(d) * q with q int8 in
-127..127 (ggml's formats, as gguf-py 0.x de-quantises them in numpy float32). d * q is exact in float32
(11 + 8 significant bits), so fma(d, q, m) equals that float32 sum bitwise. Stored as blocks the weights
take 5 / 8.5 bits instead of 32, and a decoding step that is bound by reading weights gets that much cheaper
while computing with bitwise the same weight values (decoding/fast/cpu_gemm.cpp).

recover() accepts a matrix only if every block is reproduced bit for bit; anything else returns None and
keeps its float32 storage (never an approximation). The work is vectorised torch ops over all blocks at
once, a first guess for d and a few neighbouring float16 values for the blocks it misses, after a cheap
screen of the first rows so that ordinary float weights are rejected at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

QK = 32  # ggml's block length (input features) for Q4_1 and Q8_0
OFFSETS = (0, -1, 1, -2, 2, -3, 3, -4, 4)  # float16 ulps tried around the first guess for d (0 first)
SCREEN_ROWS = 4  # rows checked first: a float weight fails here, not after a pass over all of it


@dataclass(frozen=True)
class Blocks:
    """A weight [N, K] as ggml blocks: q [N, K] (q4_1: uint8 0..15, q8_0: int8), d and m [N, K // 32]
    float16 (m only for q4_1)."""

    kind: str
    q: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor | None = None


def dequantize(b: Blocks) -> torch.Tensor:
    """The float32 weight the blocks stand for, computed as ggml / gguf-py do (d * q exact, one rounding)."""
    w = b.d.float().repeat_interleave(QK, dim=1) * b.q.float()
    return w + b.m.float().repeat_interleave(QK, dim=1) if b.kind == "q4_1" else w


def quantize(w: torch.Tensor, kind: str) -> Blocks:
    """llama.cpp's reference Q4_1 / Q8_0 quantisation (quantize_row_q4_1_ref / q8_0_ref) of a float weight
    [N, K] (K a multiple of 32). Used for weights whose values need not be kept: a drafter's (its drafts
    are verified by the exact target), and by the tests to make weights that are exactly blocks."""
    n, k = w.shape
    if k % QK:
        raise ValueError(f"quantize: {k} inputs are not whole blocks of {QK}")
    v = w.detach().float().reshape(-1, QK)
    if kind == "q8_0":
        d = v.abs().amax(dim=1) / 127
        q = torch.where(d[:, None] > 0, v / d[:, None], 0.0).round()
        return Blocks("q8_0", q.to(torch.int8).reshape(n, k), d.half().reshape(n, -1))
    if kind != "q4_1":
        raise ValueError(f"quantize: kind is q4_1 or q8_0, got {kind!r}")
    lo, hi = torch.aminmax(v, dim=1)
    d = (hi - lo) / 15
    q = torch.where(d[:, None] > 0, (v - lo[:, None]) / d[:, None], 0.0)
    q = (q + 0.5).to(torch.int32).clamp(max=15)  # ggml: MIN(15, (int8_t)(x + 0.5f))
    return Blocks("q4_1", q.to(torch.uint8).reshape(n, k), d.half().reshape(n, -1), lo.half().reshape(n, -1))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per block: every value bitwise equal (so -0.0 != 0.0 and a NaN never passes)."""
    return (a.view(torch.int32) == b.view(torch.int32)).all(dim=1)


# The check runs on the integer codes as they will be stored (a float code of -0.0 would pass a check its
# stored 0 fails).
def _q4_1_codes(v: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.where(d[:, None] > 0, ((v - m[:, None]) / d[:, None]).round(), 0.0).clamp_(0, 15).to(torch.uint8)
    return q, same_bits(d[:, None] * q + m[:, None], v)


def _q8_0_codes(v: torch.Tensor, d: torch.Tensor, m: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.where(d[:, None] > 0, (v / d[:, None]).round(), 0.0).clamp_(-127, 127).to(torch.int8)
    return q, same_bits(d[:, None] * q, v)


def _fit(v: torch.Tensor, guess: torch.Tensor, m: torch.Tensor | None,
         codes: Callable) -> tuple[torch.Tensor, torch.Tensor] | None:
    """d (float16 [B]) and q (integer codes [B, 32]) reproducing every block of v [B, 32], or None. Tries
    the float16 rounding of `guess` first, then its float16 neighbours on the blocks still missed."""
    bits = guess.clamp(min=0).to(torch.float16).view(torch.int16).to(torch.int32).clamp_(0, 0x7BFF)  # finite
    d = bits.to(torch.int16).view(torch.float16)
    q, ok = codes(v, d.float(), m)
    todo = (~ok).nonzero().squeeze(1)
    for off in OFFSETS[1:]:
        if todo.numel() == 0:
            break
        cand = (bits[todo] + off).clamp_(0, 0x7BFF).to(torch.int16).view(torch.float16)
        qq, ok = codes(v[todo], cand.float(), None if m is None else m[todo])
        d[todo[ok]], q[todo[ok]] = cand[ok], qq[ok]
        todo = todo[~ok]
    return (d, q) if todo.numel() == 0 else None


def _q4_1(w: torch.Tensor) -> Blocks | None:
    n, k = w.shape
    v = w.reshape(-1, QK)
    lo, hi = torch.aminmax(v, dim=1)
    m16 = lo.to(torch.float16)
    if not torch.equal(m16.float().view(torch.int32), lo.view(torch.int32)):
        return None  # the minimum (q = 0) is m itself, a float16
    fit = _fit(v, (hi - lo) / 15, lo, _q4_1_codes)
    if fit is None:
        return None
    d, q = fit
    return Blocks("q4_1", q.reshape(n, k), d.reshape(n, k // QK), m16.reshape(n, k // QK))


def _q8_0(w: torch.Tensor) -> Blocks | None:
    n, k = w.shape
    v = w.reshape(-1, QK)
    fit = _fit(v, v.abs().amax(dim=1) / 127, None, _q8_0_codes)
    if fit is None:
        return None
    d, q = fit
    return Blocks("q8_0", q.reshape(n, k), d.reshape(n, k // QK))


@torch.no_grad()
def recover(w: torch.Tensor) -> Blocks | None:
    """The Q4_1 (preferred: smaller) or Q8_0 blocks that reproduce the float32 weight w [N, K] bitwise, or
    None (w is not a de-quantised ggml weight, K is no multiple of 32, or w is no 2D float32 CPU tensor)."""
    if (w.dim() != 2 or w.dtype != torch.float32 or w.device.type != "cpu" or w.shape[1] % QK
            or w.numel() == 0):
        return None
    w = w.detach().contiguous()
    for fmt in (_q4_1, _q8_0):
        if fmt(w[:SCREEN_ROWS]) is not None and (b := fmt(w)) is not None:
            return b
    return None
