"""The 'what if on H100 / A100 / H200' projection of a recorded trace: roofline lower bound per step from
datasheet peaks, labelled as a projection; greedy of the same tokens is the baseline."""
import json
from pathlib import Path

import pytest

from profiling.calibrate import DATASHEET
from profiling.flops import trace_costs
from profiling.project import main, project

TRACE = Path(__file__).resolve().parent.parent / "assets" / "traces" / "lookahead_W5_N4_G5.json"


def test_projection_is_the_sum_of_per_step_roofline_times():
    d = json.loads(TRACE.read_text())
    pr = project(d)
    assert "projection" in pr["label"] and "not a measurement" in pr["label"]
    costs = trace_costs(d, dtype="bfloat16")
    for name, r in pr["devices"].items():
        peak = DATASHEET[name]
        expect = sum(max(c["flops"] / peak["flops"], c["bytes"] / peak["bandwidth"]) for c in costs) * 1e3
        assert r["ms"] == pytest.approx(expect)
        assert r["speedup_vs_greedy"] == pytest.approx(r["greedy_ms"] / r["ms"])
        assert r["tokens_per_s"] == pytest.approx(len(d["output_ids"]) / (r["ms"] / 1e3))
    dev = pr["devices"]
    assert dev["H200"]["ms"] < dev["H100"]["ms"] < dev["A100"]["ms"]  # decoding is memory-bound: bandwidth rules
    # fewer, wider steps: faster than greedy, but never more than the step-count ratio (wider steps cost more)
    ratio = pr["greedy_steps"] / pr["steps"]
    assert 1.0 < dev["H100"]["speedup_vs_greedy"] <= ratio


def test_cli_prints_a_labelled_table_and_refuses_unknown_devices(capsys, tmp_path):
    assert main([str(TRACE), "--devices", "A100,H100,H200"]) == 0
    out = capsys.readouterr().out
    assert "projection" in out and all(n in out for n in ("A100", "H100", "H200"))
    assert main([str(TRACE), "--devices", "B999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown device B999" in err[0]
    (tmp_path / "x.json").write_text("{}")
    assert main([str(tmp_path / "x.json")]) == 2
