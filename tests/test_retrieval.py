"""Retrieval drafting (REST datastore, SuffixDecoding suffix cache): exact in greedy mode on four architectures,
the target's distribution when sampling, the datastore's lookup against brute force, its refusals (another
tokenizer, truncated, corrupt), the suffix cache, the trace, and the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

from conftest import hf_greedy, tiny
from decoding import generate
from decoding.api import make_drafter, run
from decoding.engine.sampling import Sampling
from decoding.methods.retrieve.datastore import SA, TOKENS, Datastore, DatastoreError, write
from decoding.methods.retrieve.retrieval import Retrieval, trie
from decoding.methods.retrieve.suffix_cache import HISTORY, History, longest_suffix, lookup
from decoding.trace import Trace

PROMPT = [3, 4, 5, 6, 7, 8, 3, 4, 5, 6, 9, 10, 3, 4, 5]


def mistral():
    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    return MistralForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def models():
    return {"llama": tiny("llama"), "qwen2": tiny("qwen2"), "gpt2": tiny("gpt2"), "mistral": mistral()}


def store_of(model, path, prompt=PROMPT, n=120) -> str:
    """A datastore of the model's own greedy continuations (so drafts are often right) plus noise."""
    rng = np.random.default_rng(0)
    docs = [prompt + hf_greedy(model, prompt, n), list(rng.integers(0, 64, 500)), hf_greedy(model, [1, 2], 60)]
    write(path, docs, ["own.txt", "noise.txt", "other.txt"], "fp-test", 64)
    return str(path)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "mistral"])
def test_greedy_equals_hf_greedy_from_datastore_and_suffix_cache(models, arch, tmp_path):
    model = models[arch]
    ref = hf_greedy(model, PROMPT, 40)
    ds = store_of(model, tmp_path / "ds")
    HISTORY.clear()
    for params in (dict(datastore=ds, budget=16), dict(), dict(budget=3, max_spec_factor=0.5)):
        tr = run(model, None, PROMPT, "retrieval", max_new_tokens=40, **params)
        assert tr.output_ids == ref, params
    tr = run(model, None, PROMPT, "retrieval", max_new_tokens=40, datastore=ds, budget=16)
    assert tr.stats()["compression"] > 2.0, "the datastore holds the answer: most steps should accept several"
    HISTORY.clear()


def test_datastore_lookup_matches_brute_force(tmp_path):
    rng = np.random.default_rng(1)
    docs = [list(rng.integers(0, 5, size)) for size in (300, 200, 41)]
    write(tmp_path, docs, ["a", "b", "c"], "fp", 70000)  # vocab > 65535: the 4-byte layout
    ds = Datastore(tmp_path, fingerprint="fp")
    assert ds.w == 4
    flat = [t for d in docs for t in d + [-1]]
    for trial in range(40):
        ctx = list(rng.integers(0, 5, 12))
        m = ds.lookup(ctx, max_suffix=8, continuations=10_000, span=4)
        occ = lambda k: [i for i in range(len(flat) - k + 1) if flat[i:i + k] == ctx[-k:]]  # noqa: E731
        best = max(k for k in range(0, 9) if k == 0 or occ(k))
        assert m.length == best and m.count == len(occ(best))
        assert sorted(m.starts.tolist()) == occ(best)
        for s, row in zip(m.starts.tolist(), m.conts.tolist()):
            after = flat[s + best:s + best + 4]
            want = [t for t in after[:after.index(-1) if -1 in after else 4]]
            assert row[:len(want)] == want and all(x == -1 for x in row[len(want):])
    f, off = ds.where(int(ds.file_starts[1]) + 7)
    assert (f, off) == ("b", 7)


def test_trie_keeps_the_most_frequent_prefixes_as_a_tree():
    conts = np.array([[1, 2, 3], [1, 2, 4], [1, 2, 3], [5, -1, -1], [1, 7, -1]])
    t = trie(conts, 4)
    assert t["token"].tolist() == [1, 5, 2, 3] and t["count"].tolist() == [4, 1, 3, 2]
    assert t["parent"].tolist() == [-1, -1, 0, 2]
    t = trie(conts, 10, min_prob=0.3)  # SuffixDecoding's threshold: count / all >= 0.3
    assert t["token"].tolist() == [1, 2, 3]


def test_refusals_other_tokenizer_truncated_corrupt(tmp_path):
    write(tmp_path / "ds", [[1, 2, 3, 4, 1, 2, 5]], ["x"], "fp-a", 64)
    with pytest.raises(DatastoreError, match="another tokenizer"):
        Datastore(tmp_path / "ds", fingerprint="fp-b")
    with pytest.raises(DatastoreError, match="no datastore"):
        Datastore(tmp_path / "nothing")
    for name, damage, needle in ((TOKENS, lambda b: b[:-2], "truncated"), (SA, lambda b: b[:4] + bytes([b[4] ^ 1]) + b[5:],
                                                                            "corrupt")):
        bad = tmp_path / f"bad-{name}"
        write(bad, [[1, 2, 3, 4, 1, 2, 5]], ["x"], "fp-a", 64)
        (bad / name).write_bytes(damage((bad / name).read_bytes()))
        with pytest.raises(DatastoreError, match=needle):
            Datastore(bad)
    write(tmp_path / "big", [[1, 2, 3, 70]], ["x"], "fp-a", 100)  # ids the 64-token model does not have
    with pytest.raises(DatastoreError, match="built for another model"):
        run(tiny("llama"), None, [1, 2, 3], "retrieval", max_new_tokens=4, datastore=str(tmp_path / "big"))
    with pytest.raises(DatastoreError, match="holds token id 70 but the model's embedding has 64 rows"):
        run(tiny("llama"), None, [1, 2, 3], "retrieval", max_new_tokens=4, datastore=str(tmp_path / "big"))
    (tmp_path / "ds" / "datastore.json").write_text('{"format": "decodescope.datastore/1", "tokens": -5}')
    with pytest.raises(DatastoreError, match="not a DecodeScope datastore"):
        Datastore(tmp_path / "ds")
    (tmp_path / "ds" / "datastore.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        make_drafter("retrieval", datastore=str(tmp_path / "ds"))


def test_a_tokenizer_larger_than_the_embedding_is_not_another_model(tmp_path):
    """A tokenizer with an added token (65 entries) over a 64-row embedding: the datastore records 65 as the
    vocabulary, yet every id it holds is one the model has, so it is the model's own and must be accepted
    (and the top id, 63, is the one the check compares)."""
    model = tiny("llama")
    write(tmp_path / "ds", [PROMPT + [63, 1, 2]], ["x"], "fp", 65)
    assert Datastore(tmp_path / "ds").max_id() == 63
    tr = run(model, None, PROMPT, "retrieval", max_new_tokens=12, datastore=str(tmp_path / "ds"))
    assert tr.output_ids == hf_greedy(model, PROMPT, 12)
    write(tmp_path / "edge", [PROMPT + [64]], ["x"], "fp", 65)  # the one id the embedding lacks
    with pytest.raises(DatastoreError, match="holds token id 64 but the model's embedding has 64 rows"):
        run(model, None, PROMPT, "retrieval", max_new_tokens=4, datastore=str(tmp_path / "edge"))


def test_suffix_cache_finds_the_longest_suffix_and_uses_earlier_runs():
    buf = np.array([1, 2, 3, 9, 1, 2, 3, 4, 2, 3])
    m, ends = longest_suffix(buf, np.array([7, 1, 2, 3]), 8, end=len(buf) - 1)
    assert m == 3 and ends.tolist() == [2, 6]
    h = History(limit=30)
    h.add([5, 6, 7, 8, 9] * 3)
    h.add([1, 2, 3])
    h.add(list(range(20, 40)))  # over the limit: the oldest run is dropped
    assert len(h.runs) == 2
    match, where = lookup([0, 21, 22, 23], h, prompt_len=4)
    assert match.length == 3 and match.conts[0, :2].tolist() == [24, 25] and where[0] == ("run 2", 1)
    # a second run of the same prompt drafts from the first (the global history): longer accepted steps
    model = tiny("llama", seed=3)
    HISTORY.clear()
    prompt = [1, 2, 3, 4]
    first = run(model, None, prompt, "retrieval", max_new_tokens=40)
    second = run(model, None, prompt, "retrieval", max_new_tokens=40)
    assert first.output_ids == second.output_ids == hf_greedy(model, prompt, 40)
    assert second.stats()["compression"] > max(2.0, first.stats()["compression"])
    seen = {w for s in second.steps for w in s.info.get("retrieval", {}).get("node_at", [])}
    assert "run 1" in seen
    HISTORY.clear()


def test_trace_records_match_and_validates(models, tmp_path):
    model = models["llama"]
    ds = store_of(model, tmp_path / "ds")
    tr = run(model, None, PROMPT, "retrieval", max_new_tokens=30, datastore=ds, budget=12)
    steps = [s for s in tr.steps if s.kind == "decode"]
    rec = steps[0].info["retrieval"]
    assert rec["source"] == "datastore" and rec["suffix_len"] >= 1 and rec["at"][0]["where"] in ("own.txt", "noise.txt",
                                                                                                  "other.txt")
    assert steps[0].info["tree"]["count"][0] == rec["used"]
    assert any(s.info["retrieval"]["accepted"] >= 2 for s in steps)
    import viz
    k = next(i for i, s in enumerate(tr.steps) if s.kind == "decode" and s.info["retrieval"]["accepted"] >= 2)
    d = viz.retrieval.data(tr, k)  # the picture reads the trace only
    assert d["suffix"] == tr.steps[k].info["retrieval"]["suffix"] and d["nodes"][0]["count"] == d["used"]
    assert [n["id"] for n in d["nodes"] if n["accepted"]] == tr.steps[k].info["accepted_path"]
    assert "found" in viz.retrieval.headline(d) and viz.retrieval.figure(tr, k).data
    assert viz.retrieval.run_data(tr)["accepted"] == [len(s.accepted) for s in steps]
    assert "retrieval" in viz.stepper.build(tr)["run"]
    tr.save(tmp_path / "t.json")
    back = Trace.load(tmp_path / "t.json")
    assert back.output_ids == tr.output_ids
    d = json.loads((tmp_path / "t.json").read_text())
    d["steps"][1]["info"]["tree"]["count"] = [1]  # parallel arrays must agree: the gate refuses it
    with pytest.raises(ValueError, match="count"):
        Trace.from_dict(d)


def peaky(vocab=6):
    model = tiny("llama", vocab=vocab, seed=7)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)
    return model


def test_sampling_keeps_the_target_distribution(tmp_path):
    """The first 3 sampled tokens of a 6-token model, chi-square against the exact joint distribution
    (enumerated), as tests/test_sampling.py does for lookahead and the heads."""
    from test_sampling import L, PROMPT as SP, chi2_pvalue, exact_joint
    model = peaky()
    s = Sampling(1.0, 5, 0.95, 0)
    probs = exact_joint(model, s)
    docs = [SP + hf_greedy(model, SP, 30)] + [list(np.random.default_rng(i).integers(0, 6, 60)) for i in range(3)]
    write(tmp_path, docs, ["a", "b", "c", "d"], "fp", 6)
    ds = Datastore(tmp_path)
    runs, counts, multi = 1500, {}, 0
    for seed in range(runs):
        tr = generate(model, SP, Retrieval(ds, budget=8), max_new_tokens=L, sampling=Sampling(1.0, 5, 0.95, seed),
                      trace=False)
        counts[tuple(tr.output_ids)] = counts.get(tuple(tr.output_ids), 0) + 1
        multi += any(len(st.accepted) > 1 for st in tr.steps)
    assert multi > runs // 10, f"only {multi} runs accepted a retrieved token"
    assert chi2_pvalue(counts, probs, runs) > 1e-3


def test_cli_build_datastore_then_generate(tiny_dir, tmp_path, capsys):
    from decoding.cli.main import main
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("def x ( y ) : return y + 1\n" * 20)
    (src / "b.py").write_text("for i in range ( n ) : print ( i )\n" * 10)
    assert main(["build-datastore", "--model", tiny_dir, "--from", str(src), "--out", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr()
    assert "tokens from 2 files" in out.out
    meta = json.loads((tmp_path / "ds" / "datastore.json").read_text())
    assert meta["tokens"] > 100
    from transformers import AutoTokenizer as AT
    from decoding.methods.retrieve.datastore import Datastore as DS
    want = AT.from_pretrained(tiny_dir)((src / "a.txt").read_text(), add_special_tokens=False)["input_ids"]
    store = DS(tmp_path / "ds")
    a_start = store.file_starts[[n.endswith("a.txt") for n in store.file_names].index(True)]
    assert store.tokens[a_start:a_start + len(want)].tolist() == want  # the build tokenises as tokenizer() does
    js = tmp_path / "run.json"
    assert main(["generate", "--model", tiny_dir, "--method", "retrieval", "--datastore", str(tmp_path / "ds"),
                 "--prompt", "def x ( y ) :", "--max-new-tokens", "12", "--json", str(js)]) == 0
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model, tok = AutoModelForCausalLM.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)
    d = json.loads(js.read_text())
    assert d["output_ids"] == hf_greedy(model, tok("def x ( y ) :")["input_ids"], 12)
    capsys.readouterr()
    meta["tokenizer"] = "0" * 16
    (tmp_path / "ds" / "datastore.json").write_text(json.dumps(meta))
    assert main(["generate", "--model", tiny_dir, "--method", "retrieval", "--datastore", str(tmp_path / "ds"),
                 "--prompt", "def x", "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another tokenizer" in err[0]
    assert main(["generate", "--model", tiny_dir, "--method", "greedy", "--datastore", str(tmp_path / "ds"),
                 "--prompt", "def x"]) == 2
    assert "--datastore needs --method retrieval" in capsys.readouterr().err


def test_app_menu_runs_retrieval_and_refuses_a_datastore_for_another_tokenizer(tiny_dir):
    """The app's retrieval source menu: the suffix cache runs (exact); the shipped datastore (SmolLM2's
    tokenizer) on another model is one input error before any run; an unknown source is refused."""
    from appkit.run.handlers import InputError, Handlers
    from appkit.public.limits import Limits
    from appkit.models.model_cache import ModelCache
    from appkit.run.settings import Settings
    from transformers import AutoModelForCausalLM, AutoTokenizer
    h = Handlers(Limits(False, tiny_dir), ModelCache())
    s = Settings(target=tiny_dir, prompt="def x ( y ) : return y", method="retrieval", preset="manual", max_new=12)
    p = h.plan(s, ["retrieval"])
    tr = p.run("retrieval")
    model, tok = AutoModelForCausalLM.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)
    assert tr.output_ids == hf_greedy(model, tok(s.prompt)["input_ids"], 12)
    assert tr.config["source"] == "suffix_cache"
    for choice, needle in (("shipped", "another tokenizer"), ("/etc", "choose the suffix cache or the shipped")):
        s.datastore = choice
        with pytest.raises(InputError, match=needle):
            h.plan(s, ["retrieval"])
