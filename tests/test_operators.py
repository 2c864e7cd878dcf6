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
        if x["flops"]:  # the embedding rows and norms are bytes only
            assert y["intensity"] > x["intensity"], x["name"]


def test_cli(capsys):
    assert main([str(TRACE), "--step", "0", "--device", "A100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step 0:") and "mlp_down" in out and "A100" in out
    assert main([str(TRACE), "--step", "999"]) == 2
    assert "step 999 is not in the trace" in capsys.readouterr().err


def test_the_peak_follows_the_dtype(capsys):
    """An fp32 trace is divided by the FP32 rate, not the bf16 tensor-core peak; --dtype picks another."""
    d = json.loads(TRACE.read_text())
    assert d["model"]["dtype"] == "float32"
    b = step_breakdown(d, device="H100")
    assert b["peak"]["flops"] == 67e12 and b["dtype"] == "fp32"
    assert step_breakdown(d, device="H100", dtype="bf16")["peak"]["flops"] == 989e12
    assert step_breakdown(d, device="A100", dtype="tf32")["peak"]["flops"] == 156e12
    assert main([str(TRACE), "--device", "H100"]) == 0
    assert "(67 TFLOP/s" in capsys.readouterr().out
    assert main([str(TRACE), "--device", "H100", "--dtype", "bf16"]) == 0
    assert "(989 TFLOP/s" in capsys.readouterr().out


def test_operator_breakdown_figure_escapes_trace_text():
    from decoding.trace import Trace
    from viz.summaries.costs import operators_data, operators_figure
    tr = Trace.from_dict(json.loads(TRACE.read_text()))
    evil = "<img src=x onerror=alert(1)>"
    fig = operators_figure({evil: (tr, None)}, peak={"name": evil, "flops": 1e11, "bandwidth": 2e10})
    data = operators_data({"m": (tr, None)}, peak={"name": "x", "flops": 1e11, "bandwidth": 2e10})
    assert data[0]["operators"][-1] == "lm_head" and all(t > 0 for t in data[0]["time_us"])
    text = fig.to_json()
    assert "<img" not in text and "operator breakdown" in fig.layout.title.text.lower()
    assert len(fig.data) == 1 and list(fig.data[0].y) == data[0]["time_us"]


@pytest.mark.parametrize("blocks", [None, 96_000_000])
def test_operator_bytes_add_up_to_what_profile_costs_the_step(blocks, capsys, tmp_path):
    """One accounting of bytes per step: the operators' rows add up to flops.trace_costs' bytes for that
    step (what `profile` reports), also for a block-kernel run whose Linears read model.linear_weight_bytes;
    a what-if in another dtype ignores the recorded size in both."""
    from profiling.flops import trace_costs
    d = json.loads(TRACE.read_text())
    if blocks is not None:
        d["model"]["linear_weight_bytes"] = blocks
    for dtype, storage in ((None, None), ("bf16", "bfloat16")):
        costs = trace_costs(d, dtype=storage)
        for step in (0, None):
            b = step_breakdown(d, step=step, device="H100", dtype=dtype)
            assert sum(o["step_bytes"] for o in b["operators"]) == pytest.approx(costs[b["step"]]["bytes"], rel=1e-9)
            assert b["step_bytes"] == pytest.approx(costs[b["step"]]["bytes"], rel=1e-9)
    (tmp_path / "t.json").write_text(json.dumps(d))
    assert main([str(tmp_path / "t.json"), "--step", "1"]) == 0
    assert f"step total: {trace_costs(d)[1]['bytes'] / 1e6:.1f} MB" in capsys.readouterr().out


def test_each_operator_reads_its_own_blocks():
    """A block-packed run whose LM head is Q8_0 (8.5 bits a weight) and layers Q4_1 (5 bits): the LM head's
    row carries its own blocks' bytes, not the layers' rate spread per parameter; the rows still add up to
    the step's bytes (what `profile` costs it)."""
    import torch

    from conftest import tiny
    from decoding import run
    from decoding.fast import blocks
    from decoding.fast.layout import apply_layout
    from profiling.flops import trace_costs
    model = tiny("llama", seed=5, hidden=64)
    with torch.no_grad():
        for name, mod in model.named_modules():
            if type(mod) is torch.nn.Linear:
                kind = "q8_0" if name == "lm_head" else "q4_1"
                mod.weight.copy_(blocks.dequantize(blocks.quantize(mod.weight, kind)))
    apply_layout(model, "packed")
    tr = run(model, None, [5, 6, 7, 8, 9], "greedy", max_new_tokens=4)
    head = model.lm_head.panels
    by_op = tr.model["linear_weight_bytes_by_op"]
    assert model.lm_head.storage == "q8_0" and by_op["lm_head"] == head.numel() * head.element_size()
    assert sum(by_op.values()) == tr.model["linear_weight_bytes"] and "other" not in by_op
    b = step_breakdown(tr, step=1, device="H100")
    rows = {o["name"]: o for o in b["operators"]}
    assert rows["lm_head"]["bytes"] == pytest.approx(by_op["lm_head"] + 1 * 64 * 4)  # + its logits row (fp32)
    assert sum(o["step_bytes"] for o in b["operators"]) == pytest.approx(trace_costs(tr)[1]["bytes"], rel=1e-9)
    d = tr.to_dict()
    d["model"]["linear_weight_bytes_by_op"] = {**by_op, "lm_head": by_op["lm_head"] + 1}  # does not add up
    spread = {o["name"]: o for o in step_breakdown(d, step=1, device="H100")["operators"]}
    assert spread["lm_head"]["bytes"] < rows["lm_head"]["bytes"]  # ignored: the even spread of the total
