"""EAGLE's tree sized per step from the draft's confidence and the row-cost curve (decoding/methods/row_cost.py):
the pricing rules on their own, and whole runs that stay HF greedy's tokens whatever the curve says."""
from __future__ import annotations

import itertools

import pytest

from conftest import hf_greedy, tiny
from decoding import Sampling
from decoding.api import run
from decoding.methods import row_cost
from decoding.methods.row_cost import PRIOR_TOKENS, RowCost, parse_curve
from test_heads import PROMPTS, _train


@pytest.fixture(scope="module")
def eagle(tmp_path_factory):
    model = tiny("llama")
    return model, _train(model, "eagle", tmp_path_factory.mktemp("eagle"))


def test_keep_takes_the_best_prefix_of_a_non_convex_curve():
    # rows 1..3 cost 1 ms each more, the 4th row 10 ms more (a new kernel tile), then 1 ms again
    cost = RowCost({1: 10.0, 2: 11.0, 3: 12.0, 4: 22.0, 5: 23.0, 8: 26.0})
    r = cost.rate()
    assert r == pytest.approx(PRIOR_TOKENS / (PRIOR_TOKENS * 10.0))  # the 1-row step's rate: 0.1 token/ms
    assert cost.keep([0.9, 0.5, 0.3, 0.2]) == 2  # 3 nodes = 4 rows: 10 ms more, 1.0 token at the rate
    assert cost.keep([0.9, 0.5, 0.3, 0.3, 0.3, 0.3, 0.3]) == 7  # past the jump, cheap rows pay it back
    assert cost.keep([0.05, 0.04]) == 0  # below 0.1 ms x 1: a plain step
    assert cost.keep([]) == 0


def test_rate_and_calibration_follow_the_run():
    cost = RowCost({1: 10.0, 8: 17.0})
    cost.observe(predicted=3.0, new_tokens=1)  # the draft promised 3 tokens, the step gave none beyond the bonus
    assert cost.scale() == pytest.approx(0.25)  # (0 + 1) / (3 + 1)
    cost.tokens, cost.ms = 40.0, 200.0  # 0.2 token/ms so far
    assert cost.rate() == pytest.approx(44.0 / 240.0)
    cost.start()
    assert cost.scale() == 1.0 and cost.rate() == pytest.approx(0.1) and cost.level_ms is None
    cost.level_took(2.0)
    assert cost.worth_level(0.31, 1) and not cost.worth_level(0.29, 1)  # 0.1 x (2 ms + 1 ms)


@pytest.mark.parametrize("text", ["", "1:5", "2:5,4:8", "1:5,x:3", "1:0,2:3", "1-5,2-6"])
def test_bad_curves_are_refused(text):
    with pytest.raises(ValueError, match="row_ms"):
        parse_curve(text)


@pytest.mark.parametrize("row_ms, plain", [(None, None), ("1:1,64:1.000001", False), ("1:1,2:1000", True)],
                         ids=["measured", "free rows", "dear rows"])
def test_adaptive_eagle_is_exact_whatever_the_curve(eagle, row_ms, plain):
    """Greedy output is HF greedy's with the measured curve, with rows so cheap every candidate is kept and
    with rows so dear no node ever is (every step a plain target step)."""
    model, heads = eagle
    for prompt in PROMPTS:
        want = hf_greedy(model, prompt, 40)
        tr = run(model, None, prompt, "eagle", max_new_tokens=40, heads=heads, budget=8, adaptive=1, row_ms=row_ms)
        assert tr.output_ids == want
        assert tr.config["adaptive"] is True and tr.config["row_ms"]["1"] > 0
        sizes = [len(s.info["tree"]["tokens"]) for s in tr.steps if "tree" in s.info]
        if plain is True:
            assert sizes and max(sizes) == 1 and len(tr.steps) >= 40
        elif plain is False:  # nothing is too dear: the budget binds, as without adaptive
            assert max(sizes) == 9


def steady_clock(ms: float):
    """A clock that reads `ms` later at every call: the going rate and the levels' times of a machine whose
    step costs about what the curve below says (a step reads it 2-4 times), whatever the machine's real load.
    With the wall clock, a loaded machine made every step slow, the rate low and every tree the whole budget."""
    reads = itertools.count()
    return lambda: next(reads) * ms / 1e3


def test_adaptive_keeps_fewer_rows_where_the_draft_is_unsure(eagle, monkeypatch):
    """At a moderate row price, trees vary in size step by step (not all the budget, not all empty); on a
    steady clock the sizes are the same run after run."""
    model, heads = eagle
    seen = []
    for _ in range(2):
        monkeypatch.setattr(row_cost, "clock", steady_clock(5.0))
        tr = run(model, None, PROMPTS[1], "eagle", max_new_tokens=40, heads=heads, budget=8, adaptive=1,
                 row_ms="1:10,2:10.7,16:20")
        assert tr.output_ids == hf_greedy(model, PROMPTS[1], 40)
        seen.append([len(s.info["tree"]["tokens"]) for s in tr.steps[1:] if "tree" in s.info])
    sizes = set(seen[0])
    assert len(sizes) > 1 and max(sizes) > 1, sizes
    assert seen[0] == seen[1]


def test_adaptive_bad_input_is_refused(eagle):
    model, heads = eagle
    with pytest.raises(ValueError, match="adaptive is on or off"):
        run(model, None, PROMPTS[0], "eagle", max_new_tokens=4, heads=heads, adaptive=2)
    with pytest.raises(ValueError, match="row_ms"):
        run(model, None, PROMPTS[0], "eagle", max_new_tokens=4, heads=heads, adaptive=1, row_ms="fast")
    with pytest.raises(ValueError, match="greedy trees only"):
        run(model, None, PROMPTS[0], "eagle", max_new_tokens=4, heads=heads, adaptive=1,
            sampling=Sampling(0.8, seed=0))


@pytest.mark.parametrize("row_ms", [None, "1:1,64:1.000001", "1:1,2:1000", "1:10,2:10.5,16:17.5"],
                         ids=["measured", "free rows", "dear rows", "moderate"])
def test_adaptive_retrieval_is_exact_whatever_the_curve(tmp_path, row_ms):
    """Retrieval's nodes priced the same way (a node's probability: its share of the continuations): HF
    greedy's tokens from the datastore and the suffix cache; dear rows make every step a plain step."""
    from test_retrieval import PROMPT, store_of
    from decoding.methods.retrieve.suffix_cache import HISTORY
    model = tiny("llama")
    ref = hf_greedy(model, PROMPT, 40)
    ds = store_of(model, tmp_path / "ds")
    for params in (dict(datastore=ds, budget=16), dict()):
        HISTORY.clear()
        tr = run(model, None, PROMPT, "retrieval", max_new_tokens=40, adaptive=1, row_ms=row_ms, **params)
        assert tr.output_ids == ref, params
        assert tr.config["adaptive"] is True and tr.config["row_ms"]["1"] > 0
        sizes = [len(s.info["tree"]["tokens"]) for s in tr.steps if "tree" in s.info]
        if row_ms == "1:1,2:1000":
            assert max(sizes) == 1
        if row_ms == "1:1,64:1.000001" and "datastore" in params:  # free rows: the length rule alone binds
            HISTORY.clear()  # the same history as the adaptive run had: none
            plain = run(model, None, PROMPT, "retrieval", max_new_tokens=40, **params)
            assert [len(s.info["tree"]["tokens"]) for s in plain.steps if "tree" in s.info] == sizes
    HISTORY.clear()
    with pytest.raises(ValueError, match="adaptive is on or off"):
        run(model, None, PROMPT, "retrieval", max_new_tokens=4, adaptive=3)
    with pytest.raises(ValueError, match="greedy steps only"):
        run(model, None, PROMPT, "retrieval", max_new_tokens=4, adaptive=1, sampling=Sampling(0.8, seed=0))


def test_cli_adaptive_reaches_retrieval_and_stays_refused_elsewhere(tiny_dir, tmp_path, capsys):
    """--adaptive: retrieval (and eagle) price their trees; a method without it refuses it in one line."""
    import json
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from decoding.cli.main import main
    js = tmp_path / "run.json"
    assert main(["generate", "--model", tiny_dir, "--method", "retrieval", "--adaptive", "--prompt",
                 "def x ( y ) : return y def x ( y ) :", "--max-new-tokens", "12", "--json", str(js)]) == 0
    d = json.loads(js.read_text())
    model, tok = AutoModelForCausalLM.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)
    assert d["output_ids"] == hf_greedy(model, tok("def x ( y ) : return y def x ( y ) :")["input_ids"], 12)
    assert d["config"]["adaptive"] is True
    capsys.readouterr()
    assert main(["generate", "--model", tiny_dir, "--method", "lookahead", "--adaptive", "--prompt", "def x",
                 "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--adaptive needs --method prompt_lookup, speculative, eagle or retrieval" in err[0]


@pytest.mark.parametrize("row_ms", [None, "1:1,64:1.000001", "1:1,2:1000", "1:10,2:12,16:30"],
                         ids=["measured", "free rows", "dear rows", "moderate"])
def test_adaptive_prompt_lookup_is_exact_and_copies_as_far_as_pays(row_ms, monkeypatch):
    """Prompt lookup's copies priced by the run's acceptance per position: HF greedy's tokens whatever the
    curve; free rows copy as far as without pricing, dear rows make every step a plain step. On a steady clock
    (the going rate is timed: a loaded machine would change the sizes), as the EAGLE test below."""
    from decoding.methods import row_cost
    if row_ms is not None:  # "measured" times the real curve, and its checks do not depend on the sizes
        monkeypatch.setattr(row_cost, "clock", steady_clock(2.0))
    model = tiny("llama")
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12, 5, 6, 7]
    ref = hf_greedy(model, prompt, 40)
    tr = run(model, None, prompt, "prompt_lookup", max_new_tokens=40, adaptive=1, row_ms=row_ms)
    assert tr.output_ids == ref
    assert tr.config["adaptive"] is True and tr.config["row_ms"]["1"] > 0
    sizes = [len(s.tokens) for s in tr.steps[1:]]
    plain = run(model, None, prompt, "prompt_lookup", max_new_tokens=40)
    if row_ms == "1:1,2:1000":
        assert max(sizes) == 1
    if row_ms == "1:1,64:1.000001":
        assert sizes == [len(s.tokens) for s in plain.steps[1:]]
    if row_ms == "1:10,2:12,16:30":  # the going rate is the curve's: rows dear enough that some copies stop short
        assert max(sizes) > 1 and sum(sizes) < sum(len(s.tokens) for s in plain.steps[1:])
    with pytest.raises(ValueError, match="adaptive is on or off"):
        run(model, None, prompt, "prompt_lookup", max_new_tokens=4, adaptive=2)
    with pytest.raises(ValueError, match="greedy steps only"):
        run(model, None, prompt, "prompt_lookup", max_new_tokens=4, adaptive=1, sampling=Sampling(0.8, seed=0))


def busy():
    """A thread spinning beside the run (the GIL and a core taken): the machine of a shared classroom CPU."""
    import threading
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))
    t = threading.Thread(target=spin, daemon=True)
    t.start()
    return stop, t


@pytest.mark.parametrize("method", ["prompt_lookup", "retrieval"])
def test_the_same_preset_takes_the_same_steps_under_any_load(method, monkeypatch):
    """Sized per step, the same click takes the same steps: quiet, with a busy thread beside the run, and on a
    clock 50x slower. The going rate is the curve's (row_cost.py), not the clock's: timed, a lesson's prompt
    lookup took 91 steps in one run and 128 in the next."""
    import threading
    from decoding.methods.retrieve.suffix_cache import HISTORY
    model = tiny("llama")
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12, 5, 6, 7]
    curve = "1:10,2:10.5,16:17.5"

    def steps():
        HISTORY.clear()
        tr = run(model, None, prompt, method, max_new_tokens=40, adaptive=1, row_ms=curve)
        assert tr.output_ids == hf_greedy(model, prompt, 40)
        return [len(s.tokens) for s in tr.steps]
    quiet = steps()
    stop, t = busy()
    try:
        loaded = steps()
    finally:
        stop.set()
        t.join()
    monkeypatch.setattr(row_cost, "clock", steady_clock(500.0))  # every read half a second later
    slow = steps()
    assert quiet == loaded == slow
    assert len(set(quiet[1:])) > 1, quiet  # the sizes do vary step by step: the pricing decides something
    assert threading.active_count() >= 1
