"""The automatic lookahead choice ranks real pilot runs by compression / measured step latency."""
from conftest import tiny
from decoding.engine.timing import interpolate, monotone
from decoding.methods.windows.lookahead_tune import GRID, autotune
from decoding.tuning.tune import kit

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]


def test_monotone_and_interpolate():
    c = monotone({1: 5.0, 2: 3.0, 4: 4.0, 8: 8.0})
    assert c == {1: 3.0, 2: 3.0, 4: 4.0, 8: 8.0}
    assert interpolate(c, 6) == 6.0 and interpolate(c, 16) == 16.0 and interpolate(c, 1) == 3.0


def test_autotune_with_a_given_curve_prefers_cheap_steps():
    model = tiny("llama")
    # a CPU-like curve: every extra query token costs 10% of a one-token step
    curve = {q: 1.0 + 0.1 * (q - 1) for q in (1, 2, 4, 8, 16, 32, 64, 128, 256)}
    r = autotune(kit(), model, None, PROMPT, pilot_tokens=24, curve=curve)
    ranks = [x["predicted_speedup"] for x in r["ranking"]]
    assert ranks == sorted(ranks, reverse=True) and len(ranks) == len(GRID)
    best = r["ranking"][0]
    assert (best["window"], best["ngram"], best["guesses"]) in GRID
    assert r["best"] == {k: best[k] for k in ("window", "ngram", "guesses")}
    for x in r["ranking"]:  # mean latency of the steps taken, each at its own query size
        assert abs(x["predicted_speedup"] - x["compression"] / x["step_ms"]) < 1e-9
        assert 1.0 < x["step_ms"] <= interpolate(curve, 1 + 2 * 64)
    # on this curve the paper's GPU setting (120 query tokens) cannot win
    assert (best["window"], best["ngram"]) != (15, 5)


def test_autotune_measures_a_curve_when_none_is_given():
    r = autotune(kit(), tiny("llama"), None, PROMPT, pilot_tokens=8, grid=[(2, 3, 2), (3, 4, 3)], kv_len=32)
    assert set(r["curve"]) >= {"1", "2", "4"} and all(v > 0 for v in r["curve"].values())


def test_autotune_pilots_several_prompts_together(tiny_dir):
    from decoding import load, make_drafter, run
    model, tok = load(tiny_dir, device="cpu")
    pilots = ["def f ( x ) : return x + 1 def f ( x ) :", "class A : def g ( self ) : return self . g"]
    curve = {q: 1.0 + 0.1 * (q - 1) for q in (1, 2, 4, 8, 16, 32, 64, 128)}
    r = autotune(kit(), model, tok, pilots, pilot_tokens=12, grid=[(1, 3, 1), (2, 4, 2)], curve=curve, text_span=3)
    for x in r["ranking"]:
        trs = [run(model, tok, p, "lookahead", max_new_tokens=12, trace=False,
                   drafter=make_drafter("lookahead", window=x["window"], ngram=x["ngram"], guesses=x["guesses"],
                                        text_span=3)) for p in pilots]
        steps = sum(len(t.steps) - 1 for t in trs)
        assert abs(x["compression"] - sum(len(t.output_ids) - 1 for t in trs) / steps) < 1e-9
