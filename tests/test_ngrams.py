"""The shared n-gram index: where n-grams ended, their latest and distinct newest-first continuations."""
from decoding.ngrams import NGramIndex


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
