"""The status lines and small tables the tabs show (markdown and DataFrames), and the names users see.

Why one place: "mean accepted" is n/a without a decode step everywhere, and no absolute server path
reaches a user (model names are repo-relative or the hub id).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from viz.escape import md_text, one_line

from ..race.race import mean_accepted

ROOT = Path(__file__).resolve().parents[2]  # the repository (appkit/<room>/<module>.py)


def display_name(name) -> str:
    """A model name as users see it: repo-relative inside the repo, the folder name for other local
    directories, the hub id as given otherwise."""
    name = str(name or "")
    root = str(ROOT) + os.sep
    if name.startswith(root):
        return name[len(root):]
    if os.path.isabs(name):
        return Path(name).name
    return name


_ABS_PATH = re.compile(r"(?<![\w:/.~-])(?:/|~/|[A-Za-z]:\\)[^\s()'\"`,;]*")


def no_server_paths(text: str) -> str:
    """A message with every absolute path (/..., ~/..., C:\\...) replaced by its display name (the last folder's
    name, or repo-relative): a public page shows no server path. URLs are kept (their // follows a colon)."""
    return _ABS_PATH.sub(lambda m: display_name(m.group(0).rstrip(".")) + ("." if m.group(0).endswith(".") else ""),
                         str(text))


def _public_model(m: dict) -> dict:
    """A model description (decoding.models.describe) with its name and config path as users see them."""
    out = {**m, "name": display_name(m.get("name"))}
    if isinstance(m.get("config"), dict):
        out["config"] = {**m["config"], "_name_or_path": display_name(m["config"].get("_name_or_path"))}
    return out


def public_trace(tr):
    """The trace as a user downloads or replays it: target, draft and heads names (and the configs' paths)
    repo-relative or the hub id, never a server path. Changes tr in place and returns it."""
    if isinstance(tr.model, dict):
        tr.model = _public_model(tr.model)
    if isinstance(tr.config.get("draft"), dict):
        tr.config["draft"] = _public_model(tr.config["draft"])
    if isinstance(tr.config.get("heads"), str):  # medusa / eagle: the heads folder, as the model name
        tr.config["heads"] = display_name(tr.config["heads"])
    return tr


def code(value: object) -> str:
    """A value as a markdown code span: shown literally, on one line (a blank line would end the span and its
    paragraph); a backtick in it cannot end the span."""
    return "`" + one_line(value).replace("`", "'") + "`"


def stats_md(tr, head: str = "", note: str = "") -> str:
    """The finished (or stopped) run's numbers under the output. Replay shows a trace from anywhere, so its
    strings go through md_text (a method named like a link or a tag is shown, never followed)."""
    st = tr.stats()
    head = head or f"done ({md_text(tr.stop_reason or 'finished')})"
    m = tr.model if isinstance(tr.model, dict) else {}
    if m.get("name"):
        kernel = m["cpu_kernel"].get("kernel") if isinstance(m.get("cpu_kernel"), dict) else None
        where = (f"on {md_text(m.get('device', '?'))} ({md_text(m.get('dtype', '?'))}"
                 + (f", {md_text(kernel)} kernel" if kernel else "") + ")")
        note = " · ".join(x for x in (note, f"model {code(display_name(m['name']))} {where}") if x)
    nums = [(f"{st['tokens_per_s']:.1f}", "tokens/s"), (st["new_tokens"], "new tokens"),
            (st["steps"], "steps (forward passes)"), (f"{st['compression']:.2f}", "compression"),
            (mean_accepted(tr), "mean accepted / step"), (f"{st['wall_s']:.2f}", "wall s")]
    # one wrapping line, not a table: the headline numbers are never clipped at any width (400-1920 px)
    return (f"**{md_text(tr.method)}** · {head}{' · ' + note if note else ''}\n\n"
            + " · ".join(f"**{v}** {k}" for v, k in nums))


def live_line(tr) -> str:
    """The small line sent while a run streams (no table, no pictures: the browser stays free)."""
    n, steps = len(tr.output_ids), len(tr.steps)
    rate = n / tr.wall_s if tr.wall_s > 0 else 0.0
    return (f"**{md_text(tr.method)}** · running… step {steps} · {n} tokens · {rate:.0f} tokens/s · "
            f"{n / steps if steps else 0:.2f} tokens/step")


# The Race's columns, in the order shown: "exact" beside the method (it was the last of 14 columns and was cut
# to "identi" at 1920x1080 once the configs were filled in). "mean accepted" and "step saving vs greedy" are
# not shown: in a race every method makes the same tokens, so both equal compression (the summary says them).
RACE_COLUMNS = ("method", "exact", "config", "tokens", "steps", "compression", "tokens/s", "runs",
                "wall s (median)", "wall s (min-max)", "speedup vs greedy", "speedup (min-max)")


def race_table(rows: list[dict]):
    """The results table: RACE_COLUMNS of each row (the rows keep every number for the summary)."""
    return pd.DataFrame([{k: r.get(k, "") for k in RACE_COLUMNS} for r in rows], columns=list(RACE_COLUMNS))


def _sweep_name(p: dict):
    if p.get("budget") is not None:
        return p["method"]
    return p["N"] if p["N"] > 1 else "greedy" if p["N"] == 1 else "jacobi"


def sweep_table(points: list[dict]):
    rows = [{"N": _sweep_name(p), "W": p["W"] if p["W"] is not None else "", "G": p["G"] if p["G"] is not None else "",
             "tree budget": p.get("budget") or "", "compression": round(p["compression"], 3),
             "FLOPs/step": f"{p['flops_per_step']:.3g}", "query tokens/step": round(p["query_per_step"], 1),
             "steps": p["steps"], "tokens/s": round(p["tokens_per_s"], 1)} for p in points]
    return pd.DataFrame(rows)
