"""Profiling: analytic FLOPs vs FlopCounterMode, one profiler range per step, Perfetto export, peaks cache."""
from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from decoding import Step, Trace, generate, make_drafter
from decoding.engine.core import Core
from decoding.engine.masks import chain_parents, depths_of
from decoding.methods.windows.lookahead import lookahead_layout
from profiling import calibrate, roofline
from profiling.__main__ import main as cli_main
from profiling.flops import arch_of, attention_flops, draft_cost, linear_flops, step_cost, trace_costs
from profiling.profiler import StepClock, build_profile, load_profile, profile_run, range_name
from profiling.sweep import latency_sweep, tree_parents

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: threads on tiny models only add contention
    yield
    torch.set_num_threads(old)


def tiny_model(arch: str, attn: str = "sdpa", seed: int = 0):
    torch.manual_seed(seed)
    common = dict(vocab_size=64, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if arch == "llama":  # GQA (4 query heads, 2 KV heads) and a gated SiLU MLP
        cfg = LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=512, **common)
        cls = LlamaForCausalLM
    else:  # fused c_attn, 2-matrix GELU MLP (n_inner = 4h), tied LM head
        cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=512, **common)
        cls = GPT2LMHeadModel
    cfg._attn_implementation = attn
    return cls(cfg).eval()


def step_shapes() -> dict[str, list[int]]:
    return {"single": [-1],
            "lookahead": lookahead_layout(window=4, ngram=4, levels=3, n_candidates=3)["parents"],
            "tree": tree_parents(13, "tree")}


def counted_flops(model, parents: list[int], kv_len: int = 11, op: str | None = None) -> int:
    """FlopCounterMode's count for one step (only ops whose name contains `op`, if given)."""
    core = Core(model)
    core.prefill(list(range(1, kv_len + 1)))
    core.commit(list(range(kv_len)))
    tokens = [(3 * i) % 64 for i in range(len(parents))]
    with FlopCounterMode(display=False) as fc:
        core.forward(tokens, parents, depths_of(parents))
    core.commit([0])
    if op is None:
        return fc.get_total_flops()
    return sum(v for k, v in fc.get_flop_counts()["Global"].items() if op in str(k))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("shape", ["single", "lookahead", "tree"])
def test_linear_flops_match_flop_counter(arch, shape):
    """SDPA on CPU counts 0 FLOPs, so the counter sees exactly the weight matmuls."""
    parents = step_shapes()[shape]
    model = tiny_model(arch, "sdpa")
    counted = counted_flops(model, parents)
    analytic = sum(linear_flops(arch_of(model.config), len(parents)).values())
    assert counted > 0
    assert abs(analytic - counted) <= 0.01 * counted, (analytic, counted)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("shape", ["single", "lookahead", "tree"])
def test_total_flops_match_flop_counter_with_eager_attention(arch, shape):
    """Eager attention runs QK^T and AV as bmm, so the counter sees attention over kv_len + q keys too."""
    parents = step_shapes()[shape]
    model = tiny_model(arch, "eager")
    counted = counted_flops(model, parents, kv_len=11)
    cost = step_cost(arch_of(model.config), len(parents), 11)
    assert abs(cost["flops"] - counted) <= 0.01 * counted, (cost["flops"], counted)
    attn = counted_flops(model, parents, kv_len=11, op="bmm")  # the attention part on its own
    assert abs(attention_flops(arch_of(model.config), len(parents), 11) - attn) <= 0.01 * attn, attn


def test_wrong_mlp_kind_is_caught():
    """The check is sharp: treating Llama's gated MLP as a 2-matrix MLP misses by far more than 1%."""
    model = tiny_model("llama")
    counted = counted_flops(model, [-1])
    a = arch_of(model.config)
    wrong = type(a)(**{**a.to_dict(), "gated_mlp": False})
    assert abs(sum(linear_flops(wrong, 1).values()) - counted) > 0.05 * counted


def test_bytes_grow_with_kv_and_weights_dominate_a_single_token():
    a = arch_of(tiny_model("llama").config)
    short, long = step_cost(a, 1, 10), step_cost(a, 1, 400)
    assert long["kv_read_bytes"] == 40 * short["kv_read_bytes"]
    assert long["bytes"] > short["bytes"]
    assert short["weight_bytes"] > short["kv_read_bytes"] + short["act_bytes"]
    assert step_cost(a, 64, 10)["intensity"] > short["intensity"]  # more query tokens, more reuse


@pytest.fixture(scope="module")
def lookahead_profile(tmp_path_factory):
    model = tiny_model("llama")
    path = tmp_path_factory.mktemp("prof") / "la.perfetto.json"
    peaks = {"flops": 1e10, "bandwidth": 1e10}
    tr, prof = profile_run(model, None, PROMPT, "lookahead", max_new_tokens=24, perfetto_path=path,
                           peaks=peaks, window=4, ngram=3, guesses=3)
    return model, tr, prof, path


def test_profiled_lookahead_has_one_range_per_step(lookahead_profile):
    _, tr, prof, _ = lookahead_profile
    assert len(tr.steps) > 3 and tr.steps[0].kind == "prefill"  # prefill is step 0 and has its range
    assert [r["index"] for r in prof["ranges"]] == [s.index for s in tr.steps]
    assert [r["name"] for r in prof["ranges"]] == [range_name("lookahead", s.index) for s in tr.steps]
    assert all(r["dur_us"] > 0 for r in prof["ranges"])
    ends = [r["ts_us"] + r["dur_us"] for r in prof["ranges"]]
    assert all(e <= nxt["ts_us"] + 1 for e, nxt in zip(ends, prof["ranges"][1:]))  # ranges do not overlap


def test_profile_steps_match_trace(lookahead_profile):
    _, tr, prof, _ = lookahead_profile
    assert [s["n_query"] for s in prof["steps"]] == [s.n_query for s in tr.steps]
    assert [s["kv_len"] for s in prof["steps"]] == [s.kv_len for s in tr.steps]
    assert [s["accepted"] for s in prof["steps"]] == [len(s.accepted) for s in tr.steps]
    assert max(s["n_query"] for s in prof["steps"][1:]) > 1  # lookahead steps really are multi-token
    assert all(s["wall_ms"] > 0 and s["flops"] > 0 and s["bytes"] > 0 for s in prof["steps"])
    assert prof["series"]["cum_tokens"][-1] == len(tr.output_ids)
    assert prof["series"]["cum_flops"][-1] == prof["totals"]["flops"] == sum(s["flops"] for s in prof["steps"])
    assert prof["memory"]["peak_bytes"] > 0
    json.dumps(prof, allow_nan=False)  # plain data for viz/app


def test_perfetto_file_is_valid_json_with_the_ranges(lookahead_profile):
    _, tr, _, path = lookahead_profile
    events = json.loads(path.read_text())["traceEvents"]
    names = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    assert sorted(names) == sorted(range_name("lookahead", s.index) for s in tr.steps)


def test_perfetto_file_carries_no_server_path(lookahead_profile):
    """torch writes the file's own absolute path as its "traceName": a public download must not carry it."""
    path = lookahead_profile[3]
    doc = json.loads(path.read_text())
    assert str(path.parent) not in path.read_text() and doc.get("traceName") in (None, path.name), doc.get("traceName")


def test_trace_alone_gives_the_same_costs(lookahead_profile):
    """viz can compute FLOPs from a saved trace: its recorded config rebuilds the same Arch."""
    model, tr, prof, _ = lookahead_profile
    from_trace = trace_costs(json.loads(tr.to_json()))
    assert [c["flops"] for c in from_trace] == [s["flops"] for s in prof["steps"]]
    assert arch_of(tr.model["config"]) == arch_of(model.config)


def test_roofline_points_and_roof(lookahead_profile):
    _, _, prof, _ = lookahead_profile
    pts = roofline.points(prof)
    assert len(pts) == len(prof["steps"])
    for p in pts:
        roof = min(1e10, p["intensity"] * 1e10)
        assert p["attainable_flops"] == pytest.approx(roof)
        assert p["bound"] == ("memory" if p["intensity"] < 1.0 else "compute")
        assert p["achieved_flops"] == pytest.approx(p["flops"] / (p["wall_ms"] / 1e3))
    r = roofline.roof({"flops": 100.0, "bandwidth": 10.0}, lo=0.1, hi=1000, n=5)
    assert r["ridge"] == 10.0 and r["flops"][0] == pytest.approx(1.0) and r["flops"][-1] == 100.0


def test_draft_model_work_is_added_to_total_flops():
    """Speculative steps run a draft model inside the step: its FLOPs count in what the method pays."""
    target, draft = tiny_model("llama"), tiny_model("gpt2")
    tr = Trace("speculative", {}, PROMPT, steps=[
        Step(0, "prefill", 0, len(PROMPT), [1], ["target"], wall_ms=1.0),
        Step(1, "decode", len(PROMPT), 5, [2, 3], ["draft", "target"], wall_ms=2.0,
             info={"draft_forwards": 4, "draft_nodes_run": 4})])
    prof = build_profile(tr, {}, target, None, draft_model=draft)
    d = draft_cost(arch_of(draft.config), 4, 4, len(PROMPT))
    assert sum(linear_flops(arch_of(draft.config), 4).values()) < d["draft_flops"]
    assert prof["steps"][1]["total_flops"] == prof["steps"][1]["flops"] + d["draft_flops"]
    assert prof["steps"][0]["total_flops"] == prof["steps"][0]["flops"]  # prefill recorded no draft work
    assert prof["totals"]["flops"] == prof["series"]["cum_flops"][-1] == sum(s["total_flops"] for s in prof["steps"])
    assert d["draft_bytes"] > 4 * arch_of(draft.config).hidden * arch_of(draft.config).vocab * 4  # 4 weight reads


def test_step_clock_works_without_profiler():
    model = tiny_model("gpt2")
    clock = StepClock("greedy")
    tr = generate(model, PROMPT, make_drafter("greedy"), max_new_tokens=5, step_context=clock)
    records = clock.finish()
    assert sorted(records) == [s.index for s in tr.steps]
    assert all(r["wall_ms"] > 0 for r in records.values())


def test_calibration_is_plausible_and_cached(tmp_path):
    calibrate.clear_cache()
    n0 = calibrate.MEASURE_COUNT
    p = calibrate.peaks("cpu", torch.float32, budget_s=0.3)
    assert calibrate.MEASURE_COUNT == n0 + 1 and not p["cached"]
    assert 1e8 < p["flops"] < 1e13  # one CPU core: well above 0.1 GFLOP/s, well below a GPU
    assert 1e8 < p["bandwidth"] < 1e12
    again = calibrate.peaks("cpu", torch.float32)
    assert again["cached"] and calibrate.MEASURE_COUNT == n0 + 1 and again["flops"] == p["flops"]
    f = tmp_path / "peaks.json"
    calibrate.clear_cache()
    first = calibrate.peaks("cpu", torch.float32, cache_file=f, budget_s=0.3)
    calibrate.clear_cache()
    second = calibrate.peaks("cpu", torch.float32, cache_file=f)
    assert calibrate.MEASURE_COUNT == n0 + 2 and second["cached"] and second["flops"] == first["flops"]


def test_datasheet_lookup():
    assert calibrate.datasheet_for("NVIDIA H200")["bandwidth"] == 4.8e12
    assert calibrate.datasheet_for("NVIDIA A10G")["name"] == "A10G"
    assert calibrate.datasheet_for("NVIDIA A100-SXM4-80GB")["name"] == "A100"
    assert calibrate.datasheet_for("cpu:x86_64") is None


def test_latency_sweep_shapes():
    model = tiny_model("llama")
    res = latency_sweep(model, kv_len=32, sizes=(1, 2, 4, 8), shape="tree", reps=1, warmup=1)
    assert [p["n_query"] for p in res["points"]] == [1, 2, 4, 8]
    assert all(p["ms"] > 0 for p in res["points"]) and res["points"][0]["relative"] == 1.0
    assert res["nearly_free"] in (1, 2, 4, 8) and res["kv_len"] == 32
    assert tree_parents(4, "chain") == chain_parents(4) and tree_parents(5, "tree") == [-1, 0, 0, 1, 1]


def test_cli_writes_trace_profile_and_perfetto(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "</s>"] + "def f ( x ) : return + 1 2".split()
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="</s>").save_pretrained(tmp_path / "m")
    tiny_model("llama").save_pretrained(tmp_path / "m")
    out = tmp_path / "out"
    rc = cli_main(["--model", str(tmp_path / "m"), "--method", "lookahead", "--window", "3", "--ngram", "3",
                   "--prompt", "def f ( x ) : return x + 1", "--max-new-tokens", "8", "--out", str(out),
                   "--no-peaks"])
    assert rc == 0
    prof = load_profile(out / "lookahead.profile.json")
    trace = json.loads((out / "lookahead.trace.json").read_text())
    assert len(prof["ranges"]) == len(trace["steps"]) == len(prof["steps"])
    json.loads((out / "lookahead.perfetto.json").read_text())
    printed = capsys.readouterr().out
    assert "prefill" in printed
    # the sizes are said, and a small Perfetto file with the step ranges only is offered beside the full one
    from profiling.__main__ import size
    from profiling.profiler import perfetto_ranges
    full, small = out / "lookahead.perfetto.json", out / "lookahead.steps.perfetto.json"
    assert f".perfetto.json ({size(full)}" in printed and f".steps.perfetto.json ({size(small)}" in printed
    assert small.stat().st_size < full.stat().st_size
    assert perfetto_ranges(small, "lookahead") == perfetto_ranges(full, "lookahead") == prof["ranges"]


def test_profile_help_lists_only_options_that_work(capsys):
    """profile --help does not list generate's options it refuses (--json, --compare, ...); given anyway,
    each is still refused by name in one line."""
    assert cli_main(["--help"]) == 0
    out = capsys.readouterr().out
    for opt in ("--json", "--compare", "--prompt-file", "--check-exact", "--stream", "--stop"):  # --chat works
        assert f"{opt} " not in out and f"{opt}\n" not in out and f"{opt}," not in out, opt
        value = {"--chat": [], "--check-exact": [], "--stream": [], "--compare": ["greedy"]}.get(opt, ["x"])
        assert cli_main([opt, *value]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and opt in err and "not the profiler's" in err, err
    assert "--method" in out and "--out" in out and "--sweep" in out


def test_profile_takes_chat_as_generate_does(tiny_dir, tmp_path, capsys):
    """--chat: the profiled prompt is the chat template's token ids, as `generate --chat` runs it; a tokenizer
    without a template is refused in one line."""
    import shutil
    from transformers import AutoTokenizer
    chat = tmp_path / "chat"
    shutil.copytree(tiny_dir, chat)
    t = AutoTokenizer.from_pretrained(chat)
    t.chat_template = "{% for m in messages %}def {{ m['content'] }} :{% endfor %}"
    t.save_pretrained(chat)
    out = tmp_path / "p"
    assert cli_main(["--model", str(chat), "--prompt", "x ( y )", "--chat", "--max-new-tokens", "3", "--no-peaks",
                     "--out", str(out)]) == 0, capsys.readouterr().err
    doc = json.loads((out / "greedy.trace.json").read_text())
    assert doc["prompt_ids"] == t("def x ( y ) :")["input_ids"]
    capsys.readouterr()
    assert cli_main(["--model", tiny_dir, "--prompt", "x", "--chat", "--no-peaks", "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no chat template" in err, err
