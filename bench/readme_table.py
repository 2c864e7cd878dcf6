"""Regenerate the results tables of docs/performance.md from bench/results/*.json (numbers only from measured files).

    python bench/readme_table.py          # rewrites the bench-results block of docs/performance.md and the
                                          # README's cpu-speed block
    python bench/readme_table.py --check  # exit 1 if either block is not what the result files give
    python bench/readme_table.py --show bench/results/cpu-x.json   # print one bench.py result as the README's
                                          # speed table would show it (no file written; any run, any load)

The README's speed section holds one table per thread count (a `bench/bench.py --threads 2` run gives the
2-thread table); every row names its kernel (fp32, int8, llama.cpp; HF's rows run torch's fp32), and each table
the machine, threads, date and the load average at the start and end of its run.

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
    """Markdown: one row per query size, a column per layout the file measured (a run with --only keeps fewer),
    then its speed-ups against stock where stock was measured."""
    names = {"stock_ms": "stock", "column_ms": "column", "packed_ms": "packed", "packed_int8_ms": "packed int8"}
    cols = [k for k in names if k in rows[0]]
    ups = [k for k in ("speedup", "packed_speedup") if k in rows[0]]
    up_name = {"speedup": "column speed-up", "packed_speedup": "packed speed-up"}
    head = ("| query tokens | " + " | ".join(f"{names[k]} ms" for k in cols)
            + "".join(f" | {up_name[k]}" for k in ups) + " |")
    lines = [head, "|" + "---|" * (1 + len(cols) + len(ups))]
    for r in rows:
        lines.append(f"| {r['n_query']} | " + " | ".join(f"{r[k]:.2f}" for k in cols)
                     + "".join(f" | {r[k]:.2f}x" for k in ups) + " |")
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


def kernel_of(row: dict) -> str:
    """The kernel a bench row ran: recorded by bench.py; for older result files read from the row's name."""
    if row.get("kernel"):
        return row["kernel"]
    name = row["method"]
    return ("int8" if name.endswith(" [int8]") else "llama.cpp" if name.startswith("llama.cpp")
            else "torch fp32" if name.startswith("HF") else "fp32")


def speed_sources(results: Path | None = None) -> dict[int, Path]:
    """The result files the README's speed tables come from, by thread count: per count, the newest quiet
    bench.py run on the held-out chat requests that has llama.cpp's greedy and one of our greedy rows (by date,
    then the most rows, then name)."""
    found: dict[int, list] = {}
    for path in sorted((results or ROOT / "bench" / "results").glob("cpu-*.json")):
        doc = json.loads(path.read_text())
        meta, rows = doc.get("meta") or {}, doc.get("rows") or []
        names = {r.get("method") for r in rows}
        if meta.get("prompts") == "heldout_chat" and not meta.get("under_load") and "llama.cpp greedy" in names \
                and names & {"ours greedy", "ours greedy [int8]"}:
            found.setdefault(int(meta.get("threads") or 1), []).append(
                (meta.get("date") or "", len(rows), path.name, path))
    return {t: max(c)[-1] for t, c in sorted(found.items())}


def speed_table(doc: dict, name: str) -> str:
    """One bench.py result as the README shows it: every row with its kernel, against our greedy on the same
    kernel and llama.cpp's greedy (– where the run has none), and what "exact" means for it; under the table the
    machine, threads, date and the load average at the start and end of the run."""
    meta, rows = doc["meta"], doc["rows"]
    rate = {r["method"]: r["tokens_per_s"] for r in rows}
    cpp = rate.get("llama.cpp greedy")

    def ratio(value: float, base: float | None) -> str:
        return f"{value / base:.2f}x" if base else "–"
    lines = ["| method | kernel | tokens/s | vs our greedy (same kernel) | vs llama.cpp greedy | mean accepted | exact |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        kernel, int8 = kernel_of(r), r["method"].endswith(" [int8]")  # [int8]: loaded asking for the int8 kernel
        ours = rate.get("ours greedy [int8]" if int8 else "ours greedy")
        acc = f"{r['mean_accepted']:.2f}" if r.get("mean_accepted") else "–"
        if kernel == "llama.cpp":
            exact = "no (its own kernels)"
        elif int8:  # bench.py compares the [int8] rows with the int8 mode's own greedy
            exact = "yes (the int8 greedy's tokens)" if r["exact"] else "NO"
        else:
            exact = "yes (HF greedy's tokens)" if r["exact"] else "NO"
        lines.append(f"| {r['method']} | {kernel} | {r['tokens_per_s']:.1f} | {ratio(r['tokens_per_s'], ours)} | "
                     f"{ratio(r['tokens_per_s'], cpp)} | {acc} | {exact} |")
    threads = meta.get("threads")
    cpu = (f"{meta['cpu']}, {meta.get('cpus')} cores" if meta.get("cpu")  # older files: no CPU model recorded
           else f"a {meta.get('cpus')}-core {meta.get('machine')} CPU")
    before, after = meta.get("load_before"), meta.get("load_after")
    load = (f"load average {before:.2f} at the start and {after:.2f} at the end (1 min)"
            if before is not None and after is not None else "load average not recorded")
    return ("\n".join(lines) + "\n\n"
            f"Machine: {cpu}, {threads} thread{'s' if threads != 1 else ''}"
            f", torch {meta.get('torch')}" + (f", llama-cpp-python {meta['llama_cpp']}" if meta.get("llama_cpp") else "")
            + (f", int8 kernel on {meta['int8_isa']}" if meta.get("int8_isa") else "")
            + f"; {meta.get('date')}, {load}."
            + (" **Measured under load: not README numbers.**" if meta.get("under_load") else "")
            + f" Model {meta.get('model')}"
            + (" (float32 weights converted from its GGUF file; llama.cpp reads that very file)" if cpp else "")
            + f"; {meta.get('max_new_tokens')} new tokens on each request of `{meta.get('prompts')}`"
            + (" (`bench/prompts/heldout_chat.jsonl`, never tuned on)" if meta.get("prompts") == "heldout_chat" else "")
            + f", median of {meta.get('runs')} interleaved runs. Produced by `{meta.get('command')}` (`bench/results/{name}`)."
            + (f" {' '.join(meta['note'].split())}" if meta.get("note") else "") + "\n")


def speed_block(results: Path | None = None) -> str:
    """The README's CPU speed section: one table per thread count measured (speed_sources)."""
    sources = speed_sources(results)
    if not sources:
        return "No held-out chat run with llama.cpp rows recorded yet: see docs/cpu-drafting.md.\n"
    parts = [f"**{t} thread{'s' if t != 1 else ''}**\n\n" + speed_table(json.loads(path.read_text()), path.name)
             for t, path in sources.items()]
    return ("\n".join(parts) + "\nKernels: fp32 rows return HF greedy's tokens; int8 rows return the int8 mode's "
            "own greedy tokens (batch-invariant int8 kernel; how often that greedy equals HF's: docs/cpu-kernel.md); "
            "llama.cpp rows run llama.cpp's own kernels. What each lever gave and what bounds the rest: "
            "[docs/cpu-drafting.md](docs/cpu-drafting.md).\n")


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
    ap.add_argument("--show", default=None, help="print this bench.py result file as a README speed table and exit")
    a = ap.parse_args(argv)
    if a.show:
        try:
            doc = json.loads(Path(a.show).read_text())
            print(speed_table(doc, Path(a.show).name), end="")
        except OSError as e:
            print(f"error: --show {a.show}: cannot read it ({e.strerror or e})", file=sys.stderr)
            return 2
        except (ValueError, KeyError, TypeError) as e:
            print(f"error: --show {a.show}: not a bench.py result file ({type(e).__name__}: {e})", file=sys.stderr)
            return 2
        return 0
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
