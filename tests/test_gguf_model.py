"""An engineer's own GGUF file through `--model file.gguf`: converted once into the cache (with progress),
every method that needs nothing trained for the model exact against HF greedy on the converted weights, the
block kernel streaming exactly the matrices the conversion says it does, and the profiler on it. The GGUF
is written here with the gguf package (a tiny llama: Q4_1 matrices, Q8_0 MLP down projections, F16 value
projections, which no block format of the kernel holds: they stay float32; tests/test_cpu_kquants.py writes the
K-quant mix)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from test_fetch_model import gguf, tiny_source, write_gguf

PROMPT = "the the a the in the the a"
N = 20


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("own_gguf")
    T = gguf.GGMLQuantizationType
    write_gguf(d / "tiny-llama.gguf", tiny_source(seed=4), {"ffn_down": T.Q8_0, "attn_v": T.F16})
    return d / "tiny-llama.gguf"


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.getbasetemp() / "gguf_cache"  # one cache for the module: converted once
    monkeypatch.setenv("DECODESCOPE_CACHE", str(root))
    return root


def hf_reference(folder: Path, prompt: str = PROMPT, n: int = N) -> list[int]:
    """HF's own greedy on the converted folder, loaded by transformers alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tok(prompt, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, ids.shape[1]:].tolist()


def generate(argv: list[str], capsys) -> tuple[int, str]:
    from decoding.cli.main import main
    rc = main(["generate", "--prompt", PROMPT, "--max-new-tokens", str(N), "--stop", "none", *argv])
    return rc, capsys.readouterr().err


def test_model_gguf_converts_once_and_every_method_is_exact(gguf_file, cache, tmp_path, capsys):
    from decoding.models.gguf import converted
    rc, err = generate(["--model", str(gguf_file), "--method", "greedy", "--json", str(tmp_path / "g.json")], capsys)
    assert rc == 0, err
    assert "[convert] read: Q4_1 " in err and "[convert] save:" in err  # progress, stage by stage
    assert "streams 13 of 15 matrices as blocks (q4_1 11, q8_0 2, k8 0: " in err
    assert "; 2 de-quantised to float32 (" in err
    folder = converted(gguf_file)
    assert folder is not None and folder.parent == cache / "models"
    ref = hf_reference(folder)
    assert json.loads((tmp_path / "g.json").read_text())["output_ids"] == ref
    methods = {"lookahead": ["--window", "3", "--ngram", "3", "--guesses", "3"], "prompt_lookup": [],
               "jacobi": [], "retrieval": [], "speculative": ["--draft", str(gguf_file)]}
    for m, extra in methods.items():  # the methods that need nothing trained for this model
        out = tmp_path / f"{m}.json"
        rc, err = generate(["--model", str(gguf_file), "--method", m, "--json", str(out), *extra], capsys)
        assert rc == 0, (m, err)
        assert "[convert]" not in err, "converted once: later runs use the cache"
        assert json.loads(out.read_text())["output_ids"] == ref, m
    rc, err = generate(["--model", str(gguf_file.parent), "--method", "greedy", "--json", str(tmp_path / "d.json")],
                       capsys)  # the folder holding the file means the file
    assert rc == 0 and json.loads((tmp_path / "d.json").read_text())["output_ids"] == ref, err


def test_the_block_kernel_streams_what_the_conversion_says(gguf_file, cache):
    from decoding import load
    from decoding.fast.cpu_gemm import kernel, storage_counts
    from decoding.models.gguf import convert_gguf
    if not kernel():
        pytest.skip("the CPU kernel cannot be built here (no compiler)")
    folder = convert_gguf(gguf_file)
    said = json.loads((folder / "gguf.json").read_text())
    assert said["tensor_types"] == {"Q4_1": 11, "Q8_0": 2, "F16": 2, "F32": 5}
    model, _ = load(str(gguf_file), layout="packed")
    assert storage_counts(model) == said["cpu_block_storage"] == {"q4_1": 11, "q8_0": 2, "k8": 0, "fp32": 2}


def test_convert_command_and_its_refusals(gguf_file, cache, tmp_path, capsys):
    from decoding.cli.main import main
    assert main(["convert", str(gguf_file)]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["convert", str(gguf_file)]) == 0 and capsys.readouterr().out.strip() == first
    (tmp_path / "notes.gguf").write_text("not a gguf")
    two = tmp_path / "two"
    two.mkdir()
    (tmp_path / "empty").mkdir()
    for name in ("a.gguf", "b.gguf"):
        (two / name).write_bytes(gguf_file.read_bytes())
    for arg, words in ((tmp_path / "notes.gguf", "is not a readable GGUF file"), (two, "holds 2 GGUF files"),
                       (tmp_path / "empty", "neither a .gguf file nor a folder holding one")):
        assert main(["convert", str(arg)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    rc, err = generate(["--model", str(tmp_path / "notes.gguf")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "not a readable GGUF" in err


def test_profile_a_gguf_model(gguf_file, cache, tmp_path, capsys):
    from profiling.__main__ import main
    out = tmp_path / "prof"
    assert main(["--model", str(gguf_file), "--method", "lookahead", "--window", "3", "--ngram", "3", "--guesses",
                 "3", "--prompt", PROMPT, "--max-new-tokens", "12", "--no-peaks", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert any(n.endswith(".json") for n in names), names
    capsys.readouterr()


def test_a_killed_conversions_partial_folder_is_swept_by_the_next(gguf_file, tmp_path):
    """A conversion writes into a temporary .partial folder beside its destination and renames it into place:
    a killed one (SIGKILL: no cleanup runs) leaves only such folders. The next conversion removes the stale
    ones (older than decoding.models.fetch.STALE_S), keeps a fresh one (another conversion may be writing it), and never
    takes a partial folder for a converted model."""
    import os
    import time
    from decoding.models.fetch import STALE_S
    from decoding.models.gguf import convert_gguf, converted, folder_for
    cache = tmp_path / "cache"
    dest = folder_for(gguf_file, cache)
    dest.parent.mkdir(parents=True)
    stale = dest.parent / f".{dest.name}.k1ll3d.partial"
    replaced = dest.parent / f".{dest.name}.old-123-456"
    fresh = dest.parent / f".{dest.name}.busy.partial"
    other = dest.parent / ".someone-elses"
    for d in (stale, replaced, fresh, other):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"half")
    old = time.time() - STALE_S - 60
    for d in (stale, replaced, other):
        os.utime(d, (old, old))
    assert converted(gguf_file, cache) is None  # a partial folder is not a conversion
    assert convert_gguf(gguf_file, cache) == dest and (dest / "gguf.json").is_file()
    assert not stale.exists() and not replaced.exists()
    assert fresh.is_dir() and other.is_dir()  # a live conversion's, and what is not ours
    assert not [p for p in dest.parent.glob(f".{dest.name}.*") if p not in (fresh,)]  # the rename left nothing


def test_one_stage_progress_bar_serves_the_fetch_and_the_conversion(capsys):
    """The fetch's and a conversion's stage bars are one function (decoding.models.fetch.progress_bar); the conversion's
    also logs each finished stage as a [convert] line above the bar."""
    from decoding.models import fetch, gguf
    assert gguf.progress_bar is fetch.progress_bar
    bar, progress = fetch.progress_bar(gguf.STAGES, "convert", log="convert")
    progress("read", 0.0, "reading")
    progress("read", 1.0, "Q4_1 11")
    assert bar.n == 1
    bar.close()
    assert "[convert] read: Q4_1 11" in capsys.readouterr().err
