"""Self-drafting heads (Medusa, EAGLE): the hidden-state seam, exactness, files and bad input.

Heads are trained for a few seconds inside the tests on each tiny model's own greedy text, so they guess
right often enough that multi-token steps happen; exactness never depends on how good they are."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import WORDS, hf_greedy, save_tiny_dir, tiny
from decoding import Sampling
from decoding.api import run
from decoding.engine.core import Core
from decoding.methods.self_draft.heads import HeadsError, load_heads
from decoding.engine.core import core_options
from decoding.training.train_heads import train

ARCHS = ("llama", "qwen2", "gpt2")
PROMPTS = ([5, 6, 7], [1, 9, 9, 2, 30])


class IntTok:
    """Whitespace-separated integers as token ids (tests train on the model's own greedy output)."""
    eos_token_id = None

    def __call__(self, text: str) -> dict:
        return {"input_ids": [int(w) for w in text.split()]}


def _train(model, kind: str, out, epochs: float = 8, **kw) -> str:
    texts = [" ".join(map(str, [s, s + 1, s + 2] + hf_greedy(model, [s, s + 1, s + 2], 120))) for s in range(6)]
    train(model, IntTok(), kind, texts, out, seq=32, max_tokens=800, epochs=epochs, batch=4, lr=3e-3,
          val_every=50, log=lambda *a: None, **kw)
    return str(out)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = {}
    for arch in ARCHS:
        model = tiny(arch)
        for kind in ("medusa", "eagle"):
            out[arch, kind] = (model, _train(model, kind, tmp_path_factory.mktemp(f"{arch}_{kind}")))
    return out


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_hidden_seam_equals_hf_hidden_states(static):
    """Core.forward(hidden=rows) returns the hidden states HF computes for the same tokens, from the same
    forward, for the last (normed) feature and an intermediate layer, on both cache paths."""
    model = tiny("llama", layers=3)
    ids = [3, 4, 5, 6, 7, 8]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    core = Core(model, static=static, capacity=64)
    logits, feats = core.prefill(ids[:4], hidden=[1, 3], layers=(-1, 2))
    assert feats.shape == (2, 2, 32)
    torch.testing.assert_close(feats[0], ref[-1][0, [1, 3]], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(feats[1], ref[2][0, [1, 3]], rtol=1e-5, atol=1e-5)
    core.commit(list(range(4)))
    logits2, f2 = core.forward(ids[4:], [-1, 0], hidden=[1])
    torch.testing.assert_close(f2[0, 0], ref[-1][0, 5], rtol=1e-5, atol=1e-5)
    assert logits2.shape[0] == 2 and int(logits2[1].argmax()) == int(model(torch.tensor([ids])).logits[0, 5].argmax())


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
@pytest.mark.parametrize("arch", ARCHS)
def test_heads_greedy_is_hf_greedy(trained, arch, kind):
    model, heads = trained[arch, kind]
    multi = 0
    for prompt in PROMPTS:
        for static in (False, True):
            tr = run(model, None, prompt, kind, max_new_tokens=40, heads=heads, static=static)
            assert tr.output_ids == hf_greedy(model, prompt, 40), (arch, kind, static)
            multi += sum(len(s.accepted) > 1 for s in tr.steps[1:])
            tree = tr.steps[2].info["tree"]
            assert len(tree["tokens"]) > 1 and tree["origin"][1] in ("head 1", "eagle draft")
            assert all(p is None or 0 <= p <= 1 for p in tree["target_prob"])
    assert multi > 0, "heads trained on the model's own text should get multi-token steps"


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_heads_on_graph_shaped_static_path(trained, kind):
    """The graph path's fixed buffers (run eagerly on CPU) return the features too: still HF greedy."""
    model, heads = trained["qwen2", kind]
    with core_options(fixed=True):
        tr = run(model, None, PROMPTS[1], kind, max_new_tokens=40, heads=heads, static=True)
    assert tr.output_ids == hf_greedy(model, PROMPTS[1], 40)
    # the fixed buffers ran buckets keyed by the hidden layers read (named "+h-1" in the trace)
    assert any(b.endswith("+h-1") for b in tr.config["graphs"]["used"]), tr.config["graphs"]


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_heads_sampling_is_seeded_and_path_independent(trained, kind):
    model, heads = trained["llama", kind]
    s = Sampling(0.8, top_k=20, seed=3)
    outs = [run(model, None, PROMPTS[0], kind, max_new_tokens=24, heads=heads, sampling=s, static=st).output_ids
            for st in (False, False, True)]
    assert outs[0] == outs[1] == outs[2] and len(outs[0]) == 24


def test_heads_refused_for_another_base_model_or_corrupt(trained, tmp_path):
    model, heads = trained["llama", "medusa"]
    other = tiny("llama", seed=1)
    with pytest.raises(HeadsError, match="trained for another base model"):
        run(other, None, PROMPTS[0], "medusa", max_new_tokens=4, heads=heads)
    with pytest.raises(HeadsError, match="holds medusa heads, not eagle"):
        load_heads(heads, model, "eagle")
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("heads.json", "heads.safetensors"):
        (bad / name).write_bytes((__import__("pathlib").Path(heads) / name).read_bytes())
    (bad / "heads.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(HeadsError, match="corrupt"):
        load_heads(bad, model)
    (bad / "heads.json").write_text("{not json")
    with pytest.raises(HeadsError, match="not valid JSON"):
        load_heads(bad, model)
    (bad / "heads.json").write_text("[1]")  # valid JSON, not a card: one line, not an AttributeError
    with pytest.raises(HeadsError, match="is not a JSON object"):
        load_heads(bad, model)


def test_train_resumes_and_keeps_best(tmp_path):
    """A run killed after its step-4 evaluation resumes from the step-2 state with the same command; the
    saved heads are the best validation checkpoint, and progress lines carry an ETA."""
    model = tiny("llama")
    texts = [" ".join(map(str, [s, s + 1] + hf_greedy(model, [s, s + 1], 120))) for s in range(6)]
    kw = dict(seq=32, max_tokens=800, epochs=2, batch=4, val_every=2)

    class Killed(Exception):
        pass

    def killer(msg):
        if msg.startswith("[valid] step 4"):
            raise Killed

    with pytest.raises(Killed):
        train(model, IntTok(), "medusa", texts, tmp_path / "h", log=killer, **kw)
    logs = []
    best = train(model, IntTok(), "medusa", texts, tmp_path / "h", log=logs.append, **kw)
    assert any(m.startswith("[train] resuming medusa at step 2/") for m in logs)
    assert any("ETA" in m for m in logs) and not any(m.startswith("[valid] step 2:") for m in logs)
    cfg = json.loads((tmp_path / "h" / "heads.json").read_text())
    assert cfg["kind"] == "medusa" and cfg["training"]["best_step"] == best["step"]
    assert cfg["training"]["valid_loss"] == round(best["loss"], 5)


def _cli(args, capsys):
    """In-process (main() is what the entry point runs) to keep the suite fast."""
    from types import SimpleNamespace

    from decoding.cli.main import main
    capsys.readouterr()
    rc = main(args)
    out = capsys.readouterr()
    return SimpleNamespace(returncode=rc, stdout=out.out, stderr=out.err)


def test_cli_train_heads_and_generate(tmp_path, capsys):
    mdir = save_tiny_dir(tmp_path / "m")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.py").write_text(" ".join(WORDS * 30))
    (data / "b.txt").write_text(" ".join(reversed(WORDS * 30)))
    r = _cli(["train-heads", "--model", mdir, "--kind", "eagle", "--data", str(data), "--out", str(tmp_path / "e"),
              "--seq", "32", "--max-tokens", "2000", "--epochs", "1"], capsys)
    assert r.returncode == 0, r.stderr
    assert "ETA" in r.stderr and (tmp_path / "e" / "heads.safetensors").exists()
    r = _cli(["generate", "--model", mdir, "--method", "eagle", "--heads", str(tmp_path / "e"), "--prompt",
              "def f ( x ) :", "--max-new-tokens", "12", "--check-exact"], capsys)
    assert r.returncode == 0, r.stderr
    assert "identical" in r.stderr and "[eagle] mean acceptance length" in r.stderr
    # --auto: the tree budget is picked by timed pilots and printed; the output stays HF greedy's
    r = _cli(["generate", "--model", mdir, "--method", "eagle", "--heads", str(tmp_path / "e"), "--prompt",
              "def f ( x ) :", "--max-new-tokens", "12", "--check-exact", "--auto"], capsys)
    assert r.returncode == 0, r.stderr
    auto = next(ln for ln in r.stderr.splitlines() if ln.startswith("[auto] tree budget "))
    budget = int(auto.split()[3].rstrip(","))
    assert budget in (4, 8, 16, 24) and "identical" in r.stderr
    assert auto.count("budget ") == 9 and auto.count("cut 0.1") in (4, 5)  # 4 budgets x cut 0 / 0.1, the winner


def test_autotune_heads_ranks_budgets_and_app_tune_caches_it(trained, tmp_path, monkeypatch):
    """The tuner times every budget and ranks by tokens/s; the app's Tune (presets.tune) uses it with the
    heads it is given and stores the budget as the device's auto preset."""
    from appkit.run import presets
    from decoding.methods.self_draft.heads_tune import autotune_heads
    from decoding.tuning.tune import kit
    from decoding.models import load
    model, heads = trained["llama", "medusa"]
    res = autotune_heads(kit(), model, None, PROMPTS[0], "medusa", heads, pilot_tokens=12, budgets=(2, 8), reps=1)
    assert sorted((r["budget"], r["confidence"]) for r in res["ranking"]) == [(2, 0.0), (2, 0.1), (8, 0.0), (8, 0.1)]
    assert res["best"] == res["ranking"][0]["budget"] and res["params"] == {
        "budget": res["ranking"][0]["budget"], "confidence": res["ranking"][0]["confidence"]}
    assert res["ranking"][0]["tokens_per_s"] >= res["ranking"][1]["tokens_per_s"] > 0
    assert all(r["compression"] >= 1 for r in res["ranking"])
    with pytest.raises(ValueError, match="not 'jacobi'"):
        autotune_heads(kit(), model, None, PROMPTS[0], "jacobi", heads)
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    mdir = save_tiny_dir(tmp_path / "m")
    m2, tok = load(mdir)
    h2 = _train(m2, "eagle", tmp_path / "h", epochs=2)
    out = presets.tune("tiny", m2, tok, "eagle", heads=h2)
    assert out["params"]["budget"] in (4, 8, 16, 24) and out["params"]["confidence"] in (0.0, 0.1)
    assert "tree budgets" in out["measured"] and ", cut " in presets.describe("eagle", {"budget": 8, "confidence": 0.1})
    assert presets.cached("tiny", m2, "eagle") == {"params": out["params"], "source": "tuned on this device"}


@pytest.mark.parametrize("args,msg", [
    (["train-heads", "--kind", "hydra", "--data", ".", "--out", "o"], "unknown --kind 'hydra'"),
    (["train-heads", "--kind", "medusa", "--data", "EMPTY", "--out", "o"], "no training text"),
    (["train-heads", "--kind", "medusa", "--unroll", "2", "--data", ".", "--out", "o"], "levels above 1 only for"),
    (["train-heads", "--kind", "medusa", "--data", "MISSING", "--out", "o"], "does not exist"),
    (["generate", "--model", "TINY", "--method", "medusa", "--prompt", "x"], "medusa needs heads: the shipped ones"),
    (["generate", "--method", "eagle", "--heads", "NOHEADS", "--prompt", "x"], "holds no heads"),
    (["generate", "--method", "greedy", "--heads", "h", "--prompt", "x"],
     "--heads and --acceptance need --method medusa or eagle"),
    (["generate", "--method", "lookahead", "--draft-vocab", "64", "--prompt", "x"],
     "--draft-vocab needs --method medusa, eagle or self_speculative"),
    (["generate", "--method", "lookahead", "--acceptance", "typical", "--prompt", "x"], "need --method medusa or eagle"),
    (["generate", "--method", "medusa", "--heads", "h", "--acceptance", "typical", "--prompt", "x"],
     "typical acceptance needs sampling (temperature > 0)"),
    (["generate", "--method", "eagle", "--heads", "h", "--draft-vocab", "-1", "--prompt", "x"],
     "draft-vocab must be an integer in [0, 1000000]"),
    (["generate", "--method", "medusa", "--heads", "h", "--budget", "8", "--auto", "--prompt", "x"],
     "--auto chooses the medusa tree budget itself: drop --budget"),
], ids=["kind", "empty-data", "unroll-medusa", "missing-data", "no-heads", "no-heads-dir", "heads-without-method",
        "draft-vocab-without-heads-method", "typical-without-heads-method", "typical-greedy", "negative-draft-vocab",
        "auto-budget"])
def test_cli_bad_input_one_line(tmp_path, capsys, args, msg):
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "NOHEADS").mkdir()
    if "TINY" in args:  # a model the shipped heads were not trained for
        from conftest import save_tiny_dir
        save_tiny_dir(tmp_path / "TINY")
    args = [str(tmp_path / a) if a in ("EMPTY", "MISSING", "NOHEADS", "TINY") else a for a in args]
    r = _cli(args, capsys)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and msg in lines[0], r.stderr


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_heads_trace_and_viz(trained, kind):
    """The trace records which head/depth, rank and probabilities of every node and survives JSON; the
    tree view colours nodes by head, the heads figure's counts agree with the steps' accepted paths."""
    import viz
    from decoding.trace import Trace
    from viz.palette import ORIGIN_COLORS
    model, heads = trained["gpt2", kind]
    tr = Trace.from_dict(json.loads(run(model, None, PROMPTS[0], kind, max_new_tokens=40, heads=heads).to_json()))
    d = viz.heads.data(tr)
    steps = [s for s in tr.steps if s.kind == "decode"]
    assert d["accepted_per_step"] == [len(s.accepted) for s in steps]
    assert d["accepted"][0] == sum(len(s.info["accepted_path"]) > 1 for s in steps if "tree" in s.info)
    assert all(0 <= r <= 1 for r in d["rate"]) and d["tried"] == sorted(d["tried"], reverse=True)
    nodes = viz.tree.data(tr, 2)["nodes"]
    want = {f"head {n['depth']}" if kind == "medusa" else "eagle draft" for n in nodes[1:]}
    assert {n["origin"] for n in nodes[1:]} == want and all(o in ORIGIN_COLORS for o in want)
    assert all(n["rank"] is not None and n["draft_prob"] is not None for n in nodes[1:])
    viz.heads.figure(tr)
    viz.tree.figure(tr, 2)


def test_shipped_heads_are_exact_on_the_embedded_target_and_app_wiring():
    """The shipped heads load for assets/target (fingerprint) and decode HF greedy's tokens through the
    app's Prepared event; another target gets one input error naming the heads; the budget is range-checked."""
    from appkit.run.handlers import Prepared, check_heads
    from appkit.public.limits import Limits
    from appkit.run.settings import InputError, Settings, method_params
    from decoding import Sampling, load
    model, tok = load()
    prompt = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):"
    ids = tok(prompt)["input_ids"]
    for kind in ("medusa", "eagle"):
        p = Prepared(Settings(method=kind), prompt, 24, Sampling(), model, tok, params={kind: {"budget": 8}})
        check_heads(p, [kind])
        tr = p.run(kind)
        assert tr.output_ids == hf_greedy(model, ids, 24, eos=0)
        with pytest.raises(InputError, match="heads.*another base model"):
            check_heads(Prepared(Settings(method=kind), prompt, 8, Sampling(), tiny("llama"), tok), [kind])
    problems: list[str] = []
    method_params(Settings(method="eagle", heads_budget=0), "eagle", Limits(), problems)
    assert problems and "heads tree budget" in problems[0]


def test_shared_traces_name_the_heads_folder_without_a_server_path():
    """A downloaded / replayed medusa or eagle trace says which heads ran, repo-relative, never the
    server's absolute path (the app's one public_trace() scrub)."""
    from appkit.page.tables import ROOT, public_trace
    from decoding.trace import Trace
    tr = Trace("eagle", {"heads": str(ROOT / "assets" / "heads" / "eagle"), "budget": 16}, [1, 2])
    assert public_trace(tr).config["heads"] == "assets/heads/eagle"
    tr = Trace("medusa", {"heads": "/home/someone/my-heads"}, [1, 2])
    assert public_trace(tr).config["heads"] == "my-heads"


def test_self_distill_rows_continue_with_the_models_own_greedy_text(tmp_path):
    """--distill P: each row keeps its first P tokens and continues with exactly HF greedy's tokens (the
    text greedy verification accepts); the rows are cached, and a prompt as long as a row is refused."""
    import numpy as np

    from decoding.training.train_heads import self_distill
    model = tiny("llama")
    rows = np.asarray([[5, 6, 7, 8] + [0] * 12, [1, 9, 9, 2] + [0] * 12, [3, 3, 4, 4] + [1] * 12], dtype=np.int32)
    out = self_distill(model, rows, 4, tmp_path / "k", batch=2, log=lambda *a: None)
    for r, o in zip(rows, out):
        assert o[:4].tolist() == r[:4].tolist()
        assert o[4:].tolist() == hf_greedy(model, r[:4].tolist(), 12)
    assert (tmp_path / "k.distill.npy").exists()
    assert np.array_equal(self_distill(model, rows[:1], 4, tmp_path / "k", log=lambda *a: None), out)  # cached
    with pytest.raises(HeadsError, match="shorter than a row"):
        self_distill(model, rows, 16, tmp_path / "other", log=lambda *a: None)


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_distilled_loss_ignores_guesses_of_the_prompt(kind):
    """With start = P only guesses of positions >= P count: labels before P may change without changing the
    loss, a label at P changes it."""
    from decoding.methods.self_draft.heads import new_heads
    from decoding.training.head_loss import head_loss
    model = tiny("llama")
    module, _ = new_heads(model, kind, 2)
    torch.manual_seed(0)
    ids = torch.randint(1, 50, (2, 12))
    feats = torch.randn(2, 12, model.config.hidden_size)
    arg = torch.randint(1, 50, (2, 12))
    base = head_loss(kind, module, model, ids, feats, arg, start=6)[0]
    early = arg.clone()
    early[:, :5] = (early[:, :5] + 7) % 50
    assert torch.equal(head_loss(kind, module, model, ids, feats, early, start=6)[0], base)
    late = arg.clone()
    late[:, 6] = (late[:, 6] + 7) % 50
    assert not torch.equal(head_loss(kind, module, model, ids, feats, late, start=6)[0], base)


@pytest.mark.parametrize("kv_heads,head_dim,packed", [(4, 8, False), (2, 8, False), (2, 8, True), (2, 64, True)],
                         ids=["mha", "gqa", "gqa-one-call", "gqa-one-call-d64"])
def test_eagle_drafting_layer_equals_the_heads_own_forward(kv_heads, head_dim, packed):
    """EagleLayer (own KV tensors, rotary table, one SDPA call; packed: the one-call CPU op) computes what
    EagleHead.forward computes through transformers' decoder layer: a causal prefill from scratch (past the
    first KV capacity and the first rotary table), then tree rows appended with an additive mask."""
    from transformers import DynamicCache
    from decoding.methods.self_draft.eagle_layer import EagleLayer
    from decoding.methods.self_draft.heads import EagleHead
    from decoding.engine.masks import chain_parents, step_mask
    torch.manual_seed(0)
    spec = dict(hidden=32, heads=4, kv_heads=kv_heads, head_dim=head_dim, intermediate=64, max_positions=4096,
                eps=1e-6, rope_theta=10000.0)
    head = EagleHead(spec).eval()
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.2)
    if packed:
        from decoding.fast.layout import apply_layout
        assert apply_layout(head, "packed") == "packed"
    T = 1030  # > the layer's first rotary table (1024 positions) and KV capacity
    emb, feat = torch.randn(1, T + 3, 32), torch.randn(1, T + 3, 32)
    layer = EagleLayer(head, capacity=8)
    assert layer.fast is packed
    with torch.no_grad():
        ref = head(emb[:, :T], feat[:, :T], past_key_values=(cache := DynamicCache(config=head.body.config)),
                   use_cache=True)
        out = layer(emb[0, :T], feat[0, :T], list(range(T)), step_mask(chain_parents(T), 0, torch.float32, "cpu")[0, 0])
        torch.testing.assert_close(out, ref[0], rtol=1e-5, atol=1e-5)
        parents = [-1, -1, 0]  # two siblings at depth 0, a child of the first
        mask = step_mask(parents, T, torch.float32, "cpu")
        pos = torch.tensor([[T, T, T + 1]])
        ref2 = head(emb[:, T:], feat[:, T:], position_ids=pos, attention_mask=mask, past_key_values=cache,
                    use_cache=True)
        out2 = layer(emb[0, T:], feat[0, T:], pos[0].tolist(), mask[0, 0])
    torch.testing.assert_close(out2, ref2[0], rtol=1e-5, atol=1e-5)
    layer.truncate(T)
    assert layer.used == T


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_draft_vocabulary_drafts_only_frequent_tokens_and_stays_exact(trained, kind, tmp_path):
    """Training writes the target's token counts; draft_vocab=N drafts only the N most frequent tokens
    (FR-Spec), the default a quarter of the vocabulary, 0 all of it; greedy output is HF greedy in every
    case (verification uses the whole vocabulary). A damaged counts file is one clear error."""
    from decoding.methods.self_draft.heads import COUNTS, load_counts
    model, heads = trained["llama", kind]
    counts = load_counts(heads)
    vocab = model.get_output_embeddings().weight.shape[0]
    assert counts is not None and len(counts) == vocab and int(counts.sum()) > 0
    top = set(torch.argsort(counts, descending=True, stable=True)[:6].tolist())
    want = hf_greedy(model, PROMPTS[1], 40)
    for size, allowed in ((6, top), (None, None), (0, None)):
        tr = run(model, None, PROMPTS[1], kind, max_new_tokens=40, heads=heads, draft_vocab=size)
        assert tr.output_ids == want, size
        assert tr.config["draft_vocab"] == {6: 6, None: vocab // 4, 0: 0}[size]
        drafted = {t for s in tr.steps if "tree" in s.info for t in s.info["tree"]["tokens"][1:]}
        assert drafted and (allowed is None or drafted <= allowed), (size, drafted - (allowed or set()))
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("heads.json", "heads.safetensors"):
        (bad / name).write_bytes((__import__("pathlib").Path(heads) / name).read_bytes())
    (bad / COUNTS).write_bytes(b"\x00garbage")
    with pytest.raises(HeadsError, match="is corrupt.*delete it"):
        run(model, None, PROMPTS[1], kind, max_new_tokens=4, heads=str(bad))
    (bad / COUNTS).unlink()  # heads without counts draft over the whole vocabulary
    assert run(model, None, PROMPTS[1], kind, max_new_tokens=40, heads=str(bad)).output_ids == want


def _path_probs(tree: dict) -> list[float]:
    out = []
    for i in range(1, len(tree["tokens"])):
        p, j = 1.0, i
        while j > 0:
            p, j = p * tree["draft_prob"][j], tree["parents"][j]
        out.append(p)
    return out


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_confidence_cuts_the_tree_and_stays_exact(trained, kind):
    """confidence c: every verified node's path probability (product of its and its ancestors' draft
    probabilities) is >= c, some steps verify fewer nodes than the budget, and greedy output is HF greedy."""
    model, heads = trained["qwen2", kind]
    want = hf_greedy(model, PROMPTS[0], 40)
    full = run(model, None, PROMPTS[0], kind, max_new_tokens=40, heads=heads, budget=8)
    probs = sorted(p for s in full.steps if "tree" in s.info for p in _path_probs(s.info["tree"]))
    c = probs[len(probs) // 2]  # the median node of the uncut trees
    cut = run(model, None, PROMPTS[0], kind, max_new_tokens=40, heads=heads, budget=8, confidence=c)
    assert full.output_ids == cut.output_ids == want and cut.config["confidence"] == c
    trees = [s.info["tree"] for s in cut.steps if "tree" in s.info]
    assert all(p >= c * (1 - 1e-5) for t in trees for p in _path_probs(t))
    assert min(len(t["tokens"]) for t in trees) < 9
    with pytest.raises(ValueError, match="confidence must be a number in"):
        run(model, None, PROMPTS[0], kind, max_new_tokens=4, heads=heads, confidence=1.5)


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_typical_acceptance_is_opt_in_refused_when_greedy_and_accepts_longer_paths(trained, kind):
    """Medusa's typical acceptance (not exact): off by default, refused under greedy decoding, named in
    the trace config, and at a high temperature it accepts more tokens per step than exact sampling."""
    model, heads = trained["llama", kind]
    with pytest.raises(ValueError, match="typical acceptance needs sampling"):
        run(model, None, PROMPTS[0], kind, max_new_tokens=8, heads=heads, acceptance="typical")
    with pytest.raises(ValueError, match="acceptance must be one of exact, typical"):
        run(model, None, PROMPTS[0], kind, max_new_tokens=8, heads=heads, acceptance="loose")
    per_step = {}
    for acc in ("exact", "typical"):
        n_tok = n_steps = 0
        for seed in range(3):
            for prompt in PROMPTS:
                tr = run(model, None, prompt, kind, max_new_tokens=32, heads=heads, acceptance=acc,
                         sampling=Sampling(1.5, seed=seed))
                assert tr.config["acceptance"] == acc and len(tr.output_ids) == 32
                n_tok += len(tr.output_ids) - 1
                n_steps += len(tr.steps) - 1
        per_step[acc] = n_tok / n_steps
    assert run(model, None, PROMPTS[0], kind, max_new_tokens=8, heads=heads).config["acceptance"] == "exact"
    assert per_step["typical"] > per_step["exact"], per_step


def test_unrolled_training_sees_what_drafting_sees():
    """EAGLE's training-time test (--unroll): level j's prediction at start t, computed for every t at once
    under one mask, equals drafting it with EagleLayer: catch-up on the real pairs up to t, then one tree
    node per level on the previous level's predicted feature. Level 1 equals the plain (unroll 1) loss."""
    from decoding.methods.self_draft.eagle_layer import EagleLayer
    from decoding.methods.self_draft.heads import EagleHead
    from decoding.training.head_loss import head_loss, unrolled_features
    torch.manual_seed(0)
    spec = dict(hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=64, max_positions=512, eps=1e-6,
                rope_theta=10000.0)
    head = EagleHead(spec).eval()
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.2)
    T = 12
    emb, feats = torch.randn(1, T, 32), torch.randn(1, T, 32)
    with torch.no_grad():
        levels = unrolled_features(head, emb, feats[:, :-1], 3)
        for t in (0, 4, 7):
            layer = EagleLayer(head)
            f = layer(emb[0, 1:t + 2], feats[0, :t + 1], list(range(t + 1)), None if t == 0 else
                      torch.zeros(t + 1, t + 1).masked_fill(torch.ones(t + 1, t + 1).triu(1).bool(), float("-inf")))
            torch.testing.assert_close(f[-1], levels[0][0, t], rtol=1e-5, atol=1e-5)
            for j in (1, 2):  # a chain node per level: sees every row in the layer so far
                f = layer(emb[0, t + 1 + j:t + 2 + j], f[-1:], [t + j], None)
                torch.testing.assert_close(f[0], levels[j][0, t], rtol=1e-5, atol=1e-5)
    model = tiny("llama")
    from decoding.methods.self_draft.heads import new_heads
    module, _ = new_heads(model, "eagle")
    ids = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        feats = model(ids, output_hidden_states=True).hidden_states[-1]
        arg = model(ids).logits.argmax(-1)
        one, acc1 = head_loss("eagle", module, model, ids, feats, arg)
        two, acc2 = head_loss("eagle", module, model, ids, feats, arg, unroll=2)
    assert len(acc2) == 2 and acc2[0] == pytest.approx(acc1[0]) and not torch.isclose(one, two)


def test_eagle_tree_shapes_follow_the_budget(trained):
    """Every expanded EAGLE node gets `branch` top-k children (greedy, the budget left unbinding) or the
    sampled tree's two drawn children (sampling): never more, at any level, and a sampled tree stays inside
    the budget (no pruning may fix it up afterwards: that would bias the sampling)."""
    from collections import Counter
    model, heads = trained["llama", "eagle"]
    tr = run(model, None, PROMPTS[1], "eagle", max_new_tokens=24, heads=heads, budget=64, branch=2)
    for s in tr.steps[1:]:
        kids = Counter(s.info["tree"]["parents"][1:])
        assert kids and max(kids.values()) <= 2 and len(kids) > 2, kids  # several levels expanded
    tr = run(model, None, PROMPTS[1], "eagle", max_new_tokens=24, heads=heads, budget=8, sampling=Sampling(1.0, seed=2))
    for s in tr.steps[1:]:
        kids = Counter(s.info["tree"]["parents"][1:])
        assert len(s.tokens) <= 9 and set(kids.values()) <= {2}, (len(s.tokens), kids)


def test_loaded_heads_are_kept_per_model_until_their_files_change(trained, tmp_path):
    """Prompt after prompt reuses one load (the app, the benches); rewritten files or another model load anew."""
    import shutil
    from decoding.methods.self_draft.heads import load_drafting
    model, heads = trained["llama", "eagle"]
    copy = shutil.copytree(heads, tmp_path / "eagle")
    first = load_drafting(copy, model, "eagle", None)
    assert load_drafting(copy, model, "eagle", None) is first
    assert load_drafting(copy, model, "eagle", 0) is not first  # another drafting vocabulary
    (copy / "heads.safetensors").write_bytes(b"broken")
    with pytest.raises(HeadsError, match="corrupt"):
        load_drafting(copy, model, "eagle", None)
    with pytest.raises(HeadsError, match="trained for another base model"):
        load_drafting(heads, tiny("llama", seed=1), "eagle", None)


def test_heads_and_adapters_load_in_any_dtype(tmp_path):
    """The base-model fingerprint does not change with the dtype the model is loaded in: the shipped heads
    are found for the embedded target in bf16 and fp16 (bf16 is the CUDA default above 1B parameters),
    heads saved from an fp32 model load on its bf16 copy, and another model is still refused. A card
    written with the older value fingerprint still loads on the fp32 model it was trained for."""
    from decoding import load
    from decoding.api import default_heads
    from decoding.methods.self_draft.heads import base_fingerprint, new_heads, save_heads
    from decoding.methods.self_draft.self_spec_adapter import AdapterError, load_adapter, new_adapter, save_adapter
    from decoding.models import EMBEDDED_TARGET
    fps = {}
    for dtype in ("fp32", "bf16", "fp16"):
        model, tok = load(EMBEDDED_TARGET, dtype=dtype)
        fps[dtype] = base_fingerprint(model)
        for kind in ("medusa", "eagle"):
            assert default_heads(model, kind).endswith(kind), (dtype, kind)
            load_heads(default_heads(model, kind), model, kind)
    assert len(set(fps.values())) == 1, fps
    small = tiny("llama")
    module, cfg = new_heads(small, "medusa", n_heads=2)
    save_heads(module, cfg, tmp_path / "m")
    load_heads(tmp_path / "m", tiny("llama").to(torch.bfloat16), "medusa")
    with pytest.raises(HeadsError, match="another base model"):
        load_heads(tmp_path / "m", tiny("llama", seed=1).to(torch.bfloat16), "medusa")
    layer, acfg = new_adapter(small, 1)
    save_adapter(layer, acfg, tmp_path / "a")
    load_adapter(tmp_path / "a", tiny("llama").to(torch.float16))
    with pytest.raises(AdapterError, match="another base model"):
        load_adapter(tmp_path / "a", tiny("llama", seed=1))
    from decoding.methods.self_draft.heads import base_fingerprints
    card = json.loads((tmp_path / "m" / "heads.json").read_text())
    old = base_fingerprints(small)[1]
    (tmp_path / "m" / "heads.json").write_text(json.dumps({**card, "base_fingerprint": old}))
    load_heads(tmp_path / "m", tiny("llama"), "medusa")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("shape", [dict(budget=64, branch=2), dict(budget=40, beam=3, branch=3), dict(budget=8, depth=1),
                                   "cut"], ids=["deep", "beam3", "depth1", "cut"])
def test_eagle_levels_chained_on_the_device_draft_the_level_loops_tree(trained, arch, shape, monkeypatch):
    """Greedy EAGLE on CUDA chains its levels on the device (one host read a step, eagle._device_tree): its
    trees are the level loop's, node for node (tokens, parents, draft probabilities, ranks), with or without
    a confidence cut (the device then runs rows the loop skips), and greedy output is HF greedy."""
    from decoding.methods.draft_model import draft_tree
    model, heads = trained[arch, "eagle"]
    want = hf_greedy(model, PROMPTS[1], 30)
    if shape == "cut":  # the median node of the uncut trees: some levels lose rows, some frontiers end early
        full = run(model, None, PROMPTS[1], "eagle", max_new_tokens=30, heads=heads, budget=64, branch=2)
        probs = sorted(p for s in full.steps if "tree" in s.info for p in _path_probs(s.info["tree"]))
        shape = dict(budget=64, branch=2, confidence=probs[len(probs) // 2])
    from decoding.methods.self_draft.eagle import Eagle
    calls, device_tree = [], Eagle._device_tree
    monkeypatch.setattr(Eagle, "_device_tree", lambda self, *a: calls.append(1) or device_tree(self, *a))
    trees, forwards = {}, {}
    for chained in (False, True):
        monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", chained)
        tr = run(model, None, PROMPTS[1], "eagle", max_new_tokens=30, heads=heads, **shape)
        assert tr.output_ids == want, chained
        steps = [s.info for s in tr.steps if "tree" in s.info]
        trees[chained] = [{k: s["tree"][k] for k in ("tokens", "parents", "depth", "draft_prob", "rank")}
                          for s in steps]
        forwards[chained] = [s["draft_forwards"] for s in steps]
    assert len(calls) == len(trees[True])  # the chained run drafted every tree on the device
    assert trees[True] == trees[False] and any(max(t["depth"]) > 2 for t in trees[True]) == ("depth" not in shape)
    assert all(c >= f for c, f in zip(forwards[True], forwards[False]))


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_drafters_beside_a_block_packed_target_store_q8_0_blocks_and_stay_exact(trained, kind, monkeypatch):
    """A GGUF-like target on the CPU kernel: the heads' own Linears are rounded to Q8_0 blocks (8.5 bits a
    weight to read per drafting forward), the drafts change a little, the output is still HF greedy's."""
    import copy
    from decoding.fast.cpu_gemm import PackedLinear
    from decoding.fast.layout import apply_layout
    from decoding.methods.self_draft.heads import load_drafting
    from test_cpu_blocks import quantize_model
    model, heads = trained["llama", kind]
    stock = quantize_model(copy.deepcopy(model), lambda name: "q8_0" if name == "lm_head" else "q4_1")
    packed = copy.deepcopy(stock)
    assert apply_layout(packed, "packed") == "packed"
    module = load_drafting(heads, packed, kind, None)[0]
    assert {m.storage for m in module.modules() if isinstance(m, PackedLinear)} == {"q8_0"}
    for prompt in PROMPTS:
        tr = run(packed, None, prompt, kind, max_new_tokens=32, heads=heads)
        assert tr.output_ids == hf_greedy(stock, prompt, 32)
    assert any(len(s.accepted) > 1 for s in tr.steps)
    monkeypatch.setenv("DECODESCOPE_DRAFT_BLOCKS", "0")
    module = load_drafting(heads, packed, kind, 0)[0]  # another key: loaded again
    assert {m.storage for m in module.modules() if isinstance(m, PackedLinear)} == {"fp32"}
    assert load_drafting(heads, stock, kind, None)[0] is not None  # a stock target: nothing rounded, no error


def test_a_large_vocabulary_drafts_over_at_most_32k_tokens_by_default():
    """The default drafting vocabulary is a quarter of the vocabulary, capped at 32,768 rows: a 200K-token head
    drafts over its 32,768 most emitted tokens (not 50,000); a small one keeps its quarter; --draft-vocab wins."""
    import torch
    from torch import nn
    from decoding.methods.self_draft.heads import LARGE_VOCAB_DRAFT, DraftLM
    big = nn.Linear(4, 200_000, bias=False)
    counts = torch.randint(0, 1000, (200_000,))
    d = DraftLM(big, counts)
    assert d.size == LARGE_VOCAB_DRAFT == 32_768
    assert set(d.ids.tolist()) == set(torch.argsort(counts, descending=True, stable=True)[:32_768].tolist())
    assert DraftLM(nn.Linear(4, 8_192, bias=False), torch.randint(0, 9, (8_192,))).size == 2_048
    assert DraftLM(big, counts, 100_000).size == 100_000 and DraftLM(big, counts, 0).ids is None
