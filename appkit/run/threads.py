"""The CPU thread count, picked by measurement like the tuners pick W/N/G, and each run's speed against greedy.

Why: on a 2-core machine a second thread is worth a little on a quiet machine and costs many times over when
another process is busy, so a rule cannot know; greedy timed at each count, once per model, does. A run's
tokens/s alone says little, so every run says how it compares with greedy measured on the same prompt and
settings (step times and their spread: speed_claim.py), or that greedy was not measured.
"""
from __future__ import annotations

from . import presets
from .method_fields import is_baseline
from .speed_claim import busy_words, claim, decode_ms

CURRENT: list[int] = []  # the CPU thread count measured for the model of the event now running


def needs_thread_timing(model) -> bool:
    """A CPU model whose thread count the engine's rule leaves to torch (decoding.models.set_cpu_threads gives
    small models one thread on <= 2 cores, measured; anything else gets measured here, once per model)."""
    import os
    p = next(model.parameters())
    return (p.device.type == "cpu" and getattr(model, "decodescope_threads", None) is None
            and not ((os.cpu_count() or 1) <= 2 and sum(x.numel() for x in model.parameters()) < 1e8))


def threads_for(model, tok) -> dict | None:
    """The model's measured thread count ({"threads", "tokens_per_s"}; measured now if not yet), set for
    this event; None where nothing was measured (GPU, or a small model on a small machine: one thread)."""
    import torch
    from decoding.tuning.tune import tune_threads
    if needs_thread_timing(model):
        model.decodescope_threads = tune_threads(model, tok, presets.pilots(tok)[:1])
    r = getattr(model, "decodescope_threads", None)
    CURRENT[:] = [r["threads"]] if r else []
    if r:
        torch.set_num_threads(r["threads"])
    return r


def threads_note(r: dict | None) -> str:
    """'2 CPU threads (measured: 1 → 21.0, 2 → 30.5 tokens/s greedy)', or '' where nothing was measured."""
    if not r or not r.get("tokens_per_s"):
        return ""
    rates = ", ".join(f"{n} → {v:.1f}" for n, v in sorted(r["tokens_per_s"].items()))
    return f"{r['threads']} CPU thread{'s' if r['threads'] > 1 else ''} (measured: {rates} tokens/s greedy)"


def speed_note(trace, greedy_ms: list[float] | None, busy: str = "") -> str:
    """The run's speed against greedy's on the same prompt, settings and model, from both runs' measured step
    times with their spread (appkit/run/speed_claim.py), or says it was not measured."""
    if is_baseline(trace.method):
        return ""
    return claim(trace, greedy_ms, busy)


def run_key(p) -> tuple:
    """What makes two runs' speeds comparable: the model as loaded, the thread count, prompt and settings."""
    import torch
    param = next(p.model.parameters())
    return (id(p.model), str(param.device), str(param.dtype), torch.get_num_threads(), p.prompt, p.max_new,
            repr(p.sampling))


def speed_of(greedy, session: str | None, key: tuple, tr, done: bool) -> str:
    """A finished greedy run records its decode step times under `key` in this session's table
    (appkit/public/per_session.py: another visitor's table would tell whether someone ran this prompt); any
    other run gets its speed against them."""
    if done and is_baseline(tr.method) and decode_ms(tr):
        greedy.put(session, key, {"ms": decode_ms(tr), "measure": measure_of(tr)})
    g = greedy.get(session, key)
    if isinstance(g, list):  # a table filled before runs carried their measure
        g = {"ms": g, "measure": None}
    return speed_note(tr, g["ms"] if g else None, busy_words(measure_of(tr), g["measure"] if g else None))


def measure_of(tr) -> dict | None:
    """The run's own measure (speed_claim.timed: wall, decoding thread's CPU time, load), where its runner
    recorded one as the trace's `measure`; None for a run timed by the clock alone."""
    m = getattr(tr, "measure", None)
    return m if isinstance(m, dict) else None
