"""Self-speculative decoding (Kangaroo form): exact greedy on several architectures, the target's
distribution when sampling, the draft's shallow KV made from the target's own hidden states, adapter files
refused with one line, train-heads --kind self_speculative, and traces that validate."""
import json

import pytest
import torch
from transformers import GemmaConfig, GemmaForCausalLM, MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM

from conftest import WORDS, hf_greedy, save_tiny_dir, tiny
from decoding import generate, make_drafter
from decoding.engine.sampling import Sampling
from decoding.engine.shallow import ShallowError, decoder_parts, run_layers
from decoding.methods.self_draft.self_spec_adapter import AdapterError, load_adapter, new_adapter, save_adapter
from decoding.trace import Trace
from decoding.trace.check import TraceError, check_document

PROMPT = [1, 2, 3, 4, 5, 1, 2, 3, 7, 9, 11]


def tiny4(arch: str, seed: int = 0):
    """4-layer tiny models of the usual decoder layout (llama, qwen2 from conftest; mistral, phi3, gemma here)."""
    if arch in ("llama", "qwen2"):
        return tiny(arch, layers=4, seed=seed)
    torch.manual_seed(seed)
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None)
    cls = {"mistral": (MistralConfig, MistralForCausalLM), "phi3": (Phi3Config, Phi3ForCausalLM),
           "gemma": (GemmaConfig, GemmaForCausalLM)}[arch]
    cfg = cls[0](**common, **({"head_dim": 8} if arch == "gemma" else {}))
    cfg._attn_implementation = "sdpa"
    return cls[1](cfg).eval()


def adapter_dir(model, k: int, path) -> str:
    layer, cfg = new_adapter(model, k)
    save_adapter(layer, cfg, path)
    return str(path)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "phi3", "gemma"])
def test_greedy_is_hf_greedy_on_every_layout(arch, tmp_path):
    """Chain, early-stopped chain and tree drafts all give exactly HF greedy's ids (untrained adapters:
    exactness must not depend on the draft), and some steps accept drafted tokens."""
    model = tiny4(arch)
    ad = adapter_dir(model, 2, tmp_path / "a")
    ref = hf_greedy(model, PROMPT, 40)
    for kw in (dict(stop=0.0, depth=4), dict(), dict(branch=2, beam=2, depth=3, budget=6)):
        tr = generate(model, PROMPT, make_drafter("self_speculative", adapter=ad, **kw), max_new_tokens=40)
        assert tr.output_ids == ref, (arch, kw)
    assert any(len(s.accepted) > 1 for s in tr.steps)


def test_prompt_kv_comes_from_the_targets_hidden_states(tmp_path):
    """The draft's cache after prefill (attention blocks on the target's hidden states) holds the same keys
    and values as running layers 0..k-1 and the adapter on the prompt: nothing is recomputed, nothing lost."""
    from transformers import DynamicCache
    from decoding.engine.core import Core
    model = tiny4("llama")
    d = make_drafter("self_speculative", adapter=adapter_dir(model, 2, tmp_path / "a"))
    d.bind(model, Sampling())
    d.start(PROMPT)
    core = Core(model)
    _, feats = core.prefill(PROMPT, list(range(len(PROMPT))), d.abilities.hidden_layers)
    d.prefill_features(feats)
    ref = DynamicCache()
    with torch.no_grad():
        run_layers(decoder_parts(model), d.layers, model.model.embed_tokens(torch.tensor([PROMPT])),
                   torch.arange(len(PROMPT))[None], None, ref)
    assert len(d.cache.layers) == 3
    for a, b in zip(d.cache.layers, ref.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [dict(depth=3), dict(depth=2, branch=2, beam=2, budget=6)], ids=["chain", "tree"])
def test_sampling_keeps_the_target_distribution(shape, tmp_path):
    """Drafts drawn from the adapter's distribution (a chain, or a tree of sampled siblings), verified by
    verify.speculative: the first 3 sampled tokens follow the target's exact joint distribution (chi-square,
    p > 1e-3; the same bound as test_sampling.py, whose negative control shows it rejects a slightly wrong
    distribution)."""
    from test_heads import IntTok
    from test_sampling import PROMPT as SP, chi2_pvalue, exact_joint, peaky_model
    from decoding.training.self_spec_train import train_adapter
    model = peaky_model()
    texts = [" ".join(map(str, p + hf_greedy(model, p, 60))) for p in ([0, 1, 2], [3, 4, 5], [1, 3, 5], [2, 0, 4])]
    train_adapter(model, IntTok(), texts, tmp_path, exit_layer=1, seq=16, max_tokens=400, epochs=4, batch=4, lr=3e-3,
                  val_every=50, log=lambda *a: None)
    s = Sampling(1.0, 5, 0.95, 0)
    probs = exact_joint(model, s)
    runs, counts, multi = 1200, {}, 0
    d = make_drafter("self_speculative", adapter=str(tmp_path), stop=0.0, draft_vocab=0, **shape)
    for seed in range(runs):
        tr = generate(model, SP, d, max_new_tokens=3, sampling=Sampling(1.0, 5, 0.95, seed), trace=False)
        counts[tuple(tr.output_ids)] = counts.get(tuple(tr.output_ids), 0) + 1
        multi += any(len(st.accepted) > 1 for st in tr.steps)
    assert multi > runs // 10, f"only {multi} runs accepted a drafted token"
    assert chi2_pvalue(counts, probs, runs) > 1e-3


def test_adapter_refusals_are_one_line(tmp_path):
    model, other = tiny4("llama"), tiny4("llama", seed=1)
    ad = adapter_dir(model, 2, tmp_path / "a")
    with pytest.raises(AdapterError, match="another base model"):
        load_adapter(ad, other)
    cfg = json.loads((tmp_path / "a" / "adapter.json").read_text())
    (tmp_path / "a" / "adapter.json").write_text(json.dumps({**cfg, "exit_layer": 9}))
    with pytest.raises(AdapterError, match="exit layer 9 is not inside this 4-layer model"):
        load_adapter(ad, model)
    (tmp_path / "a" / "adapter.json").write_text("{not json")
    with pytest.raises(AdapterError, match="not valid JSON"):
        load_adapter(ad, model)
    (tmp_path / "a" / "adapter.json").write_text(json.dumps(cfg))
    (tmp_path / "a" / "adapter.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(AdapterError, match="corrupt"):
        load_adapter(ad, model)
    with pytest.raises(AdapterError, match="holds no self-speculative adapter"):
        load_adapter(tmp_path / "nothing", model)
    with pytest.raises(ShallowError, match="exit layer must be in \\[1, 3\\]"):
        new_adapter(model, 4)
    with pytest.raises(ShallowError, match="does not have the decoder layout"):
        new_adapter(tiny("gpt2"), 1)
    for e in (AdapterError, ShallowError):
        assert issubclass(e, ValueError)


def _cli(args, capsys):
    from test_heads import _cli as run
    return run(args, capsys)


def test_cli_train_and_generate(tmp_path, capsys):
    """train-heads --kind self_speculative on a tiny model, then generate with --adapter: HF greedy's ids;
    bad input gets one line and exit status 2."""
    mdir = save_tiny_dir(tmp_path / "m")
    (tmp_path / "d.txt").write_text(" ".join(WORDS * 30))
    r = _cli(["train-heads", "--model", mdir, "--kind", "self_speculative", "--exit-layer", "1", "--data",
              str(tmp_path / "d.txt"), "--out", str(tmp_path / "a"), "--seq", "32", "--max-tokens", "2000"], capsys)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "a" / "adapter.json").read_text())["exit_layer"] == 1
    r = _cli(["generate", "--model", mdir, "--method", "self_speculative", "--adapter", str(tmp_path / "a"),
              "--prompt", "def f ( x ) :", "--max-new-tokens", "12", "--check-exact"], capsys)
    assert r.returncode == 0, r.stderr
    assert "identical" in r.stderr and "[self_speculative] mean acceptance length" in r.stderr
    out = tmp_path / "t.json"  # the draft's shape from the speculative flags: depth, early stop, budget, vocabulary
    r = _cli(["generate", "--model", mdir, "--method", "self_speculative", "--adapter", str(tmp_path / "a"),
              "--prompt", "def f ( x ) :", "--max-new-tokens", "12", "--check-exact", "--draft-tokens", "2",
              "--draft-confidence", "0.3", "--budget", "2", "--draft-vocab", "0", "--json", str(out)], capsys)
    assert r.returncode == 0 and "identical" in r.stderr, r.stderr
    cfg = json.loads(out.read_text())["config"]
    assert (cfg["depth"], cfg["stop"], cfg["budget"]) == (2, 0.3, 2), cfg
    for args, msg in ((["train-heads", "--model", mdir, "--kind", "self_speculative", "--exit-layer", "2", "--data",
                        str(tmp_path / "d.txt"), "--out", str(tmp_path / "b"), "--seq", "32"], "exit layer must be in"),
                      (["train-heads", "--model", mdir, "--kind", "self_speculative", "--data", str(tmp_path / "d.txt"),
                        "--out", str(tmp_path / "b")], "--exit-layer K goes with"),
                      (["generate", "--model", mdir, "--method", "self_speculative", "--prompt", "def",
                        "--adapter", str(tmp_path / "m")], "holds no self-speculative adapter"),
                      (["generate", "--model", mdir, "--method", "self_speculative", "--prompt", "def"],
                       "self_speculative needs an adapter"),
                      (["generate", "--model", mdir, "--method", "greedy", "--prompt", "def", "--adapter", "x"],
                       "--adapter needs --method self_speculative"),
                      (["generate", "--model", mdir, "--method", "self_speculative", "--prompt", "def", "--adapter",
                        str(tmp_path / "a"), "--tree", "2,1"], "--tree, --tree-budget, --staged need --method"),
                      (["generate", "--model", mdir, "--method", "self_speculative", "--prompt", "def", "--adapter",
                        str(tmp_path / "a"), "--draft-confidence", "1"], "stop in [0, 1)"),
                      (["generate", "--model", mdir, "--method", "greedy", "--prompt", "def", "--draft-vocab", "9"],
                       "--draft-vocab needs --method medusa, eagle or self_speculative")):
        r = _cli(args, capsys)
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_trace_validates_and_records_the_draft(tmp_path):
    model = tiny4("qwen2")
    tr = generate(model, PROMPT, make_drafter("self_speculative", adapter=adapter_dir(model, 3, tmp_path / "a")),
                  max_new_tokens=24)
    d = json.loads(json.dumps(tr.to_dict()))
    check_document(d)
    steps = [s for s in tr.steps if s.kind == "decode"]
    for s in steps:
        ss = s.info["self_spec"]
        assert ss["exit_layer"] == 3 and ss["layers"] == 4 and len(ss["draft_conf"]) == len(s.info["tree"]["tokens"])
        assert s.info["tree"]["exit"][1:] == [3] * (len(s.tokens) - 1)
        assert s.info["draft_ms"] > 0 and s.info["target_ms"] > 0
        assert ss["early_stop"] == (ss["stopped_at"] is not None)
    Trace.save(tr, tmp_path / "t.json")
    Trace.load(tmp_path / "t.json")
    bad = json.loads(json.dumps(d))
    bad["steps"][1]["info"]["self_spec"]["draft_conf"].append(0.5)
    with pytest.raises(TraceError, match="draft_conf"):
        check_document(bad)


def test_step_picture_is_drawn_from_the_trace(tmp_path):
    """The step picture's numbers are the trace's (confidences, verdicts, draft vs target ms) and the step
    view carries the run chart; an early-stopped step is marked."""
    import viz
    from viz import self_speculative as pic
    model = tiny4("llama")
    tr = generate(model, PROMPT, make_drafter("self_speculative", adapter=adapter_dir(model, 2, tmp_path / "a"),
                                              stop=0.5), max_new_tokens=16)
    s = next(s for s in tr.steps if s.kind == "decode" and len(s.tokens) > 1)
    d = pic.step_data(tr, s.index)
    assert [n["conf"] for n in d["nodes"]] == s.info["self_spec"]["draft_conf"][1:]
    assert sum(n["state"] == "matched" for n in d["nodes"]) == len(s.info["accepted_path"]) - 1
    assert d["draft_ms"] == s.info["draft_ms"] and d["exit_layer"] == 2 and d["layers"] == 4
    assert len(pic.figure(tr, s.index).data) == 2
    assert pic.run_data(tr)["accepted"] == [len(x.accepted) for x in tr.steps if x.kind == "decode"]
    assert "data-view='self_spec'" in viz.step_view_html(tr)
    assert any(x.info["self_spec"]["early_stop"] for x in tr.steps if x.kind == "decode")


@pytest.mark.parametrize("shape", [dict(stop=0.0, depth=4), dict(branch=2, beam=2, depth=4, budget=12, stop=0.0),
                                   dict(branch=3, beam=3, depth=3, budget=20, stop=0.0), "stop"],
                         ids=["chain", "beam2", "beam3", "early-stop"])
def test_levels_chained_on_the_device_draft_the_level_loops_tree(shape, tmp_path, monkeypatch):
    """Greedy self-speculative on CUDA chains its levels on the device (one host read a step,
    SelfSpeculative._device_tree): its trees are the level loop's, node for node, early stop included (the
    device then runs rows the loop skips, whose cache rows are never kept), and output is HF greedy."""
    from decoding.methods.draft_model import draft_tree
    from decoding.methods.self_draft.self_speculative import SelfSpeculative
    model = tiny4("llama")
    ad = adapter_dir(model, 2, tmp_path / "a")
    ref = hf_greedy(model, PROMPT, 40)
    if shape == "stop":  # the median own probability of an uncut tree: some levels stop early, some go on
        kw = dict(branch=2, beam=2, depth=4, budget=12, stop=0.0)
        full = generate(model, PROMPT, make_drafter("self_speculative", adapter=ad, **kw), max_new_tokens=40)
        probs = sorted(p for s in full.steps if "tree" in s.info for p in s.info["tree"]["draft_prob"][1:])
        shape = dict(kw, stop=probs[len(probs) // 2])
    calls, device_tree = [], SelfSpeculative._device_tree
    monkeypatch.setattr(SelfSpeculative, "_device_tree", lambda self, *a: calls.append(1) or device_tree(self, *a))
    trees = {}
    for chained in (False, True):
        monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", chained)
        tr = generate(model, PROMPT, make_drafter("self_speculative", adapter=ad, **shape), max_new_tokens=40)
        assert tr.output_ids == ref, chained
        trees[chained] = [({k: s.info["tree"][k] for k in ("tokens", "parents", "depth", "draft_prob")},
                           {k: s.info["self_spec"][k] for k in ("draft_conf", "early_stop", "stopped_at")})
                          for s in tr.steps if "tree" in s.info]
    assert len(calls) == len(trees[True]) and trees[True] == trees[False]
    assert any(max(t["depth"]) > 2 for t, _ in trees[True]) and any(len(s.accepted) > 1 for s in tr.steps)
    if shape.get("stop"):
        assert any(st["early_stop"] for _, st in trees[True]) and not all(st["early_stop"] for _, st in trees[True])
