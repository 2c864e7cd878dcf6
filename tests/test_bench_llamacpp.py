"""bench.py's llama.cpp rows without llama.cpp: the agreement count, the note under the table, extra rows in
the interleaved run, the GGUF provenance check and the one-line skip (no timing asserted)."""
import hashlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path[:0] = [str(BENCH), str(BENCH / "compare")]
import bench  # noqa: E402
import llamacpp  # noqa: E402


def test_agreement_counts_runs_round_by_round():
    ref = [[[1, 2], [3]], [[1, 2], [4]]]
    assert llamacpp.agreement(ref, ref) == (4, 4)
    assert llamacpp.agreement([[[1, 2], [3]], [[1, 9], [4]]], ref) == (3, 4)
    # the same round's reference, not any round's: round 2's [3] is not round 2's reference [4]
    assert llamacpp.agreement([[[1, 2], [4]], [[1, 2], [3]]], ref) == (2, 4)
    with pytest.raises(ValueError):
        llamacpp.agreement([[[1]]], ref)


def test_note_names_each_row_with_its_count():
    rows = [{"method": "a"}, {"method": llamacpp.LOOKUP, "equals_greedy_of": [8, 16, llamacpp.GREEDY]}]
    assert llamacpp.note(rows) == "llama.cpp prompt lookup returned llama.cpp greedy's output in 8 of 16 runs."
    assert llamacpp.note(rows[:1]) is None


def test_extra_rows_run_interleaved_with_their_agreement(tmp_path):
    """Extra runners join the run after ours; one with greedy_of gets its per-run agreement with that row."""
    model, tok, _, (hf_model, _), prompts = bench.quick_models()
    prompts = prompts * 2
    hf = bench.hf_runner(hf_model, tok)
    calls = {"n": 0}

    def flaky(prompt, n):  # every other call returns another output, as a drafting peer may
        calls["n"] += 1
        ids, _ = hf(prompt, n)
        return (ids[:-1] if calls["n"] % 2 == 0 else ids), None
    flaky.greedy_of = "peer greedy"
    rows = bench.bench(model, tok, None, prompts, 2, 8, 4, "peer", hf_model=hf_model,
                       extra={"peer greedy": hf, "peer lookup": flaky})
    by = {r["method"]: r for r in rows}
    assert list(by) == ["HF greedy", "peer greedy", "peer lookup"]
    assert by["peer greedy"]["exact"] and "equals_greedy_of" not in by["peer greedy"]
    # warm-up call 1 (kept), then 2 rounds x 2 prompts: calls 2..5, the even ones differ
    assert by["peer lookup"]["equals_greedy_of"] == [2, 4, "peer greedy"]
    assert not by["peer lookup"]["exact"]
    meta = {**bench.machine(model), "model": "m", "prompts": "p", "max_new_tokens": 8, "runs": 2,
            "note": llamacpp.note(rows)}
    md = bench.markdown(rows, meta)
    assert "| peer lookup |" in md and md.rstrip().endswith("peer lookup returned peer greedy's output in 2 of 4 runs.")


def test_default_gguf_is_the_converted_file_or_refused(tmp_path):
    models = tmp_path / "models"
    folder = models / "smollm2-135m-instruct"
    folder.mkdir(parents=True)
    with pytest.raises(ValueError, match="records no source GGUF"):
        llamacpp.default_gguf(folder)
    gguf = models / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF these bytes")
    (folder / "fetch.json").write_text(json.dumps({"gguf_sha256": hashlib.sha256(b"GGUF these bytes").hexdigest()}))
    assert llamacpp.default_gguf(folder) == gguf
    gguf.write_bytes(b"GGUF other bytes")
    with pytest.raises(ValueError, match="sha256 differs"):
        llamacpp.default_gguf(folder)


def test_llama_rows_skip_with_one_line(monkeypatch, capsys, tmp_path):
    model, tok, _, (hf_model, _), _ = bench.quick_models()
    capsys.readouterr()  # the tiny models' save bars
    monkeypatch.setattr(llamacpp, "missing", lambda: "no llama.cpp rows: llama_cpp is not importable (x)")
    assert bench.llama_rows(None, str(tmp_path), tok, hf_model) is None
    assert capsys.readouterr().err.strip().splitlines() == ["no llama.cpp rows: llama_cpp is not importable (x)"]
    monkeypatch.setattr(llamacpp, "missing", lambda: None)  # importable, but the model has no source GGUF
    assert bench.llama_rows(None, str(tmp_path), tok, hf_model) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("no llama.cpp rows:") and "records no source GGUF" in err[0]
