"""The README's CPU speed section as bench/readme_table.py renders it from bench.py result files (no torch, no
timing): one table per thread count, every row with its kernel and its ratio against our greedy on the same
kernel, and under each table the machine, threads, date and load average at the start and end of the run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import readme_table  # noqa: E402


def row(method: str, rate: float, exact: bool = True, kernel: str | None = None, accepted: float | None = None):
    return {"method": method, "tokens_per_s": rate, "exact": exact, "mean_accepted": accepted,
            **({"kernel": kernel} if kernel else {})}


def result(threads: int, date: str, rows: list[dict], **meta) -> dict:
    return {"meta": {"prompts": "heldout_chat", "threads": threads, "cpus": 2, "machine": "x86_64", "date": date,
                     "torch": "2.13.0+cpu", "llama_cpp": "0.3.36", "int8_isa": "AVX512-VNNI", "runs": 2,
                     "max_new_tokens": 96, "model": "smollm2-135m-instruct", "load_before": 0.1 * threads, "load_after": 1.05 * threads,
                     "command": f"python bench/bench.py --prompts heldout_chat --threads {threads} --kernels fp32,int8",
                     **meta}, "rows": rows}


ROWS = [row("HF greedy", 25.0, kernel="torch fp32"), row("ours greedy", 120.0, kernel="fp32", accepted=1.0),
        row("ours eagle budget 8", 90.0, kernel="fp32", accepted=1.9),
        row("ours greedy [int8]", 150.0, kernel="int8", accepted=1.0),
        row("ours eagle budget 8 [int8]", 225.0, kernel="int8", accepted=1.9),
        row("ours lookahead W1 N3 G1 [int8]", 140.0, exact=False, kernel="int8"),
        row("llama.cpp greedy", 100.0, exact=False, kernel="llama.cpp"),
        row("llama.cpp prompt lookup", 30.0, exact=False, kernel="llama.cpp")]


def write(folder: Path, name: str, doc: dict) -> None:
    (folder / name).write_text(json.dumps(doc))


def test_one_table_per_thread_count_each_row_with_its_kernel(tmp_path):
    write(tmp_path, "cpu-one.json", result(1, "2026-12-01", ROWS))
    write(tmp_path, "cpu-two.json", result(2, "2026-12-01", [{**r, "tokens_per_s": r["tokens_per_s"] * 2} for r in ROWS]))
    write(tmp_path, "cpu-two-loaded.json", result(2, "2026-12-02", ROWS, under_load=True))  # newer, but loaded
    write(tmp_path, "cpu-one-older.json", result(1, "2026-11-01", ROWS[:2] + ROWS[6:7]))
    write(tmp_path, "cpu-code.json", {**result(1, "2026-12-03", ROWS), "meta": {**result(1, "", [])["meta"],
                                                                               "prompts": "heldout_code"}})
    assert readme_table.speed_sources(tmp_path) == {1: tmp_path / "cpu-one.json", 2: tmp_path / "cpu-two.json"}
    text = readme_table.speed_block(tmp_path)
    one, two = text.index("**1 thread**"), text.index("**2 threads**")
    assert one < two
    first, second = text[one:two], text[two:]
    assert "| method | kernel | tokens/s | vs our greedy (same kernel) | vs llama.cpp greedy |" in first
    assert "| HF greedy | torch fp32 | 25.0 | 0.21x | 0.25x | – | yes (HF greedy's tokens) |" in first
    assert "| ours eagle budget 8 | fp32 | 90.0 | 0.75x | 0.90x | 1.90 | yes (HF greedy's tokens) |" in first
    # the int8 rows against the int8 greedy, and exact there means that greedy's tokens
    assert "| ours eagle budget 8 [int8] | int8 | 225.0 | 1.50x | 2.25x | 1.90 | yes (the int8 greedy's tokens) |" in first
    assert "| ours lookahead W1 N3 G1 [int8] | int8 | 140.0 | 0.93x | 1.40x | – | NO |" in first
    assert "| llama.cpp greedy | llama.cpp | 100.0 | 0.83x | 1.00x | – | no (its own kernels) |" in first
    assert "| ours eagle budget 8 [int8] | int8 | 450.0 | 1.50x | 2.25x |" in second
    for part, threads, loads in ((first, "1 thread,", "0.10 at the start and 1.05 at the end"),
                                 (second, "2 threads,", "0.20 at the start and 2.10 at the end")):
        assert f"a 2-core x86_64 CPU, {threads}" in part and "2026-12-01" in part and f"load average {loads}" in part
        assert "int8 kernel on AVX512-VNNI" in part and "llama.cpp reads that very file" in part
        assert "`bench/prompts/heldout_chat.jsonl`, never tuned on" in part
    assert "2026-12-02" not in text and "cpu-one-older" not in text and "heldout_code" not in text
    table_rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| method")]
    assert len(table_rows) == 2 * len(ROWS)
    assert all(ln.split(" | ")[1] in ("fp32", "int8", "llama.cpp", "torch fp32") for ln in table_rows)


def test_older_result_files_get_their_kernel_from_the_row_name(tmp_path):
    old = [{k: v for k, v in r.items() if k != "kernel"} for r in ROWS]
    write(tmp_path, "cpu-old.json", result(1, "2026-11-27", old))
    text = readme_table.speed_block(tmp_path)
    assert "| ours greedy | fp32 |" in text and "| ours greedy [int8] | int8 |" in text
    assert "| llama.cpp greedy | llama.cpp |" in text and "| HF greedy | torch fp32 |" in text


def test_a_run_without_llama_cpp_renders_with_show(tmp_path, capsys):
    """bench.py --quick (no llama.cpp rows): --show prints its table; the llama.cpp column says –."""
    path = tmp_path / "quick.json"
    path.write_text(json.dumps(result(1, "2026-12-01", ROWS[:5], prompts="quick")))
    assert readme_table.main(["--show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| ours greedy [int8] | int8 | 150.0 | 1.00x | – |" in out and "1 thread," in out
    assert "llama.cpp reads" not in out and "never tuned on" not in out and "under load" not in out
    path.write_text(json.dumps(result(1, "2026-12-01", ROWS[:5], prompts="quick", under_load=True)))
    assert readme_table.main(["--show", str(path)]) == 0 and "Measured under load" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("{}")
    assert readme_table.main(["--show", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a bench.py result file" in err[0]


def test_no_source_says_so(tmp_path):
    assert readme_table.speed_block(tmp_path).startswith("No held-out chat run with llama.cpp rows")
