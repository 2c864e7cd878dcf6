"""EOS and max-new-tokens edges, and the trace's JSON round-trip."""
import json

import pytest

from conftest import hf_greedy, tiny
from decoding import Trace, generate, make_drafter

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]
METHODS = [("greedy", {}), ("lookahead", dict(window=5, ngram=4, guesses=5)), ("prompt_lookup", {})]


@pytest.mark.parametrize("method,params", METHODS)
@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_exactly_max_new_tokens(tiny_models, method, params, n):
    model = tiny_models["llama"]
    tr = generate(model, PROMPT, make_drafter(method, **params), max_new_tokens=n)
    assert tr.output_ids == hf_greedy(model, PROMPT, n)
    assert len(tr.output_ids) == n and tr.stop_reason == "max_new_tokens"


@pytest.mark.parametrize("method,params", METHODS)
def test_stops_at_eos_inside_a_multi_token_accept(tiny_models, method, params):
    """Pick as EOS a token that greedy emits late in a multi-token step: nothing after it may leak."""
    model = tiny_models["llama"]
    full = generate(model, PROMPT, make_drafter(method, **params), max_new_tokens=40)
    ref_full = hf_greedy(model, PROMPT, 40)
    assert full.output_ids == ref_full
    eos = ref_full[9]
    first = ref_full.index(eos)
    tr = generate(model, PROMPT, make_drafter(method, **params), max_new_tokens=40, eos_token_id=eos)
    assert tr.output_ids == ref_full[:first + 1] == hf_greedy(model, PROMPT, 40, eos=eos)
    assert tr.stop_reason == "eos"


def test_eos_list_and_first_token_eos(tiny_models):
    model = tiny_models["llama"]
    ref = hf_greedy(model, PROMPT, 5)
    tr = generate(model, PROMPT, make_drafter("lookahead"), max_new_tokens=5, eos_token_id=[999, ref[0]])
    assert tr.output_ids == ref[:1] and len(tr.steps) == 1


def test_bad_arguments(tiny_models):
    model = tiny_models["llama"]
    with pytest.raises(ValueError):
        generate(model, [], max_new_tokens=4)
    with pytest.raises(ValueError):
        generate(model, PROMPT, max_new_tokens=0)
    for bad in [dict(window=0), dict(ngram=1), dict(guesses=-1), dict(window=65)]:
        with pytest.raises(ValueError):
            make_drafter("lookahead", **bad)
    with pytest.raises(ValueError):
        make_drafter("beam")


def test_trace_json_round_trip(tiny_models, tmp_path):
    model = tiny_models["gpt2"]
    tr = generate(model, PROMPT, make_drafter("lookahead", window=4, ngram=3, guesses=3), max_new_tokens=30)
    path = tmp_path / "trace.json"
    tr.save(path)
    back = Trace.load(path)
    assert back.to_dict() == json.loads(path.read_text())
    assert back.output_ids == tr.output_ids and len(back.steps) == len(tr.steps)
    st = back.stats()
    assert st["steps"] == len(tr.steps) and st["new_tokens"] == 30
    assert abs(st["compression"] - 30 / len(tr.steps)) < 1e-9


def test_trace_records_what_the_step_did(tiny_models):
    model = tiny_models["llama"]
    W, N, G = 5, 4, 5
    tr = generate(model, PROMPT, make_drafter("lookahead", window=W, ngram=N, guesses=G), max_new_tokens=40)
    assert tr.steps[0].kind == "prefill" and tr.steps[0].n_query == len(PROMPT)
    for s in tr.steps[1:-1]:  # the last step may be cut at max_new_tokens
        info = s.info
        n_levels = len(info["window"])
        n_cand = s.roles.count("candidate")  # candidates share prefix nodes (dedupe)
        assert s.n_query == len(s.tokens) == 1 + (W - 1) + (n_levels - 1) * W + n_cand
        assert n_cand == len({tuple(c[:i + 1]) for c in info["candidates"] for i in range(len(c))})
        assert all(N - 1 <= len(c) <= 7 for c in info["candidates"])  # text n-grams may run to text_span
        assert s.tokens[0] == info["pool_key"] and s.positions[0] == s.kv_len
        assert len(info["matched"]) == len(info["candidates"])
        if info["chosen"] is not None:
            assert len(s.accepted) == info["matched"][info["chosen"]] + 1
            assert s.origins[:-1] == ["candidate"] * (len(s.accepted) - 1)
        assert s.origins[-1] == "target" or len(s.accepted) < max(info["matched"] or [0]) + 1
        assert s.kept[0] == 0 and len(s.kept) == len(s.accepted)
    # the window fills its N-1 levels during warm-up, then stays full
    assert [len(s.info["window"]) for s in tr.steps[1:5]] == [1, 2, 3, 3]


def test_paper_layout_without_dedupe(tiny_models):
    W, N, G = 5, 4, 5
    tr = generate(tiny_models["llama"], PROMPT, make_drafter("lookahead", window=W, ngram=N, guesses=G, dedupe=False,
                                                             text_span=N - 1), max_new_tokens=30)
    for s in tr.steps[1:]:
        assert s.n_query == 1 + (W - 1) + (len(s.info["window"]) - 1) * W + len(s.info["candidates"]) * (N - 1)


def test_tracing_off_keeps_counts(tiny_models):
    model = tiny_models["llama"]
    on = generate(model, PROMPT, make_drafter("lookahead"), max_new_tokens=20)
    off = generate(model, PROMPT, make_drafter("lookahead"), max_new_tokens=20, trace=False)
    assert off.output_ids == on.output_ids
    assert [s.n_query for s in off.steps] == [s.n_query for s in on.steps]
    assert off.steps[1].tokens == [] and off.stats()["steps"] == on.stats()["steps"]


def test_agreement_round_trips_and_old_traces_load(tiny_models, tmp_path):
    """The optional measured-agreement field survives JSON; a trace written before it existed still loads."""
    from decoding.exactness import measure
    model = tiny_models["llama"]
    tr = generate(model, PROMPT, make_drafter("lookahead"), max_new_tokens=12)
    tr.agreement = measure(model, PROMPT, tr.output_ids, 12)
    assert tr.agreement["identical"] and tr.agreement["reference"] == "hf_greedy"
    assert tr.agreement["dtype"] == "float32" and tr.agreement["text"] == "identical"
    tr.save(tmp_path / "t.json")
    assert Trace.load(tmp_path / "t.json").agreement == tr.agreement
    old = tr.to_dict()
    del old["agreement"]
    assert Trace.from_dict(old).agreement is None


def test_agreement_reports_the_first_divergence(tiny_models):
    """A measurement must be able to fail: a changed token is reported at its index."""
    from decoding.exactness import measure
    model = tiny_models["llama"]
    ref = hf_greedy(model, PROMPT, 10)
    bad = ref[:6] + [(ref[6] + 1) % 64] + ref[7:]
    a = measure(model, PROMPT, bad, 10)
    assert not a["identical"] and a["first_divergence"] == 6 and a["text"] == "first divergence at token 6"
