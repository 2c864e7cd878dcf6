"""The benchmark program runs end to end in quick mode (correct output; no timing asserts)."""
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path[:0] = [str(BENCH), str(BENCH / "kernels"), str(BENCH / "gpu"), str(BENCH / "methods")]  # scripts by folder
import bench  # noqa: E402


def test_quick_benchmark_runs_and_greedy_modes_are_exact(tmp_path):
    rows = bench.main(["--quick", "--out", str(tmp_path)])
    names = [r["method"] for r in rows]
    assert names[0] == "HF greedy" and any("lookahead" in n for n in names) and "ours prompt lookup" in names
    assert all(r["exact"] for r in rows), [r["method"] for r in rows if not r["exact"]]
    assert all(r["tokens"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    doc = json.loads((tmp_path / "quick.json").read_text())
    assert doc["meta"]["torch"] and len(doc["rows"]) == len(rows)
    assert "| HF greedy |" in (tmp_path / "quick.md").read_text()
    # HF rows run on stock-layout copies; the engine's own layout is a separate, labelled row
    assert doc["meta"]["weight_layout"] == {"ours": "packed", "hf": "stock"}
    assert "HF greedy (packed layout)" in names


def test_bench_heads_rows_are_exact(tmp_path):
    """With a heads folder (medusa/ and eagle/, trained a few steps for the quick target) bench.py runs
    'ours medusa' and 'ours eagle' rows, checked token for token against HF greedy; without one, none."""
    from test_heads import _train
    model, tok, _, (hf_model, _), prompts = bench.quick_models()
    for kind in ("medusa", "eagle"):
        _train(model, kind, tmp_path / kind, epochs=2)
    rows = bench.bench(model, tok, None, prompts, 1, 16, 4, "budget", hf_model=hf_model, heads=tmp_path)
    assert [r["method"] for r in rows] == ["HF greedy", f"ours medusa budget {bench.HEADS_BUDGET}",
                                           f"ours eagle budget {bench.HEADS_BUDGET // 2}",
                                           f"ours eagle budget {bench.HEADS_BUDGET}",
                                           f"ours eagle budget {2 * bench.HEADS_BUDGET}",
                                           f"ours eagle adaptive budget {2 * bench.HEADS_BUDGET}",
                                           f"ours eagle adaptive budget {2 * bench.HEADS_BUDGET} draft vocab "
                                           f"{bench.DRAFT_VOCAB}"]
    assert all(r["exact"] and r["tokens"] == 16 for r in rows), rows
    assert not any("budget" in n for n in bench.contenders(model, tok, None, 4, heads=tmp_path / "none"))


def test_layout_bench_quick():
    import bench_layout
    rows = bench_layout.main(["--quick"])
    assert [r["n_query"] for r in rows] == [1, 2, 4, 8]
    assert all(r["stock_ms"] > 0 and r["column_ms"] > 0 and r["packed_unfused_ms"] > 0 for r in rows)


def test_gpu_scaling_quick_runs_on_cpu():
    import gpu_scaling
    doc = gpu_scaling.main(["--quick"])
    assert [p["n_query"] for p in doc["sweep"]["points"]] == [1, 2, 4]
    assert doc["decode_bandwidth"]["achieved_bandwidth"] > 0
    assert doc["tree_step"]["n_query"] == 8 and doc["tree_step"]["ratio"] > 0
    warm = doc["first_vs_warm"]
    assert warm["first_ms"] > 0 and warm["warm_ms"] > 0 and warm["new_tokens"] == 4
    # every timed row states its path (CPU: the dynamic default), the dynamic path is its own row
    assert all(r["path"]["label"] for r in (doc["sweep"], doc["tree_step"], warm, doc["dynamic_tree_step"]))
    assert doc["dynamic_tree_step"]["path"]["static"] is False


def test_lookahead_sources_quick():
    import lookahead_sources
    rows = lookahead_sources.main(["--quick"])
    assert len(rows) == 2 and all(r["decode_steps"] > 0 and r["compression"] >= 1 for r in rows)
    assert all(set(r["extra_tokens"]) <= {"prompt", "output", "window"} for r in rows)


def test_gpu_check_quick_writes_one_report(tmp_path):
    """The GPU session's one command, on CPU with tiny models: every item runs, every goal gets a line."""
    import gpu_check
    doc = gpu_check.main(["--quick", "--out", str(tmp_path)])
    goals = doc["goals"]
    assert {g["item"] for g in goals} == {"a", "b", "c", "d"}
    assert all(g["status"] in ("pass", "info") for g in goals), [g for g in goals if g["status"] not in ("pass", "info")]
    assert all(g["device"] and g["dtype"] and g["command"].startswith("python bench/gpu/gpu_check.py") for g in goals)
    assert doc["items"]["a"]["counts"]["passed"] > 0 and doc["items"]["a"]["counts"]["failure"] == 0
    assert {r["dtype"] for r in doc["items"]["b"]["rows"]} == {"fp32", "bf16"}
    names = [r["method"] for r in doc["items"]["d"]["rows"]]
    assert {"HF greedy", "HF greedy static cache (compiled)", "HF assisted K4", "HF prompt lookup"} <= set(names)
    env = json.loads((tmp_path / "gpu_check.json").read_text())["environment"]
    assert env["torch"] and env["transformers"] and "nvidia_smi" in env
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| a | 0 failures in the CUDA matrix |" in md and "transformers" in md


def test_gpu_check_records_a_crashed_item_and_judges_the_rest():
    import gpu_check
    graphs = {"static": True, "graphs": True, "failed": {}, "label": "static, graphs on, 9 buckets captured"}
    items = {"a": {"error": "exit 1", "tail": "CUDA error"},
             "c": {"meta": {"dtype": "bfloat16"}, "sweep": {"points": [{"ms": 7.5}], "path": graphs},
                   "tree_step": {"ratio": 1.1, "path": graphs}, "first_vs_warm": {"ratio": 3.0, "path": graphs},
                   "item_command": "x"}}
    goals = gpu_check.judge(items, False, {"nvidia_smi": "H100"})
    status = {g["goal"]: g["status"] for g in goals}
    assert status["0 failures in the CUDA matrix"] == "error"
    assert status["7B 1-token step <= 6.0 ms"] == "fail" and status["64-token tree step <= 1.3x the 1-token step"] == "pass"
    assert status["first-run step within 1.2x of a warm one"] == "fail"
    assert status["fp32 rows identical to HF greedy"] == "missing"
    # a fast row on the wrong path fails its goal: a failed capture, or the dynamic path
    for path in ({**graphs, "failed": {"64": "RuntimeError: x"}}, {"static": False, "graphs": False, "failed": {}}):
        items["c"]["tree_step"]["path"] = path
        status = {g["goal"]: g["status"] for g in gpu_check.judge(items, False, {"nvidia_smi": "H100"})}
        assert status["64-token tree step <= 1.3x the 1-token step"] == "fail"


def test_gpu_check_refuses_gpu_goals_without_cuda(tmp_path, capsys):
    import gpu_check
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--out", str(tmp_path), "--items", "c"])
    assert e.value.code == 2 and "--quick" in capsys.readouterr().err


def test_gpu_check_imports_no_app_dependencies():
    """The GPU image has no gradio or plotly: the check must not import them (or viz/app)."""
    import subprocess
    code = ("import sys; sys.path[:0] = ['bench/gpu', 'bench', '.']; import gpu_check, gpu_rows, gpu_scaling; "
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'gradio', 'plotly', 'viz', 'app', 'appkit'}); "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_gpu_memory_quick_runs_on_cpu():
    import gpu_memory
    doc = gpu_memory.main(["--quick"])
    assert doc["after_10"]["pool_caches"] <= 2 and doc["after_12"]["pool_caches"] <= 2
    assert doc["measure"] == "pool_bytes" and doc["ratio"] > 0


def test_bench_heads_sampling_rows(tmp_path):
    """bench_heads --temperature: every row samples, is timed against HF sampling by tokens/s (sampled rows
    differ in length) and cannot be checked token for token; the heads get a typical-acceptance row."""
    import bench_heads
    rows = bench_heads.main(["--temperature", "0.7", "--kinds", "eagle", "--budgets", "4", "--no-baselines",
                             "--limit", "1", "--max-new-tokens", "8", "--out", str(tmp_path)])
    assert [r["method"] for r in rows] == ["HF sampling", "ours eagle budget 4",
                                           "ours eagle budget 4, typical (NOT exact)"]
    assert all(r["exact"] is None for r in rows) and rows[0]["vs_hf_greedy"] == 1.0
    md = (tmp_path / "cpu-heads-eagle-code-T0.7.md").read_text()
    assert "vs HF sampling" in md and "– (sampling)" in md


def test_cpu_gemm_bench_smoke_has_the_library_packed_paths(tmp_path):
    """stock, column, oneDNN's and MKL's packed paths and ours, per thread count and row count."""
    import bench_cpu_gemm
    libs = bench_cpu_gemm.library_paths()
    assert libs == {"oneDNN packed": None, "MKL packed": None}, libs  # torch's CPU wheels ship both
    text = bench_cpu_gemm.main(["--rows", "1,2", "--threads", "1", "--reps", "2", "--out", str(tmp_path / "g.md")])
    head = next(ln for ln in text.splitlines() if ln.startswith("| threads"))
    assert all(v in head for v in bench_cpu_gemm.VARIANTS)
    assert sum(ln.startswith("| 1 | ") for ln in text.splitlines()) == 2
    assert "load average before" in text and "load average after" in text and "bench_cpu_gemm.py" in text
    assert (tmp_path / "g.md").read_text() == text


def _load(monkeypatch, one):
    import os
    monkeypatch.setattr(os, "getloadavg", lambda: (one, one, one))


def test_benches_refuse_readme_numbers_under_load(monkeypatch, capsys):
    """bench.py and bench_heads.py: one line and exit 2 (before loading anything) while the load is high."""
    import bench_heads
    _load(monkeypatch, 1.7)
    for prog in (bench.main, bench_heads.main):
        with pytest.raises(SystemExit) as e:
            prog(["--out", str(bench.RESULTS)])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "load average is 1.70" in err[0] and "--allow-load" in err[0]
    _load(monkeypatch, 0.2)
    assert bench.refuse_under_load(False) is None
    _load(monkeypatch, 0.9)
    assert bench.refuse_under_load(True) is None and bench.refuse_under_load(False)


def test_quick_bench_names_command_date_and_load(monkeypatch, tmp_path, capsys):
    _load(monkeypatch, 0.9)
    bench.main(["--quick", "--no-auto", "--only", "prompt lookup", "--allow-load", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "load average before: 0.90" in err and "load average after: 0.90" in err
    meta = json.loads((tmp_path / "quick.json").read_text())["meta"]
    assert meta["command"].startswith("python bench/bench.py --quick") and meta["date"] and meta["under_load"]
    md = (tmp_path / "quick.md").read_text()
    assert "Produced by `python bench/bench.py --quick" in md and "Measured under load" in md


def test_a_moved_bench_script_records_the_command_that_runs_it():
    """provenance names the caller's own path from the repository root: a script in bench/kernels/ records
    `python bench/kernels/...`, which exists (a hand-written name went stale when the scripts moved)."""
    import bench_layout
    cmd = bench.provenance(bench_layout.__file__, ["--quick"], "none")["command"]
    assert cmd == "python bench/kernels/bench_layout.py --quick"
    assert (BENCH.parent / cmd.split()[1]).is_file()


def test_readme_table_refuses_under_load_and_names_its_sources(monkeypatch, tmp_path, capsys):
    import readme_table
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    row = {"method": "HF greedy", "tokens_per_s": 10.0, "vs_hf_greedy": 1.0, "exact": True}
    meta = {"prompts": "code", "command": "python bench/bench.py --prompts code", "date": "2026-01-02", "runs": 5}
    (res / "cpu-a.json").write_text(json.dumps({"meta": meta, "rows": [row]}))
    (res / "cpu-b.json").write_text(json.dumps({"meta": {**meta, "under_load": True}, "rows": [row]}))
    monkeypatch.setattr(readme_table, "ROOT", tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    _load(monkeypatch, 2.5)
    assert readme_table.main([], readme) == 2 and readme.read_text() == "# x\n"
    assert len(capsys.readouterr().err.strip().splitlines()) == 2  # the load line, then the one refusal line
    _load(monkeypatch, 0.1)
    assert readme_table.main([], readme) == 0
    text = readme.read_text()
    assert "Produced by `python bench/bench.py --prompts code` (prompts `code`) on 2026-01-02" in text
    assert "cpu-a" in text and "cpu-b" not in text and "under load" not in text
    _load(monkeypatch, 2.5)
    assert readme_table.main(["--allow-load"], readme) == 0 and "Written under load" in readme.read_text()


def test_readme_table_writes_the_performance_page_not_the_readme(monkeypatch, tmp_path):
    """The results tables live in docs/performance.md (the README links there and stays short): the script's
    default target is that page's marked block, and the README is left as it was."""
    import readme_table
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    row = {"method": "HF greedy", "tokens_per_s": 10.0, "vs_hf_greedy": 1.0, "exact": True}
    meta = {"prompts": "code", "command": "python bench/bench.py --prompts code", "date": "2026-01-02"}
    (res / "cpu-a.json").write_text(json.dumps({"meta": meta, "rows": [row]}))
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "performance.md"
    page.write_text(f"# Performance\n\nbefore\n\n{readme_table.BEGIN}\nold\n{readme_table.END}\n\nafter\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{readme_table.BEGIN}\nold\n{readme_table.END}\n")
    monkeypatch.setattr(readme_table, "ROOT", tmp_path)
    _load(monkeypatch, 0.1)
    assert readme_table.main([]) == 0
    text = page.read_text()
    assert text.startswith("# Performance\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old" not in text and "cpu-a" in text and "| HF greedy |" in text
    assert readme.read_text() == f"# x\n\n{readme_table.BEGIN}\nold\n{readme_table.END}\n"


def test_the_shipped_performance_page_holds_the_generated_block():
    """bench/readme_table.py rewrites docs/performance.md between its markers: both must be there, once."""
    import readme_table
    text = (Path(__file__).resolve().parent.parent / "docs" / "performance.md").read_text()
    assert text.count(readme_table.BEGIN) == 1 and text.count(readme_table.END) == 1
    assert text.index(readme_table.BEGIN) < text.index(readme_table.END)


def test_under_load_discounts_the_benchs_own_threads():
    """A 1-thread bench alone leaves a load average near 1.0 behind: that is not load; other work is."""
    from bench import under_load
    assert not under_load(0.3, 1.0, 1) and not under_load(0.49, 2.4, 2)
    assert under_load(0.6, 0.7, 1) and under_load(0.3, 2.2, 1)


def test_readme_speed_table_comes_from_the_newest_quiet_heldout_run_with_llama_cpp(monkeypatch, tmp_path):
    """The README's CPU speed block: generated from the newest held-out chat result that has our greedy and
    llama.cpp's greedy (never one measured under load), each row against both; --check says when it is stale."""
    import readme_table
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)

    def row(method, rate, exact=True, acc=None):
        return {"method": method, "tokens_per_s": rate, "vs_hf_greedy": 1.0, "exact": exact, "mean_accepted": acc}
    meta = {"prompts": "heldout_chat", "command": "python bench/bench.py --prompts heldout_chat", "date": "2026-01-02",
            "runs": 2, "cpus": 2, "machine": "x86_64", "torch": "2.13.0+cpu", "max_new_tokens": 96, "load_before": 0.1}
    rows = [row("ours greedy", 100.0, acc=1.0), row("ours eagle", 120.0, acc=2.0), row("llama.cpp greedy", 80.0, False)]
    (res / "cpu-old.json").write_text(json.dumps({"meta": {**meta, "date": "2026-01-01"}, "rows": rows}))
    (res / "cpu-new.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    (res / "cpu-loaded.json").write_text(json.dumps({"meta": {**meta, "date": "2026-02-01", "under_load": True},
                                                     "rows": rows}))
    (res / "cpu-nollama.json").write_text(json.dumps({"meta": {**meta, "date": "2026-03-01"}, "rows": rows[:2]}))
    monkeypatch.setattr(readme_table, "ROOT", tmp_path)
    assert {t: p.name for t, p in readme_table.speed_sources().items()} == {1: "cpu-new.json"}
    block = readme_table.speed_block()
    assert "| ours eagle | fp32 | 120.0 | 1.20x | 1.50x | 2.00 | yes (HF greedy's tokens) |" in block
    assert "| llama.cpp greedy | llama.cpp | 80.0 | 0.80x | 1.00x | – | no (its own kernels) |" in block
    assert "Produced by `python bench/bench.py --prompts heldout_chat` (`bench/results/cpu-new.json`)" in block
    assert "2026-01-02" in block
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "performance.md"
    page.write_text("# P\n")
    front = tmp_path / "README.md"
    front.write_text(f"# x\n\n{readme_table.SPEED_BEGIN}\nold\n{readme_table.SPEED_END}\n\nafter\n")
    assert readme_table.main(["--check"], page, front) == 1
    _load(monkeypatch, 2.5)
    assert readme_table.main(["--allow-load"], page, front) == 0 and "old" in front.read_text()  # never under load
    _load(monkeypatch, 0.1)
    assert readme_table.main([], page, front) == 0
    assert readme_table.main(["--check"], page, front) == 0
    text = front.read_text()
    assert "old" not in text and "| ours eagle | fp32 | 120.0 |" in text and text.endswith(f"{readme_table.SPEED_END}\n\nafter\n")


def test_the_shipped_readme_speed_table_is_current():
    """The README's speed numbers are exactly what bench/results holds (python bench/readme_table.py writes them)."""
    import readme_table
    assert readme_table.SPEED_BEGIN in (readme_table.ROOT / "README.md").read_text()
    assert readme_table.speed_sources()
    assert readme_table.check() == []  # both generated blocks: the README's and docs/performance.md's


def _result(threads: int, rows: dict[str, tuple[float, float]]) -> dict:
    return {"meta": {"threads": threads, "command": f"python bench/bench.py --threads {threads}", "date": "d",
                     "load_before": 0.1, "load_after": 0.2, "cpu": "a CPU"},
            "rows": [{"method": m, "tokens_per_s": tps, "compression": comp} for m, (tps, comp) in rows.items()]}


def test_thread_model_fits_amdahl_per_row_and_floors_at_the_weight_stream(tmp_path, capsys):
    """Measured 1/2-thread columns are the files' own; the modelled ones follow t(n) = s + p/n on the two
    points, floored by weight bytes / compression / bandwidth; bad input is one line and exit 2."""
    sys.path.insert(0, str(BENCH / "compare"))
    import thread_model
    # greedy: 10 -> 16 tok/s (0.1 s -> 0.0625 s: p = 0.075, s = 0.025); a method 12 -> 24 (all parallel)
    one = _result(1, {"ours greedy": (10.0, 1.0), "ours eagle": (12.0, 1.5)})
    two = _result(2, {"ours greedy": (16.0, 1.0), "ours eagle": (24.0, 1.5)})
    assert thread_model.model_row(0.1, 0.0625, 1.0, 4, 96.6, 1e9) == pytest.approx(0.025 + 0.075 / 4)
    assert thread_model.model_row(0.1, 0.0625, 1.0, 8, 96.6, 1.0) == pytest.approx(0.0966)  # the stream's floor
    assert thread_model.model_row(0.1, 0.12, 1.0, 4, 96.6, 1e9) == pytest.approx(0.1)  # slower at 2: no parallel part
    md = thread_model.table(one, two, 96.6, 1e9)
    eagle = next(line for line in md.splitlines() if line.startswith("| ours eagle"))
    # 8 cores: greedy 1 / (0.025 + 0.075 / 8) = 29.1 tok/s, eagle 1 / (1/12 / 8) = 96.0 tok/s -> 3.30x
    assert "12.0 (1.20x)" in eagle and "24.0 (1.50x)" in eagle and "96.0 (3.30x)" in eagle, eagle
    assert "Modelled, not measured" in md
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(one)), b.write_text(json.dumps(two))
    assert thread_model.main([str(b), str(a)]) == 2  # the files swapped
    assert thread_model.main([str(a), str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("thread_model: ") for e in err)
    assert thread_model.main([str(a), str(b), "--out", str(tmp_path / "t.md")]) == 0
    assert "| ours greedy |" in (tmp_path / "t.md").read_text()
