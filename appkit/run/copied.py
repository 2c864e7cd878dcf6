"""How many of a run's tokens retrieval copied from the visitor's earlier runs, said wherever its speed is.

Why: retrieval's suffix cache drafts from this session's earlier runs, so a second run on the same prompt
copies the first one's answer and looks 3-4x greedy's speed; only a step caption said where those tokens came
from while the headline and the Race's verdict crowned the method. A copied token is a drafted token on the
accepted path whose continuation was read from an earlier run ("run k" in the step's node_at).
"""
from __future__ import annotations


def copied_tokens(trace) -> tuple[int, list[int]]:
    """(tokens accepted from drafts read from earlier runs, which earlier runs they came from, 1-based)."""
    n, runs = 0, set()
    for s in trace.steps:
        rec = s.info.get("retrieval") if isinstance(s.info, dict) else None
        path = s.info.get("accepted_path") if isinstance(s.info, dict) else None
        if not isinstance(rec, dict) or not isinstance(path, list):
            continue
        node_at = rec.get("node_at") or []
        for node in path[1:]:
            where = str(node_at[node - 1]) if isinstance(node, int) and 0 < node <= len(node_at) else ""
            if where.startswith("run "):
                n += 1
                if where[4:].isdigit():
                    runs.add(int(where[4:]))
    return n, sorted(runs)


def copied_note(trace, where: str = "your earlier runs in this session", who: str = "") -> str:
    """'⚠ 92 of 128 tokens were copied from ...', or '' when nothing was copied."""
    n, runs = copied_tokens(trace)
    if not n:
        return ""
    which = f" (run{'s' if len(runs) > 1 else ''} {', '.join(map(str, runs))} of its history)" if runs else ""
    return (f"⚠ **{who}{n} of {len(trace.output_ids)} tokens were copied from {where}**{which} by retrieval's suffix "
            f"cache, not drafted from the datastore or this prompt: the speed is copying an earlier answer")
