"""The lookahead mask and positions of the paper's example (N=4, W=5, G=2: 21 x 21), rebuilt here
independently from the paper's rules (docs/engineering-notes.md, "Lookahead paper"), must equal the
engine's."""
import numpy as np
import torch

from decoding.engine.masks import depths_of, step_mask, tree_visibility
from decoding.methods.windows.lookahead import lookahead_layout


def reference_mask(W: int, N: int, G: int) -> tuple[np.ndarray, list[int]]:
    """Row/column rules, written from the paper's description rather than from parents."""
    slots = [("row0", 0, j) for j in range(W)]
    slots += [("level", lev, j) for lev in range(1, N - 1) for j in range(W)]
    slots += [("cand", g, i) for g in range(G) for i in range(N - 1)]
    n = len(slots)
    m = np.zeros((n, n), dtype=bool)
    for a, (ka, la, ja) in enumerate(slots):
        for b, (kb, lb, jb) in enumerate(slots):
            if ka == "row0":
                m[a, b] = kb == "row0" and jb <= ja
            elif ka == "level":
                m[a, b] = (kb == "row0" and jb <= ja) or (kb == "level" and jb == ja and lb <= la)
            else:  # candidate g token i: x0 and its own tokens 0..i
                m[a, b] = (kb == "row0" and jb == 0) or (kb == "cand" and lb == la and jb <= ja)
    pos = [j for (k, l, j) in slots if k == "row0"] + [l + j for (k, l, j) in slots if k == "level"]
    pos += [i + 1 for (k, l, i) in slots if k == "cand"]
    return m, pos


def test_paper_example_21x21():
    lay = lookahead_layout(window=5, ngram=4, levels=3, n_candidates=2)
    vis = tree_visibility(lay["parents"])
    assert vis.shape == (21, 21)
    expected, pos = reference_mask(5, 4, 2)
    assert (vis == expected).all()
    assert lay["depths"] == pos == [0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 1, 2, 3, 1, 2, 3]


def test_other_shapes_match_rules():
    for W, N, G in [(1, 2, 0), (3, 2, 3), (4, 5, 1), (7, 3, 4)]:
        lay = lookahead_layout(W, N, N - 1, G)
        expected, pos = reference_mask(W, N, G)
        assert (tree_visibility(lay["parents"]) == expected).all(), (W, N, G)
        assert lay["depths"] == pos


def test_float_mask_sees_cache_and_masks_with_min():
    parents = lookahead_layout(5, 4, 3, 2)["parents"]
    m = step_mask(parents, past_len=7, dtype=torch.float32, device="cpu")
    assert m.shape == (1, 1, 21, 28) and m.dtype == torch.float32
    assert (m[0, 0, :, :7] == 0).all()
    vis = torch.from_numpy(np.array(tree_visibility(parents)))
    assert ((m[0, 0, :, 7:] == 0) == vis).all()
    assert (m[0, 0, :, 7:][~vis] == torch.finfo(torch.float32).min).all()


def test_depths_require_parents_first():
    assert depths_of([-1, 0, 1, 0]) == [0, 1, 2, 1]
    try:
        depths_of([-1, 2, 0])
    except ValueError:
        return
    raise AssertionError("a parent after its child must be refused")
