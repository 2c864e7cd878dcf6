"""Run statistics computed from a trace alone (no model, no drafter): what Trace.to_dict writes as the
derived "speculative" block, the CLI prints, and readers without DecodeScope recompute from the JSON.
Plain functions of the trace's data, so trace.py can call them without importing any method.
"""
from __future__ import annotations

from collections import Counter


def speculative_stats(tr) -> dict:
    """Run statistics of a speculative trace (traced steps only): acceptance length, rates per depth,
    accepted-length histogram, compression (new tokens per target forward, prefill included)."""
    steps = [s for s in tr.steps if s.kind == "decode" and "tree" in s.info]
    if not steps:
        return {}
    acc = [len(s.info["accepted_path"]) - 1 for s in steps]
    drafted = sum(len(s.info["tree"]["tokens"]) - 1 for s in steps)
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
    out = {
        "mean_acceptance_length": 1 + sum(acc) / len(steps),
        "draft_acceptance_rate": sum(acc) / drafted if drafted else 0.0,
        "acceptance_rate_per_depth": {str(d): reached[d] / tried[d] for d in range(1, maxd + 1) if tried[d]},
        "accepted_length_histogram": {str(k): v for k, v in sorted(Counter(acc).items())},
        "compression": len(tr.output_ids) / forwards if forwards else 0.0,
        "target_forwards": forwards,
        "draft_forwards": sum(s.info.get("draft_forwards", 0) for s in steps),
        "plain_steps": sum(not s.info.get("drafted", True) for s in steps),
        "drafted_tokens": drafted,
        "draft_ms": sum(s.info.get("draft_ms", 0.0) for s in steps),
        "target_ms": sum(s.info.get("target_ms", 0.0) for s in steps),
        "origins": dict(origins),
    }
    if any("stage2" in s.info for s in steps):
        out["stage2_proposed"] = sum(s.info["stage2"]["proposed"] for s in steps if "stage2" in s.info)
        out["stage2_accepted_by_draft"] = sum(s.info["stage2"]["accepted_by_draft"] for s in steps
                                              if "stage2" in s.info)
    return out
