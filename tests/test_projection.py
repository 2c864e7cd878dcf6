"""The 'what if on H100 / A100 / H200' projection of a recorded trace: roofline lower bound per step from
datasheet peaks, labelled as a projection; greedy of the same tokens is the baseline."""
import json
from pathlib import Path

import pytest
import torch

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


SPEC = TRACE.parent / "speculative_tree_3-2-1.json"


def test_draft_forwards_are_projected_too(capsys):
    """A speculative run's draft model forwards are on the roofline beside the target's, in their own column."""
    d = json.loads(SPEC.read_text())
    pr = project(d, ["H100"])
    r = pr["devices"]["H100"]
    assert pr["draft_forwards"] == sum(s["info"].get("draft_forwards", 0) for s in d["steps"]) > 0
    assert r["draft_ms"] > 0 and r["ms"] == pytest.approx(r["target_ms"] + r["draft_ms"])
    assert "target and draft" in pr["label"]
    assert main([str(SPEC), "--devices", "H100"]) == 0
    assert "draft ms" in capsys.readouterr().out


def test_eagle_and_medusa_drafting_is_projected():
    d = json.loads(TRACE.read_text())
    for s in d["steps"][1:]:
        s["info"] = {"drafted": True, "mode": "eagle", "draft_forwards": 3,
                     "tree": {"tokens": [1, 2, 3, 4], "parents": [-1, 0, 1, 1], "depth": [0, 1, 2, 2]}}
    d["method"], d["config"] = "eagle", {"budget": 3, "depth": 2}
    eagle = project(d, ["H100"])["devices"]["H100"]
    assert eagle["draft_ms"] > 0 and eagle["ms"] > eagle["target_ms"]
    for s in d["steps"][1:]:
        s["info"] = {"drafted": True, "mode": "medusa", "tree": s["info"]["tree"]}
    d["method"], d["config"] = "medusa", {"n_heads": 4}
    medusa = project(d, ["H100"])["devices"]["H100"]
    d["config"]["n_heads"] = 2
    assert 0 < project(d, ["H100"])["devices"]["H100"]["draft_ms"] < medusa["draft_ms"]


def test_fp32_projection_uses_the_fp32_peak():
    d = json.loads(TRACE.read_text())
    assert project(d, ["H100"], "fp32")["devices"]["H100"]["peak_flops"] == 67e12
    assert project(d, ["H100"], "bf16")["devices"]["H100"]["peak_flops"] == 989e12


@pytest.mark.parametrize("layout", ["stock", "column", "packed"])
def test_greedy_projected_against_greedy_is_one_for_every_dtype_and_layout(layout):
    """Both sides of the ratio are costed at the bytes the projected GPU reads (weights in --dtype): a
    block-packed CPU run (which records the Q4_1 / Q8_0 bytes its kernel streamed) must not look faster
    than greedy on a GPU that has no such kernel; nor may a lookahead run's projection move with them."""
    import copy

    from conftest import tiny
    from decoding import run
    from decoding.fast import blocks
    from decoding.fast.layout import apply_layout
    model = tiny("llama", seed=5)
    with torch.no_grad():  # weights that are exact blocks, as a GGUF conversion leaves them
        for name, mod in model.named_modules():
            if type(mod) is torch.nn.Linear:
                kind = "q8_0" if name == "lm_head" else "q4_1"
                mod.weight.copy_(blocks.dequantize(blocks.quantize(mod.weight, kind)))
    model = copy.deepcopy(model)
    apply_layout(model, layout)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]
    tr = run(model, None, prompt, "greedy", max_new_tokens=16)
    assert ("linear_weight_bytes" in tr.model) == (layout == "packed")
    for dtype in ("bf16", "fp16", "fp32", "tf32"):
        for name, r in project(tr, dtype=dtype)["devices"].items():
            assert r["speedup_vs_greedy"] == pytest.approx(1.0, abs=1e-9), (layout, dtype, name)
    la = run(model, None, prompt, "lookahead", max_new_tokens=16, window=3, ngram=3, guesses=3).to_dict()
    bare = copy.deepcopy(la)
    bare["model"].pop("linear_weight_bytes", None)
    bare["model"].pop("linear_weight_bytes_by_op", None)
    for dtype in ("bf16", "fp32"):
        assert project(la, dtype=dtype) == project(bare, dtype=dtype)
