"""The lookahead n-gram pool: text n-grams first (two-token key first), newest first, longer text spans."""
from decoding.pool import Pool


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
