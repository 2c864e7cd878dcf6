"""Many sequences a step through the one-call CPU step (decodescope::llama_step): continuous batching that is
exact against the engine's one-at-a-time int8 greedy.

Why it is exact: on the int8 kernel a row's Linear outputs do not depend on the other rows of the call, and
the step's attention skips every masked key (a masked column's exp is exactly 0 and is not summed) and scores
each key with one summation order. So if every sequence's keys sit in one shared store and each row's mask
opens only its own sequence's keys (block-diagonal, causal inside a prefill), a row computes bit for bit what
it computes alone. Greedy answers then equal `decoding.engine.runner.generate`'s int8 greedy token for token
(checked by `smollm2_distill.py --check`), while the Linears stream their weights once for all rows.

Cost: every row scores every slot of the store (masked or not), so attention grows as rows x stored keys;
finished sequences' slots are compacted away (a sequence's keys keep their order: the result is unchanged).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from decoding.fast.cpu_step import CpuKV, why_not

MASKED = torch.finfo(torch.float32).min  # the engine's additive mask value (Core._dynamic / masks.step_mask)
WAIT = object()  # a job source's answer while its next job depends on jobs still running


@dataclass(eq=False)
class Job:
    """One sequence: greedy when temperature == 0, else seeded sampling (its own generator: the draw does not
    depend on which other sequences share the step)."""
    key: int
    prompt: list[int]
    max_new: int
    stop: frozenset[int]
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    out: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)  # its keys' store slots, in order (a shared prefix's first)
    shared: int = 0  # how many leading slots are the Batcher's shared prefix
    fed: bool = False  # its prompt went through a step
    gen: torch.Generator | None = None
    tag: object = None  # the caller's (where the result goes)

    def pending(self) -> list[int]:
        """Tokens this step feeds: the prompt (past a shared prefix) first, then the last new token."""
        return self.prompt[self.shared:] if not self.fed else self.out[-1:]


def pick(job: Job, logits: torch.Tensor) -> int:
    """argmax (as the engine's greedy), or a seeded draw from the temperature / top-p warped distribution."""
    if job.temperature <= 0:
        return int(logits.argmax())
    if job.gen is None:
        job.gen = torch.Generator().manual_seed(job.seed)
    probs = torch.softmax(logits.double() / job.temperature, -1)
    if job.top_p < 1.0:
        # the nucleus (tokens before which the sorted mass is < top_p), from the top k only once they hold
        # top_p: the same set as a full sort's, without sorting 49K probabilities a token (~4 ms)
        k = 64
        while True:
            top, idx = probs.topk(min(k, probs.numel()))
            mass = top.cumsum(-1)
            if mass[-1] >= job.top_p or k >= probs.numel():
                break
            k *= 4
        keep = (mass - top) < job.top_p
        probs = torch.zeros_like(probs).scatter_(0, idx[keep], top[keep])
    return int(torch.multinomial(probs, 1, generator=job.gen))


class Batcher:
    """Runs Jobs `width` at a time in one llama_step call a step; new jobs join as others finish."""

    def __init__(self, model, width: int = 8, slack: int = 256, prefix: list[int] | None = None):
        why = why_not(model)
        if why:
            raise RuntimeError(f"the one-call CPU step cannot run this model: {why}")
        self.model, self.width = model, width
        self.slack = slack  # dead slots tolerated beyond the live ones before compact()
        self.kv = CpuKV(model)
        self.used = 0  # slots [0, used) of the store hold keys (live or dead)
        self.live: list[Job] = []
        self.steps = 0
        self.rows = 0
        self.compactions = 0
        # a prompt opening shared by many jobs (the chat template's system turn): its keys are computed once,
        # at positions 0.., and every job that starts with it reads them (the same bits as its own prefill's)
        self.prefix = list(prefix or [])
        self.prefix_slots: list[int] = []

    @torch.inference_mode()
    def compact(self) -> None:
        """Move the live jobs' keys to the front of the store, each job's keys in their order."""
        idx = self.prefix_slots + [s for job in self.live for s in job.slots[job.shared:]]
        if len(idx) == self.used:
            return
        self.compactions += 1
        if idx:
            t = torch.tensor(idx)
            self.kv.store[..., :len(idx), :] = self.kv.store.index_select(-2, t)
        self.prefix_slots = list(range(len(self.prefix_slots)))
        n = len(self.prefix_slots)
        for job in self.live:
            own = len(job.slots) - job.shared
            job.slots = self.prefix_slots[:job.shared] + list(range(n, n + own))
            n += own
        self.used = n

    @torch.inference_mode()
    def _prefill_prefix(self) -> None:
        """The shared prefix's keys, once, in a step of its own (before any job's keys)."""
        m = len(self.prefix)
        mask = torch.full((m, self.used + m), MASKED)
        mask[:, self.used:] = torch.tril(torch.ones(m, m)).log().clamp(min=MASKED)
        self.kv.run(torch.tensor([self.prefix]), torch.arange(m)[None], mask[None, None], 1, [])
        self.prefix_slots = list(range(self.used, self.used + m))
        self.used += m

    def admit(self, job: Job) -> None:
        """A new live job; one that opens with the shared prefix reads its keys instead of computing them."""
        p = len(self.prefix)
        if p and len(job.prompt) > p and job.prompt[:p] == self.prefix:
            if not self.prefix_slots:
                self._prefill_prefix()
            job.slots, job.shared = list(self.prefix_slots), p
        self.live.append(job)

    @torch.inference_mode()
    def step(self) -> None:
        feeds = [job.pending() for job in self.live]
        m = sum(len(f) for f in feeds)
        kvlen = self.used + m
        mask = torch.full((m, kvlen), MASKED)
        ids, pos, last, r = [], [], [], 0
        for job, feed in zip(self.live, feeds):
            base = len(job.slots)
            if job.slots:
                mask[r:r + len(feed), job.slots] = 0
            job.fed = True
            new_slots = list(range(self.used + r, self.used + r + len(feed)))
            mask[r:r + len(feed), new_slots] = torch.tril(torch.ones(len(feed), len(feed))).log().clamp(min=MASKED)
            ids += feed
            pos += range(base, base + len(feed))
            job.slots += new_slots
            r += len(feed)
            last.append(r - 1)
        logits, _ = self.kv.run(torch.tensor([ids]), torch.tensor([pos]), mask[None, None], torch.tensor(last), [])
        self.used = kvlen
        self.steps += 1
        self.rows += m
        for job, row in zip(self.live, logits):
            job.out.append(pick(job, row))

    def run(self, next_job: Callable[[], "Job | object | None"], done: Callable[[Job], None],
            deadline: float | None = None) -> None:
        """Decode the jobs next_job() gives (None: no more; WAIT: none until a running one finishes);
        done(job) as each finishes, in finishing order. Past `deadline` (time.time()) no job starts and the
        running ones are dropped."""
        exhausted = False
        while True:
            if deadline is not None and time.time() > deadline:
                self.live = []
                return
            while not exhausted and len(self.live) < self.width:
                job = next_job()
                if job is None:
                    exhausted = True
                elif job is WAIT:
                    if not self.live:
                        raise RuntimeError("the job source waits on nothing")
                    break
                else:
                    self.admit(job)
            if not self.live:
                return
            self.step()
            finished = [j for j in self.live if len(j.out) >= j.max_new or j.out[-1] in j.stop]
            if finished:
                self.live = [j for j in self.live if j not in finished]
                for j in finished:
                    done(j)
                if self.used > 2 * sum(len(j.slots) for j in self.live) + self.slack:
                    self.compact()
