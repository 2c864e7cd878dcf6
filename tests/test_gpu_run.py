"""bench/gpu_run.py, the one command for a borrowed GPU, rehearsed end to end on CPU with emulated CUDA
graphs at smoke sizes: every item runs and reports, a failing item does not stop the later ones, the
docs/gpu.md lines come out, and what the machine needs fits in 64 MiB."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))


def test_rehearse_runs_the_whole_runbook(tmp_path):
    # the timeout bounds a hang, it does not time the code: ~270 s on a busy 2-core box
    r = subprocess.run([sys.executable, "bench/gpu_run.py", "--rehearse", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((tmp_path / "gpu_run.json").read_text())
    import gpu_run
    assert list(state["items"]) == [it[0] for it in gpu_run.ITEMS]
    assert all(rec["status"] == "ok" for rec in state["items"].values()), state["items"]
    cap = json.loads((tmp_path / "capture_check.json").read_text())
    assert cap["ok"] and len(cap["rows"]) >= 11
    for f in ("gpu_check.md", "gpu_memory.json", "gpu_run.md", "logs/a.log", "kernels.md"):
        assert (tmp_path / f).exists(), f
    kt = json.loads((tmp_path / "kernels.json").read_text())  # the first item: one step's kernel (CPU op) table
    assert kt["kernels"] and kt["step"]["launches"] == sum(r["calls"] for r in kt["kernels"]) > 0
    assert any(r["kernel"] == "aten::mm" and r["bytes"] for r in kt["kernels"])  # a GEMM reads its weight
    assert kt["step"]["floor_ms"] > 0 and kt["goal"]["status"] == "info"  # CPU: no GPU goal judged
    assert "| kernel | aten op | total us | share | calls | per layer | MB read | GB/s |" in (
        tmp_path / "kernels.md").read_text()
    sm = json.loads((tmp_path / "smollm2_rows.json").read_text())  # the SmolLM2 item on the embedded model
    import smollm2_rows
    assert {r["method"] for r in sm["rows"]} == {"HF greedy", "HF greedy static cache (compiled)", *smollm2_rows.OURS}
    assert all(r["same_as_hf_greedy"] for r in sm["rows"]) and not sm["errors"], sm
    assert "docs/gpu.md lines:" in r.stdout and "capture check: " in r.stdout and "runbook complete" in r.stdout
    # a second invocation skips what is recorded
    again = subprocess.run([sys.executable, "bench/gpu_run.py", "--rehearse", "--out", str(tmp_path), "--only", "c"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "[c]" not in again.stderr


def test_a_failed_item_is_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
    import gpu_run
    broken = ("broken", 5, "an item that crashes", ["bench/nope.py"], ("no_such_bench_module", []))
    fine = next(it for it in gpu_run.ITEMS if it[0] == "c")
    monkeypatch.setattr(gpu_run, "ITEMS", [broken, fine])
    state = gpu_run.main(["--rehearse", "--out", str(tmp_path)])
    assert state["items"]["broken"]["status"].startswith("failed: ModuleNotFoundError")
    assert state["items"]["c"]["status"] == "ok"
    md = (tmp_path / "gpu_run.md").read_text()
    assert "| broken |" in md and "item broken (an item that crashes): failed" in md
    from decoding.fast.graphs import emulating
    assert not emulating()  # the rehearsal leaves the process as it found it


def test_the_machine_needs_less_than_64_mib():
    import gpu_run
    f = gpu_run.needed_files()
    # the tree fits, or does once the folders the runbook never reads are moved aside (--files prints how)
    assert f["tree_bytes"] - f["spare_bytes"] < f["limit_bytes"] and f["needed_bytes"] < f["limit_bytes"], f


def test_the_first_invocation_fits_its_budget():
    import gpu_run
    first = [it for it in gpu_run.ITEMS if it[0] in gpu_run.FIRST]
    assert [it[0] for it in gpu_run.ITEMS[:len(first)]] == list(gpu_run.FIRST) and first[0][0] == "kernels"
    # every item of the first invocation starts even when each before it ran to its budget
    assert sum(it[1] for it in first) <= gpu_run.BUDGET, [(it[0], it[1]) for it in first]


def test_the_gguf_goes_in_parts_and_is_joined_and_checked(tmp_path):
    import importlib.metadata as md
    import os

    import pytest
    import smollm2_rows
    src = tmp_path / "model.gguf"
    src.write_bytes(os.urandom(10_001))
    carry = tmp_path / "carry"
    with pytest.raises(smollm2_rows.CarryError, match="no GGUF parts"):
        smollm2_rows.join(carry, pinned=None)
    m = smollm2_rows.split(src, 2, carry)
    assert [p["size"] for p in m["parts"]] == [5001, 5000] and len(m["folders"]) == 2
    site = carry / "gguf-1" / "site"  # the gguf package transformers' reader needs, found by importlib.metadata
    assert (site / "gguf" / "__init__.py").is_file() and any(d.metadata["Name"] == "gguf"
                                                              for d in md.distributions(path=[str(site)]))
    with pytest.raises(smollm2_rows.CarryError, match="not the default model"):
        smollm2_rows.join(carry)  # random bytes are not the pinned GGUF
    part2 = carry / "gguf-2" / "model.gguf.part2"
    part2.rename(tmp_path / "aside")
    with pytest.raises(smollm2_rows.CarryError, match="missing on this machine: gguf-2"):
        smollm2_rows.join(carry, pinned=None)
    (tmp_path / "aside").rename(part2)
    assert smollm2_rows.join(carry, pinned=None).read_bytes() == src.read_bytes()
    (carry / "model.gguf").unlink()
    data = bytearray(part2.read_bytes())
    data[7] ^= 1
    part2.write_bytes(bytes(data))
    with pytest.raises(smollm2_rows.CarryError, match="corrupt"):
        smollm2_rows.join(carry, pinned=None)
    assert not (carry / "model.gguf").exists()
