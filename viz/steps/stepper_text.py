"""The plain-words caption of one step: what went into the forward pass and what came out (and, for a
speculative step, how many proposed nodes the confidence cutoff pruned)."""
from __future__ import annotations

from ..common import TraceLike, as_trace, drawn, number, text_of
from ..counts import step_counts
from .cut import cut_words
from .pool import chosen_source, source_words


def _q(trace, tokens_: list[int]) -> str:
    return repr("".join(text_of(trace, t) for t in tokens_))


@drawn
def caption(trace: TraceLike, step_index: int) -> str:
    """One line in plain words: what went into this step's forward pass and what came out (and that the run
    was cut there, on a last step stopped by max new tokens)."""
    tr = as_trace(trace)
    return _caption(tr, step_index) + cut_words(tr, step_index)


def _caption(tr, step_index: int) -> str:
    s = tr.steps[step_index]
    got = f"{len(s.accepted)} new token{'s' if len(s.accepted) != 1 else ''} {_q(tr, s.accepted)}"
    if s.kind == "prefill":
        return f"Step {s.index} (prefill): the model read the {s.n_query}-token prompt in one pass and chose {got}."
    info, head = s.info, f"Step {s.index}: one forward pass over {s.n_query} query token{'s' if s.n_query != 1 else ''}"
    if "jacobi" in info:
        j = info["jacobi"]
        fresh = sum(1 for f in j.get("fresh") or [] if f is True or f == 1)
        k = j.get("accepted", max(len(s.accepted) - 1, 0))
        agreed = (f"the model's argmax chain agreed with the first {k} guess{'es' if k != 1 else ''}" if k
                  else "the first guess already differed from the model's argmax")
        return (f"{head} — x0 and a block of {len(j['guesses'])} guesses ({fresh} fresh, the rest the previous step's "
                f"updates) — {agreed}, plus the model's own token: {got}; the other updates become the next guesses.")
    if "window" in info:
        levels, n1 = len(info["window"]), int(number(tr.config.get("ngram"), 0)) - 1
        warm = f" (warm-up: level {levels} of {n1} filled)" if n1 > 0 and levels < n1 else ""
        cands = info.get("candidates") or []
        key = _q(tr, [info["pool_key"]]) if info.get("pool_key") is not None else "x0"
        look = (f"{len(cands)} pool candidate(s) for {key}" if cands else f"no pool n-gram starts with {key}")
        return f"{head} — x0, a {levels}-level window of guesses{warm} and {look} — gave {got}; {_verdict(s)}."
    if "candidates" in info:
        cands = info["candidates"]
        if not cands:
            return f"{head}: the recent text never occurred earlier, so no copy was tried; the model gave {got}."
        return (f"{head}: {_q(tr, info.get('key') or [])} occurred earlier, so {len(cands)} continuation(s) were "
                f"checked; {_verdict(s)} — {got}.")
    t = info.get("tree")
    if t or any(r in ("draft", "stage2") for r in s.roles):
        n = len((t or {}).get("tokens") or s.tokens) - 1
        rej = info.get("first_rejected")
        rej_s = ""
        if isinstance(rej, int) and 0 <= rej < len(s.tokens):
            rej_s = f", first rejected node {rej} ({_q(tr, [s.tokens[rej]])})"
        return (f"{head}: the target checked {n} drafted token(s){_copied(info)}{_pruned(tr, t)}, "
                f"{step_counts(s).words()}{rej_s} — {got}.")
    return f"{head} (plain next-token decoding) gave {got}."


def _verdict(s) -> str:
    """Said from the step's counts (what it accepted), with the candidate that supplied the guesses."""
    info, c = s.info, step_counts(s)
    chosen = info.get("chosen")
    if not c.guessed:
        return f"no candidate matched: {c.words()}"
    which = f"candidate {chosen}" if isinstance(chosen, int) else "a candidate"
    words = source_words(chosen_source(s))  # from the step's own candidate_sources; nothing when unrecorded
    return f"{which}{f' ({words})' if words else ''} matched: {c.words()}"


def _copied(info: dict) -> str:
    """' copied from this prompt + this run's output' for a retrieval step: where its draft came from."""
    rec = info.get("retrieval")
    if not isinstance(rec, dict):
        return ""
    from .retrieval import SOURCE_WORDS, sources
    came = [SOURCE_WORDS.get(x, x) for x in sources(rec)]
    return f" copied from {' + '.join(came)}" if came else ""


def _pruned(tr, tree: dict | None) -> str:
    """' (2 more proposed but pruned: draft p < cutoff 0.40)' when the step recorded pruned nodes."""
    n = len(((tree or {}).get("pruned") or {}).get("tokens") or [])
    cut = number(tr.config.get("confidence"))
    if not n:
        return ""
    return f" ({n} more proposed but pruned: draft p < cutoff {cut:.2f})" if cut is not None else f" ({n} pruned)"
