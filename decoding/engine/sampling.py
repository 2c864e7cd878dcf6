"""Turning logits into the target's sampling distribution (temperature, top-k, top-p), as HF does."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """temperature == 0 means greedy (argmax); otherwise sample from the warped distribution."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def to_dict(self) -> dict:
        return asdict(self)


def warp(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """Probabilities over the vocabulary (last dim), in the order HF applies the warpers:
    temperature, then top-k, then top-p (keeping the smallest set with mass >= top_p)."""
    x = logits.float() / s.temperature
    if s.top_k and s.top_k < x.shape[-1]:
        kth = torch.topk(x, s.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if s.top_p < 1.0:
        sx, si = torch.sort(x, dim=-1, descending=False)
        cum = sx.softmax(-1).cumsum(-1)
        drop_sorted = cum <= (1 - s.top_p)
        drop_sorted[..., -1] = False  # always keep the most likely token
        drop = drop_sorted.scatter(-1, si, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x.softmax(-1)


def make_generator(s: Sampling) -> torch.Generator:
    """A CPU generator whatever the model's device: a seed then draws the same random numbers on CPU and
    GPU, and the few values drawn per step (probabilities moved to the host) cost nothing to copy."""
    g = torch.Generator(device="cpu")
    g.manual_seed(s.seed)
    return g


def sample(probs: torch.Tensor, gen: torch.Generator) -> int:
    """One token from probs (any device) with the CPU generator."""
    return int(torch.multinomial(probs.cpu(), 1, generator=gen).item())


def draw(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws on p's device, no host read: per row of p ([..., V], unnormalised) the first token
    whose cumulative mass exceeds u * the row's mass (u [...], uniforms drawn on the host with the run's
    generator; float64 sums), never a token of zero mass (a row without mass gives token 0)."""
    cum = p.double().cumsum(-1)
    idx = (cum <= u.double().unsqueeze(-1) * cum[..., -1:]).sum(-1)
    last = torch.where(p > 0, torch.arange(p.shape[-1], device=p.device), 0).amax(-1)
    return torch.minimum(idx, last)


def draw_children(q: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of q [R, V], u.shape[1] children drawn without replacement in order (inverse CDF with the
    host's uniforms u [R, w], on q's device): their ids and q probabilities [R, w]. A draw after q's
    tokens ran out has probability 0 (dropped by the host)."""
    r, ids, probs = q, [], []
    for j in range(u.shape[1]):
        t = draw(r, u[:, j])[:, None]
        ids.append(t)
        probs.append(torch.where(r.sum(-1, keepdim=True) > 0, q.gather(1, t), 0.0))
        r = r.scatter(1, t, 0.0)
    return torch.cat(ids, 1), torch.cat(probs, 1)


def uniform(gen: torch.Generator) -> float:
    return float(torch.rand((), generator=gen).item())
