"""Regenerate the results tables of docs/performance.md from bench/results/*.json (numbers only from measured files).

    python bench/readme_table.py        # rewrites the block between the bench-results markers in docs/performance.md

Every table names the command, the prompts and the date that produced it (older result files that did not
record them say so). Result files measured under load (--allow-load) are left out, and the page is not
rewritten while the 1-minute load average is above 0.5 (one line, exit status 2; --allow-load overrides and
marks the block as written under load).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"


def where(meta: dict) -> str:
    dev = meta.get("gpu") or f"{meta.get('machine') or 'CPU'}, {meta.get('cpus')} cores, {meta.get('threads')} threads"
    return f"{dev}; {meta.get('device')} {meta.get('dtype')}; torch {meta.get('torch')}"


def produced_by(meta: dict) -> str:
    """' Produced by `CMD` (prompts P) on DATE.' — or a note that an older file did not record them."""
    if not meta.get("command"):
        return f" Prompts `{meta.get('prompts')}`; command and date not recorded (an older result file)."
    return f" Produced by `{meta['command']}` (prompts `{meta.get('prompts')}`) on {meta.get('date', '?')}."


def layout_table(rows: list[dict]) -> str:
    """Markdown: one row per query size; the packed columns only where measured (older result files)."""
    packed = "packed_ms" in rows[0]
    head = "| query tokens | stock ms | column ms | column speed-up |" + (" packed ms | packed speed-up |" if packed else "")
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in rows:
        lines.append(f"| {r['n_query']} | {r['stock_ms']:.2f} | {r['column_ms']:.2f} | {r['speedup']:.2f}x |"
                     + (f" {r['packed_ms']:.2f} | {r['packed_speedup']:.2f}x |" if packed else ""))
    return "\n".join(lines) + "\n"


def table() -> str:
    parts = []
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        doc = json.loads(path.read_text())
        if "rows" not in doc or "meta" not in doc or doc["meta"].get("prompts") == "quick":
            continue
        if "-heads-" in path.stem:  # bench_heads.py: reported with the heads' card, assets/heads/README.md
            continue
        meta = doc["meta"]
        if meta.get("under_load"):  # an experiment (--allow-load): never README numbers
            continue
        if doc["rows"] and "n_query" in doc["rows"][0]:  # bench_layout.py: step latency per weight layout
            parts.append(f"**{path.stem}** — step latency per weight layout, measured on {where(meta)}; "
                         f"model {meta.get('model')}, kv length {meta.get('kv_len')}, median of {meta.get('reps')} "
                         f"interleaved steps (`bench/results/{path.name}`).{produced_by(meta)}\n")
            parts.append(layout_table(doc["rows"]))
            continue
        if not doc["rows"] or "vs_hf_greedy" not in doc["rows"][0]:
            continue  # other benches (bench_static.py, ...) keep their own .md next to the .json
        parts.append(f"**{path.stem}** — measured on {where(meta)}; model {meta.get('model')}, prompts "
                     f"`{meta.get('prompts')}`, {meta.get('max_new_tokens')} new tokens each, median of "
                     f"{meta.get('runs')} interleaved runs (`bench/results/{path.name}`).{produced_by(meta)}"
                     + (f" **Note:** {meta['note']}" if meta.get("note") else "") + "\n")
        quality = "repeat_line_share" in doc["rows"][0]  # text quality columns (newer result files)
        parts.append("| method | tokens/s | vs HF greedy | compression | mean accepted | exact |"
                     + (" outputs with a line x3 | distinct-4 |" if quality else "")
                     + "\n|---|---|---|---|---|---|" + ("---|---|" if quality else ""))
        for r in doc["rows"]:
            comp = f"{r['compression']:.2f}" if r.get("compression") else "–"
            acc = f"{r['mean_accepted']:.2f}" if r.get("mean_accepted") else "–"
            q = (f" {r['repeat_line_share']:.2f} | {r['distinct_4']:.2f} |" if quality and r.get("distinct_4") is not None
                 else " – | – |" if quality else "")
            parts.append(f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['vs_hf_greedy']:.2f}x | {comp} | {acc} | "
                         f"{'yes' if r['exact'] else 'NO'} |" + q)
        parts.append("")
    return "\n".join(parts) if parts else "No benchmark results recorded yet: run `python bench/bench.py`.\n"


def main(argv: list[str] | None = None, readme: Path | None = None) -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench import LOAD_LIMIT, print_load, refuse_under_load
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allow-load", action="store_true", help=f"rewrite even when the 1-minute load average is "
                    f"above {LOAD_LIMIT} (the block says so)")
    a = ap.parse_args(argv)
    before = print_load("before")
    if why := refuse_under_load(a.allow_load):
        print(why, file=sys.stderr)
        return 2
    readme = readme or ROOT / "docs" / "performance.md"  # the README links there; it stays short
    text = readme.read_text()
    note = (f"*Written under load (load average {before:.2f}, --allow-load).*\n\n" if before > LOAD_LIMIT else "")
    block = f"{BEGIN}\n{note}{table()}\n{END}"
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text += f"\n## Results\n\nGenerated by `python bench/readme_table.py` from `bench/results/`.\n\n{block}\n"
    readme.write_text(text)
    print_load("after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
