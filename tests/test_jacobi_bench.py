"""bench/methods/jacobi_reference.py runs end to end in quick mode (tiny model): every greedy row identical to HF
greedy, Jacobi and lookahead rows present (no timing asserts: the machine is shared)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "methods"))


def test_jacobi_reference_bench_quick():
    import jacobi_reference
    doc = jacobi_reference.main(["--quick"])
    assert [r["method"] for r in doc["jacobi_vs_lookahead"]][:4] == ["jacobi K2", "jacobi K4", "jacobi K8", "jacobi K16"]
    assert all(r["exact"] for r in doc["jacobi_vs_lookahead"])
    assert all(r["exact"] for r in doc["edit_tasks"]) and len(doc["edit_tasks"]) == 6
    tasks = jacobi_reference.edit_tasks()
    assert all(t["input"] != jacobi_reference.MODULE.replace("NAME", t["name"]) for t in tasks)  # typos are in
