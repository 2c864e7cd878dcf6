"""The shared n-gram index: where n-grams ended, their latest and distinct newest-first continuations."""
from decoding.methods.lookup.ngrams import NGramIndex


def test_incremental_index_and_continuations():
    text = [1, 2, 3, 9, 1, 2, 4, 1, 2, 3, 7]
    idx = NGramIndex(2, 1, follow=1)
    assert list(idx.update(text[:5])) == [0, 1, 2, 3]   # the n-gram ending at the last token has no next yet
    assert idx.ends[(1, 2)] == [1] and idx.latest((9,)) == 1
    assert list(idx.update(text)) == list(range(4, 10))  # only the new end positions are indexed
    assert idx.ends[(1, 2)] == [1, 5, 8] and idx.latest((1, 2)) == 3
    assert idx.continuations((1, 2), 2, 5) == [((3, 7), 8), ((4, 1), 5), ((3, 9), 1)]
    assert idx.continuations((1,), 1, 5) == [((2,), 7)]  # distinct: one continuation, at its newest end
    assert idx.continuations((5,), 3, 5) == [] and idx.latest((5,)) is None


def test_follow_and_skip_to():
    idx = NGramIndex(1, 1, follow=3)
    idx.skip_to(2)
    idx.update([4, 4, 5, 6, 4, 7, 8])
    assert idx.ends == {(5,): [2], (6,): [3]}  # ends 0-1 skipped; ends 4+ lack 3 following tokens
    assert idx.done == 4


def test_cached_answers_equal_a_fresh_scan():
    """Stable continuations (length <= follow) extend the last answer; it must equal scanning all ends."""
    import random
    rng = random.Random(0)
    text = [rng.randrange(6) for _ in range(400)]
    grown = NGramIndex(2, 1, follow=3)
    for n in range(10, len(text), 7):
        grown.update(text[:n])
        fresh = NGramIndex(2, 1, follow=3)
        fresh.update(text[:n])
        for key in [(t,) for t in range(6)] + [(a, b) for a in range(3) for b in range(3)]:
            for limit in (1, 3, 5):
                assert grown.continuations(key, 3, limit) == fresh.continuations(key, 3, limit), (n, key, limit)
