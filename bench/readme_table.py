"""Regenerate the results tables of docs/performance.md from bench/results/*.json (numbers only from measured files).

    python bench/readme_table.py          # rewrites the bench-results block of docs/performance.md and the
                                          # README's cpu-speed block
    python bench/readme_table.py --check  # exit 1 if either block is not what the result files give

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
SPEED_BEGIN, SPEED_END = "<!-- cpu-speed:begin -->", "<!-- cpu-speed:end -->"  # the README's CPU speed table


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


def speed_source() -> Path | None:
    """The result file the README's speed table comes from: the newest quiet bench.py run on the held-out chat
    requests that has both our greedy and llama.cpp's greedy in it (by date, then the most rows, then name)."""
    found = []
    for path in sorted((ROOT / "bench" / "results").glob("cpu-*.json")):
        doc = json.loads(path.read_text())
        meta, rows = doc.get("meta") or {}, doc.get("rows") or []
        names = {r.get("method") for r in rows}
        if meta.get("prompts") == "heldout_chat" and not meta.get("under_load") and \
                {"ours greedy", "llama.cpp greedy"} <= names:
            found.append((meta.get("date") or "", len(rows), path.name, path))
    return max(found)[-1] if found else None


def speed_block() -> str:
    """The README's CPU speed table: every row of speed_source() against our greedy and llama.cpp's greedy."""
    path = speed_source()
    if path is None:
        return "No held-out chat run with llama.cpp rows recorded yet: see docs/cpu-drafting.md.\n"
    doc = json.loads(path.read_text())
    meta, rows = doc["meta"], doc["rows"]
    rate = {r["method"]: r["tokens_per_s"] for r in rows}
    ours, cpp = rate["ours greedy"], rate["llama.cpp greedy"]
    lines = ["| method | tokens/s | vs our greedy | vs llama.cpp greedy | mean accepted | HF greedy's tokens |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        acc = f"{r['mean_accepted']:.2f}" if r.get("mean_accepted") else "–"
        same = "yes" if r["exact"] else "no (its own kernels)" if r["method"].startswith("llama.cpp") else "NO"
        lines.append(f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / ours:.2f}x | "
                     f"{r['tokens_per_s'] / cpp:.2f}x | {acc} | {same} |")
    load = meta.get("load_before")
    return ("\n".join(lines) + "\n\n"
            f"The default model (float32 weights converted from its Q4_1 GGUF file; llama.cpp reads that very file), "
            f"one thread of a {meta.get('cpus')}-core {meta.get('machine')} CPU, torch {meta.get('torch')}"
            + (f", llama-cpp-python {meta['llama_cpp']}" if meta.get("llama_cpp") else "")
            + f"; {meta.get('max_new_tokens')} new tokens on each held-out chat request (`bench/prompts/heldout_chat.jsonl`, "
            f"never tuned on), median of {meta.get('runs')} interleaved runs"
            + (f", load average {load:.2f} before the run" if load is not None else "")
            + f". Produced by `{meta.get('command')}` on {meta.get('date')} (`bench/results/{path.name}`)."
            + (f" {meta['note']}" if meta.get("note") else "")
            + " What each lever gave and what bounds the rest: [docs/cpu-drafting.md](docs/cpu-drafting.md).\n")


def replace_block(text: str, begin: str, end: str, body: str) -> str:
    return re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{body}{end}", text, flags=re.S)


def check(readme: Path | None = None, front: Path | None = None) -> list[str]:
    """The blocks that are not what the result files give (empty: both current)."""
    page, front = readme or ROOT / "docs" / "performance.md", front or ROOT / "README.md"
    stale = []
    if BEGIN in page.read_text() and replace_block(page.read_text(), BEGIN, END, f"{table()}\n") != page.read_text():
        stale.append(f"{page.name} ({BEGIN})")
    if SPEED_BEGIN in front.read_text() and \
            replace_block(front.read_text(), SPEED_BEGIN, SPEED_END, speed_block()) != front.read_text():
        stale.append(f"{front.name} ({SPEED_BEGIN})")
    return stale


def main(argv: list[str] | None = None, readme: Path | None = None, front: Path | None = None) -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench import LOAD_LIMIT, print_load, refuse_under_load
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allow-load", action="store_true", help=f"rewrite even when the 1-minute load average is "
                    f"above {LOAD_LIMIT} (the block says so)")
    ap.add_argument("--check", action="store_true", help="only say whether the blocks are current (exit 1 if not)")
    a = ap.parse_args(argv)
    if a.check:
        stale = check(readme, front)
        for what in stale:
            print(f"not current: {what}; run python bench/readme_table.py", file=sys.stderr)
        return 1 if stale else 0
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
    front = front or ROOT / "README.md"
    if front.is_file() and SPEED_BEGIN in front.read_text() and not note:  # never README figures under load
        front.write_text(replace_block(front.read_text(), SPEED_BEGIN, SPEED_END, speed_block()))
    print_load("after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
