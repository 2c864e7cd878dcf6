"""The static-shape path (decoding/fast/static_cache.py) forced on, on CPU: the same ids as HF greedy for every
method, the same logits as the dynamic path, buckets and padded rows that never leak into the output."""
import pytest
import torch

from conftest import hf_greedy, tiny
from decoding import generate, make_drafter
from decoding.engine.core import Core
from decoding.methods.draft_model.draft_core import DraftCore
from decoding.fast.static_cache import StaticKV, bucket

PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]]
METHODS = [("greedy", {}), ("lookahead", dict(window=5, ngram=4, guesses=5)),
           ("lookahead", dict(window=3, ngram=2, guesses=3)), ("prompt_lookup", {}),
           ("prompt_lookup", dict(num_tokens=4, max_ngram=2, candidates=3))]
SPECULATIVE = [dict(draft_tokens=4, confidence=0.0), dict(tree=[3, 2, 1], confidence=0.0),
               dict(tree_budget=12), dict(staged=True, confidence=0.0),
               dict(tree=[2, 2, 1], staged=True, confidence=0.0), dict(draft_tokens=5)]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("method,params", METHODS, ids=str)
def test_static_matches_hf_greedy(tiny_models, arch, method, params):
    model = tiny_models[arch]
    multi = False
    for prompt in PROMPTS:
        tr = generate(model, prompt, make_drafter(method, **params), max_new_tokens=40, static=True)
        assert tr.config["static"] is True
        assert tr.output_ids == hf_greedy(model, prompt, 40), f"static {method} {params} diverged on {arch}"
        multi |= any(len(s.accepted) > 1 for s in tr.steps)
    assert multi or method == "greedy"


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("params", SPECULATIVE, ids=str)
def test_static_speculative_matches_hf_greedy(arch, params):
    target, draft = tiny(arch, seed=0), tiny(arch, seed=1)
    for prompt in PROMPTS:
        tr = generate(target, prompt, make_drafter("speculative", draft_model=draft, **params),
                      max_new_tokens=40, static=True)
        assert tr.output_ids == hf_greedy(target, prompt, 40)
        assert tr.steps[1].info.get("draft_forwards", 0) >= 1


def test_static_logits_equal_dynamic_logits():
    """One lookahead-shaped tree step (7 tokens -> an 8-row bucket, one padded row) after a prefill,
    twice, with a non-prefix commit between: the static logits equal the dynamic ones."""
    model = tiny("llama", seed=4)
    a, b = Core(model, static=False), Core(model, static=True, capacity=8)  # capacity forces regrowth
    assert isinstance(b.cache, StaticKV) and not isinstance(a.cache, StaticKV)
    parents = [-1, 0, 1, 0, 3, 3, 0]
    for c in (a, b):
        c.prefill(PROMPTS[0])
        c.commit(list(range(len(PROMPTS[0]))))
    for _ in range(2):
        la, lb = a.forward([1, 2, 3, 4, 5, 6, 7], parents), b.forward([1, 2, 3, 4, 5, 6, 7], parents)
        assert torch.allclose(la, lb, atol=1e-5), (la - lb).abs().max()
        for c in (a, b):
            c.commit([0, 3, 5])
    assert a.length == b.length == len(PROMPTS[0]) + 6
    # rows: only the requested rows are computed, the others come back as zeros
    la, lb = a.forward([9, 8, 7], [-1, 0, 0], rows=[0, 2]), b.forward([9, 8, 7], [-1, 0, 0], rows=[0, 2])
    assert torch.allclose(la, lb, atol=1e-5) and lb[1].abs().sum() == 0


def test_draft_core_region_static_equals_dynamic():
    """A draft region grown over several forwards (catch-up chain, then a level of the tree) and settled
    on a non-prefix path gives the same logits on both caches."""
    model = tiny("qwen2", seed=6)
    cores = [DraftCore(model, static=False), DraftCore(model, static=True)]
    outs = []
    for c in cores:
        c.prefill(PROMPTS[1][:10])
        c.commit(list(range(10)))
        l1 = c.grow(PROMPTS[1][10:], [-1, 0, 1, 2], skip=3)   # catch-up chain, logits of the last only
        l2 = c.grow([11, 12, 13], [3, 3, 4])                  # children of x0 (region node 3) and of 11
        c.settle([0, 1, 2, 3, 4, 6])
        l3 = c.grow([20], [-1])
        outs.append((l1, l2, l3))
        assert c.length == 16 and c.spec_parents == [-1]
    for x, y in zip(*outs):
        assert x.shape == y.shape and torch.allclose(x, y, atol=1e-5)


def test_buckets_and_padding():
    assert [bucket(q) for q in (1, 2, 3, 5, 8, 9, 100, 128, 129, 165, 256, 257)] == [1, 2, 4, 8, 8, 16, 128, 128, 256,
                                                                                   256, 256, 257]
    model = tiny("llama", seed=2)
    core = Core(model, static=True)
    core.prefill(PROMPTS[0])
    core.commit(list(range(len(PROMPTS[0]))))
    # a 3-token step runs as a 4-row bucket; its padded row writes one slot past the step, never committed
    logits = core.forward([1, 2, 3], [-1, 0, 1])
    assert logits.shape == (3, model.config.vocab_size) and torch.isfinite(logits).all()
    core.commit([0, 1])
    assert core.length == len(PROMPTS[0]) + 2


def test_generate_default_and_trace_flag(tiny_models):
    tr = generate(tiny_models["llama"], PROMPTS[0], max_new_tokens=4)
    assert tr.config["static"] is False  # CPU default (bench/results/cpu-static.md)
    tr = generate(tiny_models["llama"], PROMPTS[0], max_new_tokens=4, static=True)
    assert tr.config["static"] is True


def _pruned_ok(step, width: int) -> int:
    tree, pr = step.info["tree"], step.info["tree"]["pruned"]
    assert len(pr["parents"]) == len(pr["tokens"]) == len(pr["draft_prob"])
    for par, tok, p in zip(pr["parents"], pr["tokens"], pr["draft_prob"]):
        kids = [tree["tokens"][k] for k in range(len(tree["tokens"])) if tree["parents"][k] == par]
        assert tok not in kids and 0 < p <= 1  # left out: not drafted
    assert all(pr["parents"].count(par) <= width for par in set(pr["parents"]))
    return len(pr["parents"])


def test_pruned_draft_nodes_in_the_trace():
    """Dynamic trees record the candidates the budget cut (scoring no better than any kept node); greedy
    fixed trees draft their top-w children, so nothing is pruned there; the lists are always present."""
    target, draft = tiny("llama", seed=0), tiny("llama", seed=1)
    tr = generate(target, PROMPTS[0], make_drafter("speculative", draft_model=draft, tree_budget=6),
                  max_new_tokens=24)
    assert tr.output_ids == hf_greedy(target, PROMPTS[0], 24)
    steps = [s for s in tr.steps if s.kind == "decode"]
    assert sum(_pruned_ok(s, 4) for s in steps) > 0  # branch 4 per node, budget 6: cuts happen
    for s in steps:
        tree, pr = s.info["tree"], s.info["tree"]["pruned"]
        kept = min(_score(tree, k) for k in range(1, len(tree["tokens"])))
        for par, p in zip(pr["parents"], pr["draft_prob"]):
            assert p * _score(tree, par) <= kept + 1e-6
    tr = generate(target, PROMPTS[0], make_drafter("speculative", draft_model=draft, tree=[2, 2], confidence=0.0),
                  max_new_tokens=12)
    for s in tr.steps[1:]:
        assert s.info["tree"]["pruned"] == {"parents": [], "tokens": [], "draft_prob": []}


def _score(tree: dict, k: int) -> float:
    """Cumulative draft probability of node k's path (the dynamic tree's ranking)."""
    score = 1.0
    while k > 0:
        score *= tree["draft_prob"][k]
        k = tree["parents"][k]
    return score


def test_cache_regrowth_keeps_contents():
    """A step that does not fit reallocates the cache (and would drop CUDA graphs): same logits after."""
    model = tiny("gpt2", seed=3)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 64, (250,), generator=g).tolist()
    a, b = Core(model, static=False), Core(model, static=True, capacity=1)
    cap0 = b.cache.capacity
    for c in (a, b):
        c.prefill(prompt)
        c.commit(list(range(250)))
    parents = [-1, 0, 1, 0, 3, 4, 0, 6]
    la, lb = a.forward(list(range(8)), parents), b.forward(list(range(8)), parents)
    assert b.cache.capacity > cap0 and b.cache.fused and b.cache.store.shape[4] == b.cache.capacity
    assert torch.allclose(la, lb, atol=1e-5)
    for c in (a, b):
        c.commit([0, 3, 4, 5])
    la, lb = a.forward([9], [-1]), b.forward([9], [-1])
    assert torch.allclose(la, lb, atol=1e-5)


def test_static_cache_is_reused_across_runs():
    """A finished run's cache (with its captured graphs on CUDA) serves the next run of that model."""
    import gc
    model = tiny("llama", seed=7)
    core = Core(model, static=True, capacity=100)
    first = core.cache
    del core
    gc.collect()
    again = Core(model, static=True, capacity=120)
    assert again.cache is first
    other = Core(model, static=True, capacity=120)  # in use: a second Core gets its own
    assert other.cache is not first
    big = Core(model, static=True, capacity=5000)    # far larger than the pooled one: a new cache
    assert big.cache is not first and big.cache.capacity >= 5000
    prompt = PROMPTS[0]
    ref = hf_greedy(model, prompt, 16)
    for _ in range(2):  # stale entries of the previous run are never visible
        assert generate(model, prompt, make_drafter("lookahead", window=3, ngram=3, guesses=3),
                        max_new_tokens=16, static=True).output_ids == ref


@pytest.mark.parametrize("method,params", [("lookahead", dict(window=4, ngram=3, guesses=4)), ("prompt_lookup", {})],
                         ids=str)
def test_fixed_shape_path_is_exact(method, params):
    """What a CUDA graph replays, run eagerly on CPU: static input buffers, a mask over the whole capacity
    (stale entries of the previous run and padded rows behind it), every row's logits: still HF greedy."""
    from decoding.fast.cache_pool import _pool
    model = tiny("qwen2", seed=8)
    kv = StaticKV(model, 512, fixed=True)  # a run needs prompt + 40 + GRAPH_MAX: the 512 size class
    _pool(model).append(kv)  # the next static Core of this model takes it (capacity fits)
    for prompt in PROMPTS:
        tr = generate(model, prompt, make_drafter(method, **params), max_new_tokens=40, static=True)
        assert tr.output_ids == hf_greedy(model, prompt, 40)
        assert _pool(model) == [kv] and kv.mask.shape[-1] == kv.capacity == 512 and kv.kv_len == 512


@pytest.mark.parametrize("method,params", [("lookahead", dict(window=4, ngram=3, guesses=4)),
                                           ("speculative", dict(tree=[3, 2, 1], confidence=0.0)),
                                           ("speculative", dict(draft_tokens=4, confidence=0.0))], ids=str)
def test_static_sampling_repeats_and_matches_dynamic(method, params):
    """Sampling on the static path: the same seed gives the same tokens, and the same as the dynamic path
    (logits equal to float rounding; a uniform draw would have to land within ~1e-7 of a threshold)."""
    from decoding import Sampling
    target, draft = tiny("llama", seed=0), tiny("llama", seed=1)
    if method == "speculative":
        params = dict(params, draft_model=draft)
    s = Sampling(0.8, top_k=20, seed=5)
    runs = [generate(target, PROMPTS[1], make_drafter(method, **params), max_new_tokens=32, sampling=s,
                     static=static).output_ids for static in (True, True, False)]
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 32
