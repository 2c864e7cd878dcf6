"""The lookahead n-gram pool: text n-grams first (two-token key first), newest first, longer text spans."""
from decoding.methods.windows.pool import Pool


def test_text_ngrams_before_window_guesses_and_two_token_key_first():
    text = [1, 2, 3, 4, 9, 2, 5, 6, 7, 8, 2, 3, 4, 0]
    pool = Pool(n1=2, cap=4)
    pool.add_text(text, 0, "prompt")
    pool.add(2, (7, 7), "window")
    cands, sources = pool.lookup(2, 4, prev=9)
    assert cands[0] == (5, 6) and sources[0] == "prompt"  # (9, 2) occurred: its continuation leads
    assert cands[-1] == (7, 7) and sources[-1] == "window"
    assert set(cands[1:-1]) == {(3, 4)}  # (3, 4) seen twice, offered once


def test_text_span_offers_what_followed_the_latest_occurrence():
    text = [1, 2, 3, 4, 5, 6, 2, 3, 8, 9, 10, 11]
    pool = Pool(n1=2, cap=4, span=5)
    pool.add_text(text, 0, "output")
    cands, _ = pool.lookup(2, 2, text=text)
    assert cands == [(3, 8, 9, 10, 11), (3, 4, 5, 6, 2)]  # newest occurrence first, up to 5 tokens each
    assert pool.lookup(2, 2)[0] == [(3, 8), (3, 4)]  # without the text: the stored N-1 tokens
    pool.add(2, (6, 6), "window")
    assert (6, 6) in pool.lookup(2, 3, text=text)[0]  # window guesses are never extended


def test_pool_rebuilt_from_trace_deltas_equals_the_engines_pool_at_every_step(tiny_models):
    """The pool browser's data: replaying info["pool_delta"] up to step i gives exactly the engine's pool
    after step i (small cap, so window evictions happen); without tracing no delta is recorded."""
    from decoding.methods.windows.lookahead import Lookahead
    from decoding.engine.runner import generate
    from viz import pool as pool_view
    model = tiny_models["llama"]
    prompt = [5, 9, 3, 5, 9, 7, 5, 9, 3, 11, 5, 9]
    drafter = Lookahead(window=4, ngram=3, guesses=2, pool_cap=1)
    seen = {}
    tr = generate(model, prompt, drafter, max_new_tokens=24,
                  on_step=lambda s, out: seen.__setitem__(s.index, drafter.pool.contents()))
    decode = [s for s in tr.steps if "pool_delta" in s.info]
    assert len(decode) >= 5 and any(op == "x" for s in decode for op, *_ in s.info["pool_delta"])
    for s in decode:
        engine = {k: v for k, v in seen[s.index].items() if v["text"] or v["window"]}
        assert pool_view.contents(tr, s.index) == engine, s.index
    assert engine and s.info["pool_size"] > 0
    quiet = generate(model, prompt, Lookahead(window=4, ngram=3, guesses=2, pool_cap=1), max_new_tokens=8, trace=False)
    assert not any("pool_delta" in s.info for s in quiet.steps)
