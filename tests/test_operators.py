"""Per-operator breakdown of a step on the roofline: its FLOPs add up to the step's (the FlopCounter-checked
formulas in profiling/flops.py), shares add to 1, wider steps raise intensity, the CLI prints it."""
import json
from pathlib import Path

import pytest

from profiling.flops import arch_of, attention_flops, linear_flops
from profiling.operators import main, operators, step_breakdown

TRACE = Path(__file__).resolve().parent.parent / "assets" / "traces" / "lookahead_W5_N4_G5.json"


def test_operator_flops_add_up_to_the_step():
    d = json.loads(TRACE.read_text())
    a = arch_of(d["model"]["config"])
    b = step_breakdown(d, device="H100")
    s = d["steps"][b["step"]]
    assert b["n_query"] == max(x["n_query"] for x in d["steps"] if x["kind"] == "decode")
    ops = {o["name"]: o for o in b["operators"]}
    lin = linear_flops(a, s["n_query"])
    assert ops["lm_head"]["step_flops"] == lin["lm_head"]
    assert sum(o["step_flops"] for n, o in ops.items() if n not in ("lm_head", "attention")) == \
        lin["attn_proj"] + lin["mlp"]
    assert ops["attention"]["step_flops"] == attention_flops(a, s["n_query"], s["kv_len"])
    assert sum(o["share"] for o in ops.values()) == pytest.approx(1.0)
    assert all(o["bound"] in ("memory", "compute") for o in ops.values()) and "not measured" in b["label"]


def test_wider_steps_have_higher_intensity():
    a = arch_of(json.loads(TRACE.read_text())["model"]["config"])
    one, wide = operators(a, 1, 100, 2), operators(a, 64, 100, 2)
    for x, y in zip(one, wide):
        assert y["intensity"] > x["intensity"], x["name"]


def test_cli(capsys):
    assert main([str(TRACE), "--step", "0", "--device", "A100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step 0:") and "mlp_down" in out and "A100" in out
    assert main([str(TRACE), "--step", "999"]) == 2
    assert "step 999 is not in the trace" in capsys.readouterr().err
