"""A standalone, self-contained HTML report of a run: opens from disk with no network at all.

plotly.js (plotly's offline bundle), the step-control script and the data are all inline. The bundle
mentions map-tile and licence URLs that a report never loads (no map traces); they are defused so the
file carries no http(s) reference except XML namespace names, which browsers never fetch.
"""
from __future__ import annotations

import re
from pathlib import Path

from . import costs as prof
from ..common import PLOTLY_CONFIG, TraceLike, as_trace, drawn, esc
from ..describe import model_words, recorded_on, scrub_paths
from ..page.plotlyjs import URL, offline_plotlyjs  # noqa: F401  (viz.report.offline_plotlyjs: scripts/screenshots.py)
from ..steps.stepper import SCRIPT, step_view_html


def external_urls(page: str) -> list[str]:
    """The http(s) references in a page other than XML namespace names (the report test's check)."""
    return [m.group(0) for m in re.finditer(r"https?://[^\s\"'<>)]*", page) if not m.group(0).startswith(
        ("http://www.w3.org/", "https://www.w3.org/"))]


def _static(fig, div_id: str) -> str:
    html = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOTLY_CONFIG)
    return f"<div class='ds-static'>{html}</div>"


@drawn
def report_html(trace: TraceLike, profile: dict | None = None, title: str | None = None,
                compare: dict | None = None, initial_step: int = 0) -> str:
    """The report page as a string. compare = {name: (trace, profile)} adds side-by-side method plots."""
    tr = as_trace(trace)
    title = scrub_paths(str(title or f"DecodeScope — {tr.method} run"))
    stats = tr.stats()
    rows = "".join(f"<tr><th>{esc(k.replace('_', ' '))}</th><td>{esc(_value(v))}</td></tr>" for k, v in stats.items())
    extra = ""
    if compare:
        extra += "<h2>Methods side by side</h2>" + _static(prof.compare_figure(compare), "ds-compare")
        extra += _static(prof.latency_figure(compare), "ds-compare-latency")
    where = recorded_on(tr)
    return _page(title, f"""<p>Model: {esc(scrub_paths(model_words(tr)))}{' · ' + esc(where) if where else ''} · stop: {esc(tr.stop_reason)}.
Every picture below is drawn from the recorded
trace of this run. Use ◀ ▶ (or the arrow keys) to step, click a token to jump to the step that produced it.</p>
{step_view_html(tr, profile, initial_step=initial_step)}
{extra}
<h2>Run statistics</h2><table class="ds-stats">{rows}</table>""")


def _page(title: str, body: str) -> str:
    """The offline page around `body`: inline plotly.js in the head, the step script at the end."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;margin:16px 24px;color:#222}} table.ds-stats{{border-collapse:collapse}}
.ds-stats th,.ds-stats td{{border:1px solid #ddd;padding:2px 8px;text-align:left;font-size:13px}} h1{{font-size:20px}}
@media (max-width:700px){{body{{margin:8px}}}} .ds-static{{overflow-x:auto;max-width:100%}}</style>
<script>{offline_plotlyjs()}</script>
</head><body>
<h1>{esc(title)}</h1>
{body}
<script>{SCRIPT}</script>
</body></html>"""


@drawn
def side_by_side_html(runs: dict[str, TraceLike], title: str | None = None, best: str | None = None) -> str:
    """An offline page: the runs' token strips aligned by output position and two linked step views."""
    from .side_by_side import linked_html
    runs = {n: as_trace(t) for n, t in runs.items()}
    title = scrub_paths(str(title or "DecodeScope — " + " vs ".join(map(str, runs))))
    first = next(iter(runs.values()))
    return _page(title, f"""<p>Model: {esc(scrub_paths(model_words(first)))}. Each strip is one run; each cell one decoding step, as wide as the
tokens it produced. Click a cell (or step either view) and both step views show the step that produced that
output position.</p>
{linked_html(runs, best)}""")


def _value(v: object) -> str:
    """A stats value in words: floats rounded, the accepted-length histogram as 'k tokens: n steps'."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} token(s): {n} step(s)" for k, n in v.items())
    return str(v)


def write_side_by_side(runs: dict[str, TraceLike], path: str | Path, title: str | None = None) -> Path:
    """Write side_by_side_html to `path` (opens offline); returns the path."""
    return _write(path, side_by_side_html(runs, title))


def _write(path: str | Path, page: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def write_report(trace: TraceLike, path: str | Path, profile: dict | None = None, title: str | None = None,
                 compare: dict | None = None) -> Path:
    """Write the report; returns the path. The file opens offline in any browser."""
    return _write(path, report_html(trace, profile, title, compare))
