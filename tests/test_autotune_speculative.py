"""The speculative autotune times real pilot runs of each shape against greedy and ranks them."""
from conftest import tiny
from decoding.methods.draft_model.shape_tune import SHAPES, autotune_speculative, label
from decoding.tuning.tune import kit

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]


def test_ranks_shapes_by_measured_speedup():
    target, draft = tiny("llama", seed=0), tiny("llama", seed=0, layers=1)
    shapes = [dict(draft_tokens=2), dict(tree=[2, 1]), dict(draft_tokens=3, staged=True)]
    r = autotune_speculative(kit(), target, draft, None, PROMPT, pilot_tokens=12, shapes=shapes, reps=1)
    speedups = [x["speedup"] for x in r["ranking"]]
    assert speedups == sorted(speedups, reverse=True) and all(s > 0 for s in speedups)
    assert r["best"] == r["ranking"][0]["shape"] and r["best"] in shapes
    assert all(x["compression"] >= 1 for x in r["ranking"]) and r["greedy_tokens_per_s"] > 0
    assert [label(s) for s in shapes] == ["chain K2", "tree 2,1", "staged chain K3"]
    assert len({label(s) for s in SHAPES}) == len(SHAPES)
