"""What engineers hit when they tried it, each pinned by a test: checkpoints with missing or extra weights
and encoders refused at load; transformers' generate arguments (streamer, stop_strings, assistant_model,
draft_model as a path, prompt_lookup_num_tokens) honoured by custom_generate; the shipped heads found;
API mistakes pointed at the right parameter; the serving engines' speculative metrics, one definition each;
the console command over every CLI; CLI output (labels, stdin, --json, window message, offline Hub ids) and
the KV cache passed under the name the model's forward takes."""
from __future__ import annotations

import io
import json
import time
import warnings
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, BertConfig, LlamaForCausalLM, MistralConfig

from conftest import hf_greedy, save_tiny_dir, tiny
from decoding import ModelError, Sampling, load, run
from decoding.cli.main import main as cli
from decodescope.cli import main as decodescope

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "def x ( y ) : return y + 1 def x ( y ) :"


def one_error_line(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# --- 1. checkpoints that do not fill the model, and encoders, are refused at load ------------------------

def _edit_weights(path: Path, drop=(), add=None) -> None:
    from safetensors.torch import load_file, save_file
    f = path / "model.safetensors"
    state = load_file(str(f))
    for k in drop:
        del state[k]
    state.update(add or {})
    save_file(state, str(f), metadata={"format": "pt"})


def test_missing_lm_head_is_refused_in_one_line(tmp_path, capsys):
    d = Path(save_tiny_dir(tmp_path / "m"))
    _edit_weights(d, drop=["lm_head.weight"])
    with pytest.raises(ModelError, match=r"missing .*lm_head\.weight"):
        load(str(d), device="cpu")
    capsys.readouterr()
    assert cli(["generate", "--model", str(d), "--prompt", "def x", "--max-new-tokens", "4"]) == 2
    assert "lm_head.weight" in one_error_line(capsys)


def test_unexpected_weights_are_refused(tmp_path):
    d = Path(save_tiny_dir(tmp_path / "m"))
    _edit_weights(d, add={"model.extra.weight": torch.zeros(3)})
    with pytest.raises(ModelError, match=r"unexpected .*model\.extra\.weight"):
        load(str(d), device="cpu")


def test_a_complete_checkpoint_still_loads(tiny_dir):
    model, _ = load(tiny_dir, device="cpu")
    assert model.config.model_type == "llama"


def test_bert_encoder_is_refused(tmp_path, tiny_dir):
    from transformers import BertModel
    from decoding.models import check_architecture
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    BertModel(cfg).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="not a causal decoder"):
        load(str(tmp_path), device="cpu")
    check_architecture(BertConfig(is_decoder=True))  # configured as a decoder: causal, accepted


# --- 3. custom_generate honours transformers' generate arguments ----------------------------------------

class Recorder:
    """A streamer: what generate users pass (TextStreamer has the same put / end)."""

    def __init__(self):
        self.puts, self.ended = [], 0

    def put(self, ids):
        self.puts.append(ids.reshape(-1).tolist())

    def end(self):
        self.ended += 1


@pytest.fixture(scope="module")
def hf(tiny_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_dir).eval(), AutoTokenizer.from_pretrained(tiny_dir)


def _gen(model, tok, **kw):
    ids = tok(PROMPT, return_tensors="pt")
    with torch.no_grad():
        return model.generate(**ids, max_new_tokens=12, do_sample=False, pad_token_id=0, **kw)


@pytest.mark.parametrize("form", ["callable", "folder"])
def test_streamer_gets_prompt_steps_and_end(hf, form):
    from decoding.hf_generate import decodescope_generate
    model, tok = hf
    ref = _gen(model, tok)[0].tolist()
    where = dict(custom_generate=decodescope_generate) if form == "callable" else \
        dict(custom_generate=str(ROOT), trust_remote_code=True)
    s = Recorder()
    out = _gen(model, tok, streamer=s, method="lookahead", **where)[0].tolist()
    n = len(tok(PROMPT)["input_ids"])
    assert out == ref and s.ended == 1
    assert s.puts[0] == ref[:n] and [t for p in s.puts[1:] for t in p] == ref[n:]
    assert len(s.puts) == 1 + len(model.decodescope_trace.steps)  # the prompt, then one put per step


def test_stop_strings_end_the_run_as_in_plain_generate():
    """On the embedded model (transformers' stop-string matcher needs a BPE-like tokenizer, not the tiny
    word-level one): the same ids as plain generate(stop_strings=..., tokenizer=tok)."""
    from decoding.hf_generate import decodescope_generate
    model = AutoModelForCausalLM.from_pretrained(ROOT / "assets" / "target").eval()
    tok = AutoTokenizer.from_pretrained(ROOT / "assets" / "target")
    ids = tok("def fibonacci(n):", return_tensors="pt")

    def gen(**kw):
        with torch.no_grad():
            return model.generate(**ids, max_new_tokens=16, do_sample=False, **kw)[0].tolist()
    full, n = gen(), ids["input_ids"].shape[1]
    stop = tok.decode(full[n + 8:n + 10]).strip()
    ref = gen(stop_strings=[stop], tokenizer=tok)
    assert len(ref) < len(full)
    assert gen(stop_strings=[stop], tokenizer=tok, custom_generate=str(ROOT), trust_remote_code=True) == ref
    assert model.decodescope_trace.stop_reason == "stop"
    s = Recorder()
    assert gen(stop_strings=[stop], decodescope_tokenizer=tok, streamer=s, custom_generate=decodescope_generate) == ref
    assert [t for p in s.puts[1:] for t in p] == ref[n:] and s.ended == 1
    with pytest.raises(ValueError, match="decodescope_tokenizer=tok"):
        gen(stop_strings=[stop], tokenizer=tok, custom_generate=decodescope_generate)


@pytest.mark.parametrize("form", ["callable", "folder"])
def test_assistant_model_and_draft_path_run_speculative(hf, tiny_dir, form):
    from decoding.hf_generate import decodescope_generate
    model, tok = hf
    ref = _gen(model, tok)[0].tolist()
    where = dict(custom_generate=decodescope_generate) if form == "callable" else \
        dict(custom_generate=str(ROOT), trust_remote_code=True)
    draft = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    out = _gen(model, tok, assistant_model=draft, return_dict_in_generate=True, **where)
    assert out.sequences[0].tolist() == ref and out.trace.method == "speculative"
    out = _gen(model, tok, draft_model=tiny_dir, return_dict_in_generate=True, **where)  # a path: loaded
    assert out.sequences[0].tolist() == ref and out.trace.method == "speculative"


def test_prompt_lookup_num_tokens_and_refusals_by_name(hf):
    from decoding.hf_generate import decodescope_generate
    model, tok = hf
    ref = _gen(model, tok)[0].tolist()
    out = _gen(model, tok, prompt_lookup_num_tokens=3, custom_generate=decodescope_generate,
               return_dict_in_generate=True)
    assert out.sequences[0].tolist() == ref and out.trace.method == "prompt_lookup"
    assert out.trace.config["num_tokens"] == 3
    with pytest.raises(ValueError, match="num_beams=2"):
        _gen(model, tok, num_beams=2, custom_generate=decodescope_generate)
    with pytest.raises(ValueError, match="assistant_tokenizer"):
        _gen(model, tok, assistant_tokenizer=tok, custom_generate=str(ROOT), trust_remote_code=True)
    with pytest.raises(ValueError, match="assistant_model is a draft model"):
        _gen(model, tok, assistant_model=model, method="lookahead", custom_generate=decodescope_generate)


# --- 5. shipped heads found; API mistakes pointed at the right parameter ---------------------------------

@pytest.fixture(scope="module")
def embedded():
    return load(device="cpu")


@pytest.mark.parametrize("method", ["medusa", "eagle"])
def test_heads_default_to_the_shipped_ones_for_the_embedded_model(embedded, method):
    model, tok = embedded
    tr = run(model, tok, "def fibonacci(n):", method, max_new_tokens=8)
    assert Path(tr.config["heads"]) == ROOT / "assets" / "heads" / method
    tr = run(model, tok, "def fibonacci(n):", method, max_new_tokens=8, heads=str(ROOT / "assets" / "heads"))
    assert Path(tr.config["heads"]) == ROOT / "assets" / "heads" / method  # the parent folder picks the kind


def test_cli_heads_default_and_parent_folder(capsys):
    assert cli(["generate", "--method", "medusa", "--prompt", "def f(x):", "--max-new-tokens", "6"]) == 0
    assert "[heads]" in capsys.readouterr().err
    assert cli(["generate", "--method", "eagle", "--heads", str(ROOT / "assets" / "heads"), "--prompt", "def f(x):",
                "--max-new-tokens", "6"]) == 0


def test_heads_for_another_model_say_how_to_get_them(tiny_models):
    with pytest.raises(ValueError, match="eagle needs heads: the shipped ones.*train-heads"):
        run(tiny_models["llama"], None, [1, 2, 3], "eagle", max_new_tokens=4)


def test_api_mistakes_point_at_the_parameter(tiny_models, tiny_dir):
    model = tiny_models["llama"]
    with pytest.raises(ValueError, match=r"needs a draft model, and none ships for this model.*pass draft_model="):
        run(model, None, [1, 2, 3], "speculative", max_new_tokens=4)
    with pytest.raises(ValueError, match=r"did you mean 'draft_model'"):
        run(model, None, [1, 2, 3], "speculative", max_new_tokens=4, draft=model)
    with pytest.raises(ValueError, match=r"sampling=Sampling\(temperature"):
        run(model, None, [1, 2, 3], "lookahead", max_new_tokens=4, temperature=0.7)
    assert run(model, None, [1, 2, 3], "jacobi", max_new_tokens=4, seed=3).config["seed"] == 3  # jacobi's own
    tr = run(model, None, [1, 2, 3], "speculative", max_new_tokens=4, draft_model=tiny_dir,
             sampling=Sampling(0.7, seed=1))  # a draft given as a path is loaded like the target
    assert tr.method == "speculative" and len(tr.output_ids) == 4


# --- 6. speculative metrics under the serving engines' names ---------------------------------------------

NAMES = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos",
         "mean_acceptance_length", "draft_acceptance_rate", "acceptance_rate_per_pos", "spec_accept_length",
         "acceptance_length", "draft_overhead")


def test_metrics_formulas_on_a_hand_made_trace():
    from decoding.trace.stats import spec_decode_stats
    from decoding.trace import Step, Trace

    def step(i, roles, accepted):
        n = len(roles)
        origins = ["candidate"] * (len(accepted) - 1) + ["target"]  # the drafts it kept, then the target's token
        return Step(i, "decode", 10, n, accepted, origins, wall_ms=2.0, tokens=[1] * n,
                    positions=[10 + d for d in range(n)], parents=[-1] + list(range(n - 1)), roles=roles,
                    info={"draft_ms": 0.5})

    steps = [Step(0, "prefill", 0, 3, [7], ["target"]),
             step(1, ["x0", "candidate", "candidate", "candidate"], [1, 2, 3]),  # 3 proposed, 2 accepted
             step(2, ["x0", "window", "window"], [4]),                            # nothing verified: no draft
             step(3, ["x0", "candidate", "candidate"], [5])]                      # 2 proposed, 0 accepted
    tr = Trace("lookahead", {}, [1, 2, 3], output_ids=[7, 1, 2, 3, 4, 5], steps=steps)
    st = spec_decode_stats(tr)
    assert (st["num_drafts"], st["num_draft_tokens"], st["num_accepted_tokens"]) == (2, 5, 2)
    assert st["num_accepted_tokens_per_pos"] == [1, 1, 0]
    assert st["mean_acceptance_length"] == st["acceptance_length"] == 1 + 2 / 2
    assert st["draft_acceptance_rate"] == 2 / 5 and st["acceptance_rate_per_pos"] == [0.5, 0.5, 0.0]
    assert st["spec_accept_length"] == 5 / 3 and st["draft_overhead"] == 1.0 / 4.0
    assert all(k in tr.to_dict()["stats"] for k in NAMES)


@pytest.mark.parametrize("method,params", [("lookahead", dict(window=2, ngram=3, guesses=2)),
                                           ("prompt_lookup", {}), ("jacobi", dict(block=3)),
                                           ("speculative", dict(draft_tokens=3)), ("medusa", {}), ("eagle", {})])
def test_every_drafting_method_has_one_definition(embedded, method, params):
    from decoding.trace.stats import spec_decode_stats, speculative_stats
    model, tok = embedded
    if method == "speculative":
        params = dict(params, draft_model=str(ROOT / "assets" / "draft"))
    tr = run(model, tok, "def fibonacci(n):\n    if n < 2:\n        return n\n", method, max_new_tokens=24, **params)
    st = spec_decode_stats(tr)
    assert st["num_drafts"] > 0 and st["num_draft_tokens"] >= st["num_drafts"]
    assert st["mean_acceptance_length"] == pytest.approx(1 + st["num_accepted_tokens"] / st["num_drafts"])
    assert st["spec_accept_length"] == pytest.approx(tr.stats()["mean_accepted"])
    assert sum(st["num_accepted_tokens_per_pos"]) == st["num_accepted_tokens"]
    decode = [s for s in tr.steps if s.kind == "decode"]
    assert st["num_accepted_tokens"] == sum(o != "target" for s in decode for o in s.origins)  # kept drafts
    if st["num_drafts"] == len(decode):  # every step drafted: vLLM's and SGLang's figures agree, except that a
        # last step cut (max-new-tokens, EOS) before the target's own token emits only accepted drafts: 1/drafts
        cut = decode[-1].origins[-1] != "target"
        assert st["mean_acceptance_length"] == pytest.approx(st["spec_accept_length"] + cut / st["num_drafts"])
    doc = json.loads(tr.to_json())
    assert all(k in doc["stats"] for k in NAMES)
    if method in ("speculative", "medusa", "eagle"):
        assert speculative_stats(tr)["mean_acceptance_length"] == st["mean_acceptance_length"]
        assert (st["draft_forwards"] is None) == (method == "medusa")


def test_cli_prints_one_definition(capsys):
    assert cli(["generate", "--method", "eagle", "--prompt", "def fibonacci(n):", "--max-new-tokens", "24"]) == 0
    err = capsys.readouterr().err
    assert "mean accepted" not in err and err.count("mean acceptance length") == 1
    for name in ("spec_accept_length", "draft acceptance rate", "draft_overhead", "TensorRT-LLM", "vLLM", "SGLang"):
        assert name in err
    assert cli(["generate", "--method", "medusa", "--prompt", "def fibonacci(n):", "--max-new-tokens", "12"]) == 0
    assert "draft forwards 0" not in capsys.readouterr().err


# --- 7. the console command wraps every CLI; --help names it ----------------------------------------------

@pytest.mark.parametrize("cmd", ["generate", "train-heads", "profile", "report", "side-by-side", "project",
                                 "operators", "app", "bench"])
def test_console_help_names_decodescope(cmd, capsys):
    assert decodescope([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: decodescope {cmd}" in out and "python -m" not in out.splitlines()[0]


def test_console_app_port_reaches_the_app(monkeypatch):
    """app.py reads PORT (then GRADIO_SERVER_PORT) in main(); a stand-in module records what it would read."""
    import os
    import sys
    import types
    seen = {}
    fake = types.ModuleType("app")
    fake.main = lambda: seen.update(port=os.environ.get("PORT"), gradio=os.environ.get("GRADIO_SERVER_PORT"))
    monkeypatch.setitem(sys.modules, "app", fake)
    monkeypatch.setenv("PORT", "9999")
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    assert decodescope(["app", "--port", "7861"]) == 0 and seen == {"port": "7861", "gradio": "7861"}


# --- 8. CLI output and loading ------------------------------------------------------------------------

def test_prompt_file_outputs_are_labelled_and_separated(tiny_dir, tmp_path, capsys):
    p1, p2 = "def x ( y ) : return y + 1", "for i in range ( n ) : print ( i ) " * 3
    (tmp_path / "p.txt").write_text(f"{p1}\n{p2}\n")
    assert cli(["generate", "--model", tiny_dir, "--prompt-file", str(tmp_path / "p.txt"), "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"[1/2] {p1}" in out and f"[2/2] {p2[:40]}\u2026" in out
    assert out.index(f"[2/2] {p2[:40]}\u2026") - 1 == out.index("-" * 40)


def test_stdin_splits_prompts_like_a_file(tiny_dir, tmp_path, monkeypatch, capsys):
    tok, model = AutoTokenizer.from_pretrained(tiny_dir), AutoModelForCausalLM.from_pretrained(tiny_dir)
    p1, p2 = "def x ( y ) :", "for i in range ( n ) :"
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{p1}\n{p2}\n"))
    assert cli(["generate", "--model", tiny_dir, "--prompt-file", "-", "--max-new-tokens", "5",
                "--json", str(tmp_path / "s.json")]) == 0
    for i, p in enumerate((p1, p2), 1):
        doc = json.loads((tmp_path / f"s-{i}.json").read_text())
        assert doc["output_ids"] == hf_greedy(model, tok(p)["input_ids"], 5, eos=tok.eos_token_id)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps([p1 + "\n" + p2])))  # a JSON list: one prompt
    assert cli(["generate", "--model", tiny_dir, "--prompt-file", "-", "--max-new-tokens", "3",
                "--json", str(tmp_path / "one.json")]) == 0
    assert json.loads((tmp_path / "one.json").read_text())["prompt_ids"] == tok(p1 + "\n" + p2)["input_ids"]


def test_unwritable_json_fails_before_the_model_loads(tiny_dir, monkeypatch, capsys):
    import decoding.cli.main as m

    def no_load(*a, **k):
        raise AssertionError("the model loaded before --json was checked")
    monkeypatch.setattr(m, "load", no_load)
    assert cli(["generate", "--model", tiny_dir, "--prompt", "x", "--json", "/proc/decodescope-test/run.json"]) == 2
    assert "cannot write --json" in one_error_line(capsys)


def test_sliding_window_refusal_names_the_methods_span():
    from decoding.models import check_window
    with pytest.raises(ModelError, match=r"jacobi span \(8 positions one step looks ahead\)"):
        check_window(MistralConfig(sliding_window=16), 5, 8, 8, "jacobi")


def test_offline_hub_id_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = time.perf_counter()
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE=1"):
        load("decodescope-test-org/no-such-model")
    assert time.perf_counter() - t < 5


def test_unreachable_hub_fails_at_once_without_retries(monkeypatch):
    import socket
    import decoding.models as models
    monkeypatch.setattr(models, "hub_offline", lambda: False)
    for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(v, raising=False)

    def unreachable(*a, **k):
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(models.socket, "create_connection", unreachable)
    t = time.perf_counter()
    with pytest.raises(ModelError, match="cannot be reached"):
        load("decodescope-test-org/no-such-model")
    assert time.perf_counter() - t < 5


class OldStyle(LlamaForCausalLM):
    """A model whose forward takes the cache under the long-standing name only (older transformers,
    remote code)."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                logits_to_keep=0, output_hidden_states=None):
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               cache=past_key_values, use_cache=use_cache, logits_to_keep=logits_to_keep,
                               output_hidden_states=output_hidden_states)


def test_the_cache_goes_under_the_name_the_forward_takes(tiny_models):
    from decoding.models import cache_kwarg
    model = tiny_models["llama"]
    old = OldStyle(model.config).eval()
    old.load_state_dict(model.state_dict())
    assert cache_kwarg(model) == "cache" and cache_kwarg(old) == "past_key_values"
    ref = hf_greedy(model, [5, 6, 7, 8, 5, 6, 7], 12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # transformers' "`past_key_values` is deprecated"
        for m in (model, old):
            assert run(m, None, [5, 6, 7, 8, 5, 6, 7], "lookahead", max_new_tokens=12).output_ids == ref
