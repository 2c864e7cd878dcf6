"""One pilot-run tuner per search strategy, chosen in one place (TUNERS, keyed by the strategy a method's
spec names in spec.tuner; tune()): what `--auto`, the app's Tune button and auto preset, and the benches call.

Lookahead prices steps from the device's latency curve: the paper's GPU defaults (N=5, W=15, G=15: 120
query tokens per step) are 2x slower than greedy on a CPU, where a 16-token step already costs ~1.75
one-token steps. Speed = compression / step latency, and both are measurable: the curve (engine timing)
gives the cost of a step of q tokens, and short pilot runs on the user's own prompts give each
configuration's compression. Several pilot prompts make the choice less hostage to one prompt (a single
pilot once picked a config at 1.11x while fixed ones reached 1.33x).

Speculative shapes, heads budgets and Jacobi blocks are timed on the wall clock instead (time_pilots): a
speculative step costs the target's forward plus up to K sequential draft forwards, a heads step the
heads' own work, so the target's curve alone mispredicts them; a pilot's own time counts everything.
Every setting runs on every pilot prompt `reps` times, interleaved, and keeps its fastest repetition (on a
shared machine noise only ever adds time).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

# Each pilot run is held in `pause()` (default: nothing): a shared server hands the model to other visitors
# between pilot runs, so one Tune is many short turns, not one long one.
Pause = Callable[[], ContextManager]

from .api import HEADS_METHODS, make_drafter, run
from .engine.timing import interpolate, latency_curve, monotone  # noqa: F401 (the tuners' curve helpers)
from .methods.registry import BASELINE
from .models import fitting_sizes, max_positions


def _pilots(prompt) -> list:
    """One prompt (text or ids) or a list of texts -> the list of pilot prompts."""
    return prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else [prompt]


def time_pilots(model, tokenizer, prompts: list, runs: dict[str, tuple[str, dict]], *, pilot_tokens: int,
                reps: int, pause: Pause = nullcontext) -> dict[str, dict]:
    """Run every named (method, params) on every pilot prompt, `reps` rounds interleaved; per name: the
    fastest round's seconds, its new tokens and target forwards."""
    best = {name: float("inf") for name in runs}
    counts: dict[str, tuple[int, int]] = {}
    for _ in range(max(reps, 1)):
        for name, (method, params) in runs.items():
            seconds, tokens, steps = 0.0, 0, 0
            for p in prompts:
                with pause():  # the wait for a turn is not timed
                    t0 = time.perf_counter()
                    st = run(model, tokenizer, p, method, max_new_tokens=pilot_tokens, trace=False, **params).stats()
                    seconds += time.perf_counter() - t0
                tokens, steps = tokens + st["new_tokens"], steps + st["steps"]
            best[name] = min(best[name], seconds)
            counts[name] = (tokens, steps)
    return {n: {"seconds": best[n], "tokens": counts[n][0], "steps": counts[n][1],
                "tokens_per_s": counts[n][0] / best[n], "compression": counts[n][0] / max(counts[n][1], 1)}
            for n in runs}


# ---- lookahead: W, N, G from the latency curve and pilot compression ----

# (W, N, G): from a near-greedy step to the paper's GPU setting.
GRID = [(1, 3, 1), (1, 3, 2), (1, 4, 1), (1, 4, 2), (1, 5, 2), (2, 3, 2), (2, 4, 2), (2, 5, 2), (3, 4, 3),
        (5, 4, 5), (3, 5, 3), (5, 5, 5), (7, 5, 7), (10, 5, 10), (15, 5, 15), (5, 7, 5), (10, 7, 10)]


def autotune(model, tokenizer, prompt: str | list[int] | list[str], *, pilot_tokens: int = 48, grid=GRID,
             curve: dict[int, float] | None = None, kv_len: int = 256, pause: Pause = nullcontext,
             **params) -> dict[str, Any]:
    """Measure (or take) the latency curve, pilot every grid config on the prompt(s), rank by predicted speed.
    params: other lookahead parameters, fixed (e.g. text_span).

    Returns {"best": {window, ngram, guesses}, "curve": {q: ms}, "ranking": [...]} — plain data."""
    pilots = _pilots(prompt)
    if curve is None:
        sizes, kv = fitting_sizes(model.config, sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128}), kv_len)
        with pause():
            curve = latency_curve(model, kv, sizes, reps=5)[2]
    curve = monotone(curve)
    base = interpolate(curve, 1)
    limit = max_positions(model.config)
    longest = max(len(p) if isinstance(p, list) else len(tokenizer(p)["input_ids"]) for p in pilots)
    ranking = []
    for W, N, G in grid:
        drafter = make_drafter("lookahead", window=W, ngram=N, guesses=G, **params)
        if limit is not None and longest + pilot_tokens + drafter.max_depth() > limit:
            continue  # this shape's window would reach past the model's positions
        tokens, decode = 0, []
        for p in pilots:
            with pause():
                tr = run(model, tokenizer, p, "lookahead", max_new_tokens=pilot_tokens, trace=False,
                         drafter=make_drafter("lookahead", window=W, ngram=N, guesses=G, **params))
            tokens += max(len(tr.output_ids) - 1, 0)  # decode steps only: the prefill's token is shared
            decode += tr.steps[1:]
        decode = decode or tr.steps
        q_mean = sum(s.n_query for s in decode) / len(decode)  # G' < G when the pool has fewer candidates
        ms = sum(interpolate(curve, s.n_query) for s in decode) / len(decode)
        compression = max(tokens, 1) / len(decode)
        ranking.append({"window": W, "ngram": N, "guesses": G, "query_tokens": q_mean,
                        "compression": compression, "step_ms": ms,
                        "predicted_speedup": compression * base / ms})
    if not ranking:
        raise ValueError(f"the prompt ({longest} tokens) leaves no room for a lookahead pilot within the model's "
                         f"{limit} positions; shorten it or set --window/--ngram/--guesses yourself")
    ranking.sort(key=lambda r: -r["predicted_speedup"])
    best = {k: ranking[0][k] for k in ("window", "ngram", "guesses")}
    return {"best": best, "curve": {str(k): v for k, v in sorted(curve.items())}, "ranking": ranking}


# ---- speculative decoding: the draft shape ----

SHAPES: list[dict] = [dict(draft_tokens=2), dict(draft_tokens=3), dict(draft_tokens=4), dict(draft_tokens=6),
                      dict(tree=[2, 1, 1]), dict(tree=[4, 2]), dict(tree=[3, 2, 1]),
                      dict(draft_tokens=6, staged=True), dict(tree=[2, 1, 1, 1, 1], staged=True)]


def label(shape: dict) -> str:
    """'chain K4', 'tree 3,2,1', 'staged chain K6' ... for tables and CLI messages."""
    kind = f"tree {','.join(map(str, shape['tree']))}" if "tree" in shape else f"chain K{shape.get('draft_tokens')}"
    return ("staged " if shape.get("staged") else "") + kind


def autotune_speculative(target, draft, tokenizer, prompt: str | list[int] | list[str], *, pilot_tokens: int = 32,
                         shapes: list[dict] = SHAPES, reps: int = 2, pause: Pause = nullcontext) -> dict[str, Any]:
    """Time greedy and each shape on the pilot prompt(s); rank shapes by speed-up over greedy.

    Returns {"best": shape kwargs, "ranking": [...], "greedy_tokens_per_s": float} — plain data."""
    runs = {BASELINE: (BASELINE, {})} | {label(s): ("speculative", dict(draft_model=draft, **s)) for s in shapes}
    t = time_pilots(target, tokenizer, _pilots(prompt), runs, pilot_tokens=pilot_tokens, reps=reps, pause=pause)
    greedy_s = t[BASELINE]["seconds"]
    ranking = [{"label": label(s), "shape": s, "tokens_per_s": t[label(s)]["tokens_per_s"],
                "compression": t[label(s)]["compression"], "speedup": greedy_s / t[label(s)]["seconds"]}
               for s in shapes]
    ranking.sort(key=lambda r: -r["speedup"])
    return {"best": dict(ranking[0]["shape"]), "ranking": ranking, "greedy_tokens_per_s": t[BASELINE]["tokens_per_s"]}


# ---- Medusa / EAGLE: the tree budget and the confidence cut ----

BUDGETS = (4, 8, 16, 24)
CUTS = (0.0, 0.1)  # the confidence cut: nodes whose path probability is below it are not verified


def autotune_heads(model, tokenizer, prompt: str | list[int] | list[str], method: str, heads: str, *,
                   pilot_tokens: int = 32, budgets=BUDGETS, cuts=CUTS, reps: int = 2,
                   pause: Pause = nullcontext) -> dict[str, Any]:
    """Rank tree budgets x confidence cuts by measured tokens/s on the pilot prompt(s). A bigger tree
    accepts a few more tokens per step but costs a wider target forward and, for EAGLE, more head work;
    the cut paid on the 2-core CPU (bench/eagle_shapes.py) and should not on a GPU, so it is measured too.

    Returns {"best": budget, "params": the winner's drafter parameters, "ranking": [{"budget", "confidence",
    "compression", "tokens_per_s"}, ...]} — plain data."""
    if method not in HEADS_METHODS:
        raise ValueError(f"autotune_heads tunes {' and '.join(HEADS_METHODS)}, not {method!r}")
    settings = [(b, c) for b in budgets for c in cuts]
    runs = {f"{b}|{c}": (method, dict(heads=heads, budget=b, confidence=c)) for b, c in settings}
    t = time_pilots(model, tokenizer, _pilots(prompt), runs, pilot_tokens=pilot_tokens, reps=reps, pause=pause)
    ranking = [{"budget": b, "confidence": c, "compression": t[f"{b}|{c}"]["compression"],
                "tokens_per_s": t[f"{b}|{c}"]["tokens_per_s"]} for b, c in settings]
    ranking.sort(key=lambda r: -r["tokens_per_s"])
    top = ranking[0]
    return {"best": top["budget"], "params": {"budget": top["budget"], "confidence": top["confidence"]},
            "ranking": ranking}


def heads_label(r: dict) -> str:
    """'budget 8' or 'budget 8, cut 0.1' (one ranking row or parameter set)."""
    c = r.get("confidence")
    return f"budget {r['budget']}" + (f", cut {c:g}" if c else "")


# ---- plain Jacobi: the block size ----

BLOCKS = (1, 2, 4, 8, 16)


def autotune_block(model, tokenizer, prompt: str | list[int], *, pilot_tokens: int = 32, blocks=BLOCKS,
                   reps: int = 2, pause: Pause = nullcontext) -> dict:
    """The block size with the best measured tokens/s on this prompt and device. Why a tuner at all:
    compression hardly grows with K on real models (a guess made from a wrong left context is rarely
    right) while a K-token step costs more than a 1-token step, so the best K is usually small, and how
    small depends on the device's latency curve.
    Returns {"best": K, "ranking": [{"block", "compression", "tokens_per_s"}, ...]}."""
    runs = {str(k): ("jacobi", {"block": k}) for k in blocks}
    t = time_pilots(model, tokenizer, [prompt], runs, pilot_tokens=pilot_tokens, reps=reps, pause=pause)
    rows = [{"block": k, "compression": t[str(k)]["compression"], "tokens_per_s": t[str(k)]["tokens_per_s"]}
            for k in blocks]
    rows.sort(key=lambda r: -r["tokens_per_s"])
    return {"best": rows[0]["block"], "ranking": rows}


# ---- the registry: one tuner per search strategy (a method's spec names its own: spec.tuner) ----

def _lookahead(model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None, draft_tokenizer=None,
               **fixed) -> dict:
    res = autotune(model, tok, prompts, pilot_tokens=pilot_tokens, **fixed)
    b = res["best"]
    return {"params": dict(b), "label": f"window {b['window']}, ngram {b['ngram']}, guesses {b['guesses']}",
            "result": res}


def _speculative(model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None, draft_tokenizer=None,
                 **fixed) -> dict:
    if draft is None:
        raise ValueError("tuning speculative decoding needs a draft model")
    if draft_tokenizer is not None:  # before piloting: a clear error, not a crash mid-tune
        from decoding.methods.draft_model.speculative import check_compatible
        check_compatible(model, draft, tok, draft_tokenizer)
    res = autotune_speculative(model, draft, tok, prompts, pilot_tokens=pilot_tokens, reps=reps, **fixed)
    return {"params": res["best"], "label": label(res["best"]), "result": res}


def _heads(model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None, draft_tokenizer=None,
           **fixed) -> dict:
    res = autotune_heads(model, tok, prompts, method, heads, pilot_tokens=pilot_tokens, reps=reps, **fixed)
    return {"params": res["params"], "label": f"tree {heads_label(res['params'])}", "result": res,
            "detail": ", ".join(f"{heads_label(r)}: {r['tokens_per_s']:.1f} tokens/s" for r in res["ranking"])}


def _jacobi(model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None, draft_tokenizer=None,
            **fixed) -> dict:
    res = autotune_block(model, tok, _pilots(prompts)[0], pilot_tokens=pilot_tokens, reps=reps, **fixed)
    return {"params": {"block": res["best"]}, "label": f"block {res['best']}", "result": res}


@dataclass(frozen=True)
class Tuner:
    """A search strategy. run: the tuner ({"params", "label", "result"[, "detail"]}); chooses: the parameters
    it picks (a user's value for one of them contradicts --auto); what: their name in words; fixed: the
    tuner options a user's other parameter values fix (a given heads confidence is the only cut tried)."""
    run: Callable[..., dict]
    chooses: tuple[str, ...]
    what: str
    fixed: Callable[[dict], dict] = lambda params: {}


TUNERS: dict[str, Tuner] = {
    "latency_curve": Tuner(_lookahead, ("window", "ngram", "guesses"), "shape"),
    "draft_shapes": Tuner(_speculative, ("draft_tokens", "tree", "tree_budget", "staged"), "shape"),
    "heads_budget": Tuner(_heads, ("budget",), "tree budget",
                          lambda p: {"cuts": (p["confidence"],)} if p.get("confidence") is not None else {}),
    "block": Tuner(_jacobi, ("block",), "block"),
}


def tuner_of(method: str) -> Tuner | None:
    """The method's tuner (its spec's strategy), None for a method that is not tuned."""
    from .methods.registry import spec_of
    strategy = spec_of(method).tuner
    return TUNERS[strategy] if strategy is not None else None


def pilot_runs(method: str, prompts: int, reps: int = 2) -> int:
    """How many pilot decodes tune() makes for `method` on `prompts` pilot prompts (a shared server counts
    them in a request's work before it starts); 0 for a method without a tuner."""
    t = tuner_of(method)
    if t is None:
        return 0
    return {_lookahead: len(GRID) * prompts, _speculative: (len(SHAPES) + 1) * prompts * reps,
            _heads: len(BUDGETS) * len(CUTS) * prompts * reps, _jacobi: len(BLOCKS) * reps}[t.run]


def tune(method: str, model, tokenizer, prompts, *, pilot_tokens: int = 32, reps: int = 2, draft=None,
         heads: str | None = None, draft_tokenizer=None, **fixed) -> dict:
    """Tune `method` for this model, device and prompt(s): {"params": the drafter's parameters, "label":
    the words --auto prints, "result": the tuner's full measurements}. fixed: the tuner's own options
    (a grid, shapes, budgets, cuts, curve, ...). draft_tokenizer: the draft's, checked against the target's
    before any pilot runs."""
    from .methods.registry import SPECS
    t = tuner_of(method) if method in SPECS else None
    if t is None:
        tuned = [n for n, s in SPECS.items() if s.tuner is not None]
        raise ValueError(f"{method} has no tuner (tuned: {', '.join(tuned)})")
    return t.run(model, tokenizer, prompts, method=method, pilot_tokens=pilot_tokens, reps=reps, draft=draft,
                 heads=heads, draft_tokenizer=draft_tokenizer, **fixed)


def tune_threads(model, tokenizer, prompts, *, pilot_tokens: int = 8, reps: int = 2,
                 candidates: list[int] | None = None) -> dict:
    """The CPU thread count that decodes fastest here, measured like the other tuners: greedy on the pilot
    prompts at each candidate count (1 up to the cores), `reps` rounds interleaved, fastest round kept.
    Why: on a 2-core machine a second thread is worth 5-30% when the machine is quiet and ~10x slower when
    another process is busy; only a measurement on this machine, now, knows which. Leaves torch on the
    winner; returns {"threads": n, "tokens_per_s": {n: rate}}."""
    import os

    import torch
    if next(model.parameters()).device.type != "cpu":
        return {"threads": torch.get_num_threads(), "tokens_per_s": {}}
    cores = os.cpu_count() or 1
    counts = sorted({max(1, min(int(c), cores)) for c in (candidates or {1, 2, cores // 2, cores})})
    before = torch.get_num_threads()
    best: dict[int, float] = {}
    try:
        run(model, tokenizer, _pilots(prompts)[0], BASELINE, max_new_tokens=2, trace=False)  # warm-up
        for r in range(max(reps, 1)):
            for n in counts:
                if r and best[n] * 3 < max(best.values()):
                    continue  # a count 3x slower than the best is out; its repeats would only cost time
                torch.set_num_threads(n)
                t0, made = time.perf_counter(), 0
                for p in _pilots(prompts):
                    made += len(run(model, tokenizer, p, BASELINE, max_new_tokens=pilot_tokens,
                                    trace=False).output_ids)
                rate = made / max(time.perf_counter() - t0, 1e-9)
                best[n] = max(best.get(n, 0.0), rate)
    finally:
        torch.set_num_threads(before)
    pick = max(best, key=lambda n: (best[n], -n))
    torch.set_num_threads(pick)
    return {"threads": pick, "tokens_per_s": best}
