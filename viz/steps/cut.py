"""The words a step gets when max new tokens cut the run there (one home: the caption and the tree title
both say it, and neither module may import the other)."""
from __future__ import annotations


def cut_words(tr, step_index: int) -> str:
    """' Cut: ...' for the run's last step when max new tokens stopped it there: the step kept fewer tokens
    than its verification accepted, and a caption or picture counting the accepted path would say more."""
    if step_index != len(tr.steps) - 1 or tr.stop_reason != "max_new_tokens" or tr.steps[step_index].kind == "prefill":
        return ""
    limit = tr.config.get("max_new_tokens") if isinstance(tr.config, dict) else None
    kept = len(tr.steps[step_index].accepted)
    return (f" Cut: the run reached max new tokens{f' ({limit})' if isinstance(limit, int) else ''} in this step, so "
            f"it kept only {kept} token{'s' if kept != 1 else ''}; anything marked accepted beyond them was dropped.")
