"""Host synchronisations per speculative decode step, counted as tensor-to-host conversions the engine
asks for (test_gpu_stage.HostSyncs: what a CUDA run would sync on), greedy, trace off.

Every greedy mode chains its draft levels on the device (draft_tree.DEVICE_DRAFT, forced on here as on
CUDA): one read of the whole draft + the target's argmax = 2 per step, with the same plans and HF-greedy
output as the per-level path. Staged trees replay build() (stage 2's host n-gram lookups) from the one
read; dynamic trees pick each level's frontier on the device and build its tree mask there
(Core._run_rows, StaticKV.vis_in)."""
from __future__ import annotations

import pytest

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.engine.core import core_options
from decoding.methods.draft_model import draft_tree, tree_replay
from test_gpu_stage import PROMPT, _per_step

MODES = [pytest.param(dict(draft_tokens=4, confidence=0.0), id="chain"),
         pytest.param(dict(draft_tokens=4), id="chain-cut"),
         pytest.param(dict(tree=[3, 2, 1], confidence=0.0), id="tree"),
         pytest.param(dict(tree=[2, 2, 1], staged=True, confidence=0.0), id="staged"),
         pytest.param(dict(staged=True), id="staged-chain-cut"),
         pytest.param(dict(tree_budget=8), id="dynamic")]


@pytest.fixture(scope="module")
def pair():
    return tiny("llama", seed=0), tiny("llama", seed=1)


@pytest.mark.parametrize("static", [False, True], ids=["dynamic-cache", "static-cache"])
@pytest.mark.parametrize("params", MODES)
def test_at_most_two_syncs_per_speculative_step(pair, params, static, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", True)
    with core_options(fixed=static):
        steps = _per_step(target, make_drafter("speculative", draft_model=draft, **params), static, trace=False)
    decode = steps[1:]
    assert decode and all(len(calls) <= 2 for calls in decode), [c for c in decode if len(c) > 2][:2]


@pytest.mark.parametrize("params", [dict(draft_tokens=4, confidence=0.0), dict(tree=[3, 2, 1]),
                                    dict(tree=[2, 2, 2], confidence=0.3)], ids=str)
def test_chained_levels_make_the_same_plans_and_output(pair, params, monkeypatch):
    """Device-chained levels vs level by level (static graph-path buffers): the same trees, probabilities
    and pruned records every step, HF greedy output; without a cut, the same draft forwards too."""
    target, draft = pair
    runs = []
    for chained in (False, True):
        monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", chained)
        with core_options(fixed=True):
            runs.append(generate(target, PROMPT, make_drafter("speculative", draft_model=draft, **params),
                                 max_new_tokens=24, static=True))
    assert runs[0].output_ids == runs[1].output_ids == hf_greedy(target, PROMPT, 24)
    for a, b in zip(runs[0].steps, runs[1].steps):
        assert (a.tokens, a.parents, a.info.get("tree")) == (b.tokens, b.parents, b.info.get("tree"))
        if params.get("confidence") == 0.0:
            assert a.info.get("draft_forwards") == b.info.get("draft_forwards")


@pytest.mark.parametrize("static", [False, True], ids=["dynamic-cache", "static-cache"])
@pytest.mark.parametrize("params", [dict(tree=[2, 2, 1], staged=True, confidence=0.0), dict(staged=True),
                                    dict(tree=[3, 2, 1], staged=True), dict(tree_budget=8),
                                    dict(tree_budget=4, draft_tokens=3), dict(tree_budget=8, confidence=0.3)], ids=str)
def test_replayed_trees_match_level_by_level(pair, params, static, monkeypatch):
    """Staged and dynamic trees built from ONE read (the host replays build()) vs level by level: the same
    tokens, parents, origins, stage-2 counts and pruned tokens every step, probabilities equal up to the
    float noise of other batch shapes, HF greedy output."""
    target, draft = pair
    runs = []
    for chained in (False, True):
        monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", chained)
        with core_options(fixed=static):
            runs.append(generate(target, PROMPT, make_drafter("speculative", draft_model=draft, **params),
                                 max_new_tokens=24, static=static))
    assert runs[0].output_ids == runs[1].output_ids == hf_greedy(target, PROMPT, 24)
    for a, b in zip(runs[0].steps[1:], runs[1].steps[1:]):
        ta, tb = a.info["tree"], b.info["tree"]
        assert (a.tokens, a.parents, ta["origin"], a.info.get("stage2")) == (b.tokens, b.parents, tb["origin"],
                                                                              b.info.get("stage2"))
        assert ta["pruned"]["tokens"] == tb["pruned"]["tokens"]
        assert ta["draft_prob"][1:] == pytest.approx(tb["draft_prob"][1:], abs=2e-6)


def test_a_node_the_device_did_not_run_restarts_the_step_level_by_level(pair, monkeypatch):
    """The replay's safety net: a table holding only x0's row (as if the device had run no level) makes
    every step rebuild level by level from the accepted text: the level-by-level plans, still exact."""
    target, draft = pair
    params = dict(tree_budget=8)
    monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", False)
    ref = generate(target, PROMPT, make_drafter("speculative", draft_model=draft, **params), max_new_tokens=16)
    monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", True)
    real, misses = draft_tree.TreeBuilder._replay, []

    class Miss(tree_replay._Miss):
        def __init__(self):
            misses.append(1)

    def root_only(self, context, table, runs, n_run):
        return real(self, context, {(): table[()]}, runs, n_run)

    monkeypatch.setattr(tree_replay, "_Miss", Miss)
    monkeypatch.setattr(draft_tree.TreeBuilder, "_replay", root_only)
    out = generate(target, PROMPT, make_drafter("speculative", draft_model=draft, **params), max_new_tokens=16)
    assert len(misses) == len(out.steps) - 1
    assert out.output_ids == ref.output_ids == hf_greedy(target, PROMPT, 16)
    assert [(s.tokens, s.parents, s.info["tree"]) for s in out.steps[1:]] == [
        (s.tokens, s.parents, s.info["tree"]) for s in ref.steps[1:]]


@pytest.mark.parametrize("static", [False, True], ids=["dynamic-cache", "static-cache"])
def test_device_parents_give_the_host_trees_logits(pair, static):
    """Core._run_rows (parents as a device tensor, the mask built from region_vis) against the same tree
    run with host parents: the same logits, and a host-tree forward before commit() is refused."""
    import torch
    from decoding.methods.draft_model.draft_core import DraftCore
    _, draft = pair
    outs = []
    for rows in (False, True):
        with core_options(fixed=static):
            core = DraftCore(draft, static=static)
        core.grow([5, 6, 7], [-1, 0, 1])                      # catch-up chain, x0 = region row 2
        core.grow_ids(torch.tensor([9, 11]), [2, 2])          # two children of x0: rows 3, 4
        if rows:
            out = core.grow_rows(torch.tensor([13, 4, 8]), torch.tensor([4, 3, 4]), 4)
            with pytest.raises(RuntimeError, match="commit"):
                core.grow([1], [0])
        else:
            out = core.grow_ids(torch.tensor([13, 4, 8]), [4, 3, 4])
        outs.append(out)
        core.commit([0, 1, 2, 4, 5])
        outs.append(core.grow([3], [-1]))                     # the next step sees the kept rows
    torch.testing.assert_close(outs[2], outs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[3], outs[1], rtol=1e-5, atol=1e-5)


def test_default_chains_on_cuda_where_no_cut_could_save_forwards(pair, monkeypatch):
    """DEVICE_DRAFT None: chained on CUDA for uncut greedy chains, trees and dynamic trees (a read per level
    would stall the GPU on every level), never with a confidence cut, never on CPU. Sampled: dynamic trees
    as greedy ones; uncut chains and trees on every device (their draws are one algorithm, so a seed gives
    one text on CPU and CUDA), cut ones and staged trees never."""
    monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", None)
    target, draft = pair
    d = make_drafter("speculative", draft_model=draft, draft_tokens=4, confidence=0.0)
    d.bind(target, d.sampling)
    d.start(PROMPT)
    assert not d.builder.chained()  # CPU
    d.core.device = __import__("torch").device("cuda")
    assert d.builder.chained()
    d.builder.shape.confidence = 0.4
    assert not d.builder.chained()
    dyn = make_drafter("speculative", draft_model=draft, tree_budget=8)  # even though the host's pruning
    dyn.bind(target, dyn.sampling)                                         # may stop early
    dyn.start(PROMPT)
    assert not dyn.builder.chained()  # CPU
    dyn.core.device = __import__("torch").device("cuda")
    assert dyn.builder.chained()
    dyn.builder.shape.confidence = 0.4
    assert not dyn.builder.chained()
    on = {}
    for name, params in {"dynamic": dict(tree_budget=8), "chain": dict(draft_tokens=4, confidence=0.0),
                         "tree": dict(tree=[2, 2], confidence=0.0), "chain-cut": dict(draft_tokens=4),
                         "staged": dict(tree=[2, 2], staged=True, confidence=0.0)}.items():
        sampled = make_drafter("speculative", draft_model=draft, **params)
        sampled.bind(target, __import__("decoding").Sampling(0.8, seed=1))
        sampled.start(PROMPT)
        on[name] = [sampled.builder.chained()]
        sampled.core.device = __import__("torch").device("cuda")
        on[name].append(sampled.builder.chained())
    assert on == {"dynamic": [False, True], "chain": [True, True], "tree": [True, True],
                  "chain-cut": [False, False], "staged": [False, False]}


def main(argv: list[str]) -> None:
    """python tests/test_speculative_syncs.py [tiny|assets]: host reads per decode step, per speculative mode,
    level by level (DECODESCOPE_DEVICE_DRAFT=0) and chained (=1), greedy, trace off, dynamic cache."""
    import test_gpu_stage
    if argv[:1] == ["assets"]:
        from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET, load
        target, tok = load(EMBEDDED_TARGET)
        draft, _ = load(EMBEDDED_DRAFT)
        import test_cuda
        test_gpu_stage.PROMPT = tok(test_cuda.ASSET_PROMPT)["input_ids"]
    else:
        target, draft = tiny("llama", seed=0), tiny("llama", seed=1)
    modes = {"chain (default 0.4 cut)": {}, "chain K4 no cut": dict(draft_tokens=4, confidence=0.0),
             "tree 3,2,1": dict(tree=[3, 2, 1]), "dynamic B8": dict(tree_budget=8), "staged": dict(staged=True),
             "staged tree 2,2,1": dict(tree=[2, 2, 1], staged=True)}
    for name, params in modes.items():
        row = []
        for chained in (False, True):
            draft_tree.DEVICE_DRAFT = chained
            steps = _per_step(target, make_drafter("speculative", draft_model=draft, **params), False, trace=False)
            row.append(sum(map(len, steps[1:])) / len(steps[1:]))
        print(f"{name:<24} level by level {row[0]:.2f}   chained {row[1]:.2f}")


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
