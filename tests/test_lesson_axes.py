"""Plot axes a class reads off a projector: every value between the lowest and highest tick (the greedy
line on "FLOPs per step" sat below the lowest), enough ticks on a roofline spanning one decade, and one
unit convention (SI: "2G") on every axis, hover and cost number."""
from __future__ import annotations

import json
import math
from pathlib import Path

from viz import costs, step_profile
from viz.common import as_trace
from viz.palette import decade_ticks, si

FIX = Path(__file__).resolve().parent / "fixtures"


def load(name):
    return as_trace(FIX / f"{name}.json")


def prof(name):
    return json.loads((FIX / f"profile_{name}.json").read_text())


def test_flops_per_step_values_sit_inside_the_ticks():
    fig = costs.compare_figure({n: (load(n), prof(n)) for n in ("greedy", "lookahead")}).to_dict()
    ax = fig["layout"]["yaxis"]
    ys = [y for tr in fig["data"] if tr.get("xaxis", "x") == "x" for y in tr["y"]]
    lo, hi = min(ax["tickvals"]), max(ax["tickvals"])
    assert all(lo <= y <= hi for y in ys), (lo, hi, min(ys), max(ys))
    assert ax["range"] == [math.log10(lo), math.log10(hi)]  # plotly shows exactly the ticked span
    assert fig["layout"]["xaxis2"]["exponentformat"] == "SI"


def test_a_one_decade_roofline_has_readable_ticks():
    ax = decade_ticks(1.3e9, 7.5e9)
    assert ax["ticktext"] == ["1G", "2G", "5G", "10G"] and ax["range"] == [9, 10]
    d = step_profile.data(load("lookahead"), prof("lookahead"))
    for name in ("intensity", "achieved"):
        axis = d["axes"][name]
        assert len([v for v in axis["tickvals"] if 10 ** axis["range"][0] <= v <= 10 ** axis["range"][1]]) >= 3


def test_one_unit_convention():
    assert [si(v) for v in (2e9, 5.2e9, 1.5e12, 4e5, 5e-4, 3)] == ["2G", "5.2G", "1.5T", "400k", "500µ", "3"]
    js = (Path(costs.__file__).parent.parent / "page" / "views.js").read_text()
    assert ".3g} FLOP" not in js and "toExponential" not in js
    roof = costs.roofline_figure(prof("lookahead"), load("lookahead")).to_dict()
    hovers = " ".join(tr.get("hovertemplate", "") for tr in roof["data"])
    assert ":.3s} FLOP" in hovers and ":.3g} FLOP" not in hovers
