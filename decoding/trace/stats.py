"""Run statistics computed from a trace alone (no model, no drafter): what Trace.to_dict writes as the
derived blocks, the CLI prints, and readers without DecodeScope recompute from the JSON.
Plain functions of the trace's data, so the Trace (decoding/trace/__init__.py) can call them without importing any method.

One definition per figure, for every drafting method (docs/trace.md, "Speculative metrics"), under the
names the serving engines use, so a trace and a vLLM / SGLang / TensorRT-LLM log can be compared as is:
  a *draft* is a decode step that verified at least one proposed token (query tokens whose role is
  `candidate`, `draft`, `stage2` or `jacobi`: what the target checks; lookahead's window is not checked);
  its *draft tokens* are those proposed tokens; its *accepted tokens* are the tokens it emitted minus the
  one any step emits (vLLM's len(generated) - 1).
"""
from __future__ import annotations

from collections import Counter

from ..methods.spec import BASELINE  # a leaf: data modules read traces, not the registry

DRAFT_ROLES = frozenset({"candidate", "draft", "stage2", "jacobi"})  # proposals the target verifies


def kept_drafts(s) -> int:
    """Draft tokens step s kept in the output: the tokens whose origin is not the target's own (the one
    token a step adds after its accepted drafts). A step cut before that token (the run's last, at
    max-new-tokens, EOS or a stop string) kept only drafts, and all of them count."""
    if len(s.origins) == len(s.accepted):
        return sum(o != "target" for o in s.origins)
    return max(len(s.accepted) - 1, 0)  # a document without origins: the uncut rule


def _proposed(tr, s) -> tuple[int | None, int]:
    """(draft tokens verified in step s, their deepest position after x0). None when unknown: a step
    recorded without tracing holds no roles; then every query token but x0 is a proposal, except in
    lookahead, whose query also holds the (unverified) window."""
    if s.roles:
        idx = [i for i, r in enumerate(s.roles) if r in DRAFT_ROLES]
        depth = max((s.positions[i] - s.kv_len for i in idx), default=0) if len(s.positions) == len(s.roles) else 0
        return len(idx), depth
    c = tr.config if isinstance(tr.config, dict) else {}
    if "window" in c and "ngram" in c:  # a lookahead window's config: the query holds the (unverified) window too
        return None, 0
    return max(s.n_query - 1, 0), 0


def spec_decode_stats(tr) -> dict:
    """The serving engines' speculative-decoding figures for a run of any drafting method ({} for greedy).

    vLLM (SpecDecodingStats / its "SpecDecoding metrics" log line): num_drafts, num_draft_tokens,
      num_accepted_tokens, num_accepted_tokens_per_pos, mean_acceptance_length = 1 + accepted / drafts,
      draft_acceptance_rate = accepted / draft tokens, acceptance_rate_per_pos = accepted at position
      i / drafts. SGLang: spec_accept_length = tokens emitted by decode steps / decode steps (every decode
      step is a verify pass). TensorRT-LLM (SpecDecodingStats): acceptance_length = (accepted + drafts) /
      drafts, draft_overhead = drafting time / wall time of the drafting steps (null where the method does
      not time its drafting apart: lookahead, prompt lookup, jacobi). Ours beside them: draft_forwards
      (sequential forwards of a separate drafting network: the draft model, the EAGLE layer; null for
      methods that run none)."""
    decode = [s for s in tr.steps if s.kind == "decode"]
    if tr.method == BASELINE or not decode:
        return {}
    drafts, draft_tokens, accepted, depth, known = 0, 0, 0, 0, True
    per_step: list[int] = []
    draft_ms = wall_ms = 0.0
    timed = False
    for s in decode:
        n, d = _proposed(tr, s)
        if n is None:
            known = False
            continue
        if n == 0:
            continue
        a = kept_drafts(s)
        drafts += 1
        draft_tokens += n
        accepted += a
        per_step.append(a)
        depth = max(depth, d, a)
        if "draft_ms" in s.info:
            timed = True
            draft_ms += float(s.info["draft_ms"])
        wall_ms += float(s.wall_ms)
    per_pos = [sum(a > i for a in per_step) for i in range(depth)]
    mal = 1 + accepted / drafts if drafts else 1.0
    forwards = [s.info["draft_forwards"] for s in decode if "draft_forwards" in s.info]
    out = {
        "num_drafts": drafts if known else None,
        "num_draft_tokens": draft_tokens if known else None,
        "num_accepted_tokens": accepted if known else None,
        "num_accepted_tokens_per_pos": per_pos if known else None,
        "mean_acceptance_length": mal if known else None,
        "draft_acceptance_rate": (accepted / draft_tokens if draft_tokens else None) if known else None,
        "acceptance_rate_per_pos": [c / drafts for c in per_pos] if known and drafts else ([] if known else None),
        "spec_accept_length": sum(len(s.accepted) for s in decode) / len(decode),
        "acceptance_length": mal if known else None,
        "draft_overhead": draft_ms / wall_ms if timed and wall_ms > 0 else None,
        "draft_forwards": sum(int(f) for f in forwards) if any(f for f in forwards) else None,
    }
    return out


def speculative_stats(tr) -> dict:
    """Run statistics of a tree-verifying trace (speculative, medusa, eagle; traced steps only): acceptance
    length, rates per depth, accepted-length histogram, compression (new tokens per target forward,
    prefill included). mean_acceptance_length and draft_acceptance_rate are spec_decode_stats' (one
    definition); the rest reads the verified tree (accepted_path), before any cut at max-new-tokens."""
    steps = [s for s in tr.steps if s.kind == "decode" and "tree" in s.info]
    if not steps:
        return {}
    acc = [len(s.info["accepted_path"]) - 1 for s in steps]
    maxd = max(max(s.info["tree"]["depth"]) for s in steps)
    tried, reached = [0] * (maxd + 1), [0] * (maxd + 1)
    for s, a in zip(steps, acc):
        path, par = s.info["accepted_path"], s.info["tree"]["parents"]
        for d in range(1, maxd + 1):
            if d - 1 <= a and any(p == path[d - 1] for p in par[1:]):
                tried[d] += 1
                reached[d] += d <= a
    forwards = len(tr.steps)
    origins = Counter(o for s in tr.steps if s.kind == "decode" for o in s.origins)
    served = spec_decode_stats(tr)
    out = {
        "mean_acceptance_length": served.get("mean_acceptance_length"),
        "draft_acceptance_rate": served.get("draft_acceptance_rate") or 0.0,
        "acceptance_rate_per_depth": {str(d): reached[d] / tried[d] for d in range(1, maxd + 1) if tried[d]},
        "accepted_length_histogram": {str(k): v for k, v in sorted(Counter(acc).items())},
        "compression": len(tr.output_ids) / forwards if forwards else 0.0,
        "target_forwards": forwards,
        "draft_forwards": sum(s.info.get("draft_forwards", 0) for s in steps),
        "plain_steps": sum(not s.info.get("drafted", True) for s in steps),
        "drafted_tokens": served.get("num_draft_tokens") or 0,
        "draft_ms": sum(s.info.get("draft_ms", 0.0) for s in steps),
        "target_ms": sum(s.info.get("target_ms", 0.0) for s in steps),
        "origins": dict(origins),
    }
    if any("stage2" in s.info for s in steps):
        out["stage2_proposed"] = sum(s.info["stage2"]["proposed"] for s in steps if "stage2" in s.info)
        out["stage2_accepted_by_draft"] = sum(s.info["stage2"]["accepted_by_draft"] for s in steps
                                              if "stage2" in s.info)
    return out
