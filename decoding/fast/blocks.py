"""Recover the GGUF quantisation blocks behind a float32 weight, exactly or not at all.

Why: a model converted from a GGUF file (the default SmolLM2-135M-Instruct comes from a Q4_1 file) holds
float32 weights that are *exactly* de-quantised blocks (ggml's formats, as gguf-py's `gguf.quants` de-quantises
them in numpy float32):
  Q4_1 / Q5_1   v = fp32(d) * q + fp32(m), q in 0..15 / 0..31, d and m float16, per 32 inputs;
  Q8_0 / Q4_0 / Q5_0   v = fp32(d) * q, q in -127..127 / -8..7 / -16..15, d float16, per 32;
  Q4_K / Q5_K   v = (d * sc) * q - (dmin * m), q in 0..15 / 0..31, per 32 (d, dmin float16, sc, m 6-bit);
  Q6_K   v = (d * sc) * q, q in -32..31, per 16 (d float16, sc int8).
d * q is exact in float32 everywhere except Q6_K's (d * sc) * q, which gguf-py rounds once, as a product.
Stored as blocks the weights take 5-12 bits instead of 32, and a decoding step that is bound by reading weights
gets that much cheaper while computing with bitwise the same weight values (decoding/fast/cpu_gemm.cpp).

Three storages ("kinds") hold them: "q4_1" (4-bit codes, float16 d and m per 32: Q4_1), "q8_0" (int8 codes,
float16 d per 32, which may be negative: Q8_0, Q4_0, Q5_0, whose d * q is the same product) and "k8" (int8 codes
with a float32 scale and offset per 16: w = fma(D, q, M), the K-quants' float32 products d * sc and -dmin * m,
Q5_1, and Q6_K with M = -0.0, for which fma(D, q, -0.0) is the rounded product D * q itself). k8 takes 12 bits a
weight; the fp32 kernel de-quantises it in registers like the others, the int8 kernel sums its codes per half.

recover() accepts a matrix only if every block is reproduced bit for bit; anything else returns None and
keeps its float32 storage (never an approximation). The work is vectorised torch ops over all blocks at
once, a first guess for d and a few neighbouring values for the blocks it misses, after a cheap
screen of the first rows so that ordinary float weights are rejected at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

QK = 32  # ggml's block length (input features) for Q4_1 and Q8_0; the records' length in the kernel
QK16 = 16  # k8's scale block (Q6_K's sub-block; the 32-blocks of Q4_K / Q5_K / Q5_1 are two of them)
OFFSETS = (0, -1, 1, -2, 2, -3, 3, -4, 4)  # float16 ulps tried around the first guess for d (0 first)
ULPS32 = (0, -1, 1, -2, 2)  # float32 ulps tried around a k8 guess (the product's rounding moves it <= 2)
# The largest code of a block is what its scale is guessed from: Q8_0's 127, Q5_0's 16 and Q4_0's 8 (ggml's
# reference quantisers give the largest magnitude exactly that code), Q6_K's 32 / 31, Q4_K's 15, Q5_K's 31; other
# quantisers (an importance matrix) may not, so every other code follows, likeliest first. A wrong guess costs one
# pass over the blocks still missed (plausible() drops it before its neighbours are tried).
Q8_0_DIVISORS = (127, 16, 8, 15, 7, *range(126, 16, -1), *range(14, 8, -1), *range(6, 0, -1))
K8_DIVISORS = (32, 31, 15, 30, 14, 29, 28, 13, 27, 26, 12, 25, 24, 11, 23, 22, 10, 21, 20, 9, 19, 18, 17, 16, 8,
               7, 6, 5, 4, 3, 2, 1, 127, *range(126, 32, -1))  # Q6_K's -32..31 (no offset), Q4_K / Q5_K's 0..15
# / 0..31 (lo .. lo + c); any int8 code after them
RECORD_BYTES = {"q4_1": 320, "q8_0": 544, "k8": 768}  # cpu_gemm.cpp's record per 16 outputs x 32 inputs
SCREEN_ROWS = 4  # rows checked first: a float weight fails here, not after a pass over all of it
NEG_ZERO = -2 ** 31  # the int32 bits of -0.0


@dataclass(frozen=True)
class Blocks:
    """A weight [N, K] as ggml blocks: q [N, K] (q4_1: uint8 0..15, q8_0 and k8: int8), d and m [N, K // 32]
    float16 (m only for q4_1), for k8 [N, K // 16] float32 (w = fma(d, q, m))."""

    kind: str
    q: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor | None = None


def dequantize(b: Blocks) -> torch.Tensor:
    """The float32 weight the blocks stand for, computed as ggml / gguf-py do (d * q exact, one rounding)."""
    qk = QK16 if b.kind == "k8" else QK
    w = b.d.float().repeat_interleave(qk, dim=1) * b.q.float()
    return w + b.m.float().repeat_interleave(qk, dim=1) if b.m is not None else w


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


def stored_bytes(kind: str, n: int, k: int) -> int:
    """Bytes the CPU kernel streams for an [n, k] weight stored as `kind` (blocks or "fp32" panels of 16 rows)."""
    panels = -(-n // 16)
    return panels * 16 * k * 4 if kind == "fp32" else panels * (k // QK) * RECORD_BYTES[kind]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per block: every value bitwise equal (so -0.0 != 0.0 and a NaN never passes)."""
    return (a.view(torch.int32) == b.view(torch.int32)).all(dim=1)


# The check runs on the integer codes as they will be stored (a float code of -0.0 would pass a check its
# stored 0 fails).
def _q4_1_codes(v: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.where(d[:, None] > 0, ((v - m[:, None]) / d[:, None]).round(), 0.0).clamp_(0, 15).to(torch.uint8)
    return q, same_bits(d[:, None] * q + m[:, None], v)


def _q8_0_codes(v: torch.Tensor, d: torch.Tensor, m: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.where(d[:, None] != 0, (v / d[:, None]).round(), 0.0).clamp_(-127, 127).to(torch.int8)
    return q, same_bits(d[:, None] * q, v)  # d may be negative (Q4_0 / Q5_0): its zeros are -0.0


def plausible(v: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Per block: v / d is within 1/8 of whole numbers, as it is when d is within a few ulps of the block's
    scale; a wrong guess (the wrong largest code) is dropped at once instead of trying its neighbours."""
    r = v / torch.where(d == 0, 1.0, d)[:, None]
    return (r - r.round()).abs().amax(dim=1) < 0.125


def _fit(v: torch.Tensor, guess: torch.Tensor, m: torch.Tensor | None, codes: Callable,
         neg: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """d (float16 [B]), q (integer codes [B, 32]) and ok [B]: the blocks of v [B, 32] they reproduce. Tries
    the float16 rounding of `guess` first, then its float16 neighbours on the blocks still missed; d is negated
    where `neg` says (a block holding -0.0)."""
    bits = guess.clamp(min=0).to(torch.float16).view(torch.int16).to(torch.int32).clamp_(0, 0x7BFF)  # finite

    def half(b: torch.Tensor, where: torch.Tensor | slice) -> torch.Tensor:
        d = b.to(torch.int16).view(torch.float16)
        return d if neg is None else torch.where(neg[where], -d, d)
    d = half(bits, slice(None))
    q, done = codes(v, d.float(), m)
    todo = (~done & plausible(v if m is None else v - m[:, None], d.float())).nonzero().squeeze(1)
    for off in OFFSETS[1:]:
        if todo.numel() == 0:
            break
        cand = half((bits[todo] + off).clamp_(0, 0x7BFF), todo)
        qq, ok = codes(v[todo], cand.float(), None if m is None else m[todo])
        d[todo[ok]], q[todo[ok]], done[todo[ok]] = cand[ok], qq[ok], True
        todo = todo[~ok]
    return d, q, done


def _q4_1(w: torch.Tensor) -> Blocks | None:
    n, k = w.shape
    v = w.reshape(-1, QK)
    lo, hi = torch.aminmax(v, dim=1)
    m16 = lo.to(torch.float16)
    if not torch.equal(m16.float().view(torch.int32), lo.view(torch.int32)):
        return None  # the minimum (q = 0) is m itself, a float16
    d, q, ok = _fit(v, (hi - lo) / 15, lo, _q4_1_codes)
    if not bool(ok.all()):
        return None
    return Blocks("q4_1", q.reshape(n, k), d.reshape(n, k // QK), m16.reshape(n, k // QK))


def negative(v: torch.Tensor) -> torch.Tensor:
    """Per block: it holds a -0.0, which only a negative scale times a zero code gives (gguf-py's Q4_0 / Q5_0 /
    Q6_K de-quantise d * 0 with d < 0 to -0.0), so its scale must be negative."""
    return (v.view(torch.int32) == NEG_ZERO).any(dim=1)


def zeros(v: torch.Tensor) -> torch.Tensor:
    """Per block: every value is a zero of either sign. Such a block is stored as zero codes times d = 0 (+0.0
    weights): a zero weight of either sign leaves every FMA chain of the kernels bitwise unchanged (an
    accumulator started at +0.0 never becomes -0.0), and a negative d of 0 (Q6_K's d * sc with sc = 0) makes
    zeros of both signs, which no code can reproduce."""
    return (v.view(torch.int32) & 0x7FFFFFFF == 0).all(dim=1)


def _q8_0(w: torch.Tensor) -> Blocks | None:
    """Q8_0, and Q4_0 / Q5_0 (d * q with q in -8..7 / -16..15, d float16 of either sign): int8 codes, d float16."""
    n, k = w.shape
    v = w.reshape(-1, QK)
    amax, neg = v.abs().amax(dim=1), negative(v)
    d = torch.zeros(v.shape[0], dtype=torch.float16)
    q = torch.zeros(v.shape, dtype=torch.int8)
    todo = (~zeros(v)).nonzero().squeeze(1)
    if todo.numel() and not _q8_0_could(v[todo[0]], bool(neg[todo[0]])):
        return None  # its first block fits no guess (see _q8_0_could)
    for div in Q8_0_DIVISORS:
        if todo.numel() == 0:
            break
        fit = _fit(v[todo], amax[todo] / div, None, _q8_0_codes, neg[todo])
        d[todo[fit[2]]], q[todo[fit[2]]] = fit[0][fit[2]], fit[1][fit[2]]
        todo = todo[~fit[2]]
    if todo.numel():
        return None
    return Blocks("q8_0", q.reshape(n, k), d.reshape(n, k // QK))


def _k8_codes(v: torch.Tensor, d: torch.Tensor, lo: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The int8 codes of blocks v [B, 16] at scales d [B] (sign applied) and whether they reproduce v bitwise:
    lo None: w = d * q + -0.0 (one rounding, as gguf-py's Q6_K); else w = d * q + lo with d * q exact (Q4_K, Q5_K,
    Q5_1). Checked on the codes as stored (a float code of -0.0 would pass a check its stored 0 fails)."""
    d2 = d[:, None]
    if lo is None:
        q = torch.where(d2 != 0, (v / d2).round(), 0.0).clamp_(-128, 127).to(torch.int8)
        return q, same_bits(d2 * q.float() + -0.0, v)
    q = torch.where(d2 > 0, ((v - lo[:, None]) / d2).round(), 0.0).clamp_(0, 127).to(torch.int8)
    p = d2 * q.float()
    return q, (p.double() == d2.double() * q.double()).all(dim=1) & same_bits(p + lo[:, None], v)


def _k8_fit(v: torch.Tensor, base: torch.Tensor, lo: torch.Tensor | None,
            neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """D, M (float32 [B]), q (int8 [B, 16]) and ok [B] for blocks v [B, 16] with w = fma(D, q, M): lo None: no
    offset (M = -0.0; D * q rounded once, as gguf-py's Q6_K), D of the sign `neg` says; else M = lo, the block's
    minimum (code 0), D >= 0 and D * q exact (gguf-py's Q4_K / Q5_K / Q5_1 round d * q - m once, as fma does).
    D is guessed as base / c for each c of K8_DIVISORS and the float32 values up to 2 ulps around it."""
    B = v.shape[0]
    D, M = torch.zeros(B), torch.full((B,), -0.0) if lo is None else lo.clone()
    q = torch.zeros(v.shape, dtype=torch.int8)
    ok = torch.zeros(B, dtype=torch.bool)
    for c in K8_DIVISORS:
        todo = (~ok).nonzero().squeeze(1)
        if todo.numel() == 0:
            break
        left, gbits = todo, (base[todo] / c).view(torch.int32)
        for off in ULPS32:
            if left.numel() == 0:
                break
            d = (gbits + off).clamp_(0, 0x7F7FFFFF).view(torch.float32)  # finite, >= 0
            vv = v[left]
            if lo is None:
                d = torch.where(neg[left], -d, d)
            qq, good = _k8_codes(vv, d, None if lo is None else lo[left])
            hit = left[good]
            D[hit], q[hit], ok[hit] = d[good], qq[good], True
            keep = ~good & plausible(vv if lo is None else vv - lo[left, None], d) if off == 0 else ~good
            left, gbits = left[keep], gbits[keep]
    return D, M, q, ok


# One block against every guess at once (the fits above try them one after another, over many blocks): a float
# weight's first block fails here in a millisecond. Same arithmetic as _fit / _k8_fit, without plausible()'s
# pruning, so a block they could fit always passes: a refusal here is theirs, only sooner.
def _candidates(bits: torch.Tensor, offsets: tuple[int, ...], top: int) -> torch.Tensor:
    return (bits[:, None] + torch.tensor(offsets, dtype=torch.int32)[None, :]).clamp_(0, top).reshape(-1)


def _q8_0_could(b: torch.Tensor, neg: bool) -> bool:
    guess = b.abs().amax() / torch.tensor(Q8_0_DIVISORS, dtype=torch.float32)
    bits = guess.clamp(min=0).to(torch.float16).view(torch.int16).to(torch.int32).clamp_(0, 0x7BFF)
    d = _candidates(bits, OFFSETS, 0x7BFF).to(torch.int16).view(torch.float16)
    d = (-d if neg else d).float()
    return bool(_q8_0_codes(b.expand(len(d), -1), d, None)[1].any())


def _k8_could(b: torch.Tensor, neg: bool) -> bool:
    c = torch.tensor(K8_DIVISORS, dtype=torch.float32)
    lo, hi = torch.aminmax(b)
    for base, offset in ((b.abs().amax(), False), (hi - lo, True)):
        d = _candidates((base / c).view(torch.int32), ULPS32, 0x7F7FFFFF).view(torch.float32)
        d = -d if neg and not offset else d
        if bool(_k8_codes(b.expand(len(d), -1), d, lo.expand(len(d)) if offset else None)[1].any()):
            return True
    return False


def _k8(w: torch.Tensor) -> Blocks | None:
    """K-quants (Q4_K, Q5_K, Q6_K), Q5_1 and any other w = fma(D, q, M) per 16 with float32 D and M."""
    n, k = w.shape
    if k % QK:
        return None
    v = w.reshape(-1, QK16)
    neg = negative(v)
    lo, hi = torch.aminmax(v, dim=1)
    D, M = torch.zeros(v.shape[0]), torch.zeros(v.shape[0])
    q = torch.zeros(v.shape, dtype=torch.int8)
    todo = (~zeros(v)).nonzero().squeeze(1)
    modes = [None, lo]  # no offset (Q6_K) or offset (Q4_K, Q5_K, Q5_1): the one the first blocks fit first
    first = todo[:64]
    if todo.numel() and not _k8_could(v[todo[0]], bool(neg[todo[0]])):
        return None  # its first block fits no guess in either mode: the pass below would end so, after ~1,300 tries
    if not bool(_k8_fit(v[first], v[first].abs().amax(dim=1), None, neg[first])[3].all()):
        modes.reverse()
    for mode in modes:
        if todo.numel() == 0:
            break
        vv = v[todo]
        base = vv.abs().amax(dim=1) if mode is None else hi[todo] - lo[todo]
        d2, m2, q2, ok2 = _k8_fit(vv, base, None if mode is None else lo[todo], neg[todo])
        hit = todo[ok2]
        D[hit], M[hit], q[hit] = d2[ok2], m2[ok2], q2[ok2]
        todo = todo[~ok2]
    if todo.numel():
        return None
    return Blocks("k8", q.reshape(n, k), D.reshape(n, k // QK16), M.reshape(n, k // QK16))


@torch.no_grad()
def recover(w: torch.Tensor) -> Blocks | None:
    """The Q4_1 (preferred: smallest), Q8_0 or k8 blocks that reproduce the float32 weight w [N, K] bitwise, or
    None (w is not a de-quantised ggml weight, K is no multiple of 32, or w is no 2D float32 CPU tensor)."""
    if (w.dim() != 2 or w.dtype != torch.float32 or w.device.type != "cpu" or w.shape[1] % QK
            or w.numel() == 0):
        return None
    w = w.detach().contiguous()
    for fmt in (_q4_1, _q8_0, _k8):
        if fmt(w[:SCREEN_ROWS]) is not None and (b := fmt(w)) is not None:
            return b
    return None
