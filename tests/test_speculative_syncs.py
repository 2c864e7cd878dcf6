"""Host synchronisations per speculative decode step, counted as tensor-to-host conversions the engine
asks for (test_gpu_stage.HostSyncs: what a CUDA run would sync on), greedy, trace off.

Chain and fixed-width trees chain their draft levels on the device (draft_tree.DEVICE_DRAFT, forced on
here as on CUDA): one read of the whole draft + the target's argmax = 2 per step, with the same plans
and HF-greedy output as the per-level path. Staged trees (stage 2 proposes from the host path) and
dynamic trees (pruned by the read scores) still read once per draft level: their rows are strict xfails
that flip when that is removed."""
from __future__ import annotations

import pytest

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.engine.core import core_options
from decoding.methods import draft_tree
from test_gpu_stage import PROMPT, _per_step

PER_LEVEL = "still one host read per draft level (stage 2 / dynamic pruning read the level's values)"
MODES = [pytest.param(dict(draft_tokens=4, confidence=0.0), id="chain"),
         pytest.param(dict(draft_tokens=4), id="chain-cut"),
         pytest.param(dict(tree=[3, 2, 1], confidence=0.0), id="tree"),
         pytest.param(dict(tree=[2, 2, 1], staged=True, confidence=0.0), id="staged",
                      marks=pytest.mark.xfail(strict=True, reason=PER_LEVEL)),
         pytest.param(dict(tree_budget=8), id="dynamic", marks=pytest.mark.xfail(strict=True, reason=PER_LEVEL))]


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


def test_default_chains_only_where_no_forward_is_wasted(pair, monkeypatch):
    """DEVICE_DRAFT None: chained on CUDA for uncut greedy chains/trees, never on CPU, never when sampling."""
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


def main(argv: list[str]) -> None:
    """python tests/test_speculative_syncs.py [tiny|assets]: host reads per decode step, per speculative mode,
    level by level (DECODESCOPE_DEVICE_DRAFT=0) and chained (=1), greedy, trace off, dynamic cache."""
    import test_gpu_stage
    if argv[:1] == ["assets"]:
        from decoding.models import DEFAULT_DRAFT, DEFAULT_TARGET, load
        target, tok = load(DEFAULT_TARGET)
        draft, _ = load(DEFAULT_DRAFT)
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
