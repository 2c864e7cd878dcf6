"""The Gradio app end to end: a launched server driven by gradio_client, exactly as a remote user would.

Tiny random models (tests/conftest.py) stand in for the embedded ones so the whole file runs in seconds;
the app takes its default models as arguments (app.build_demo(default_target=..., default_draft=...)).
"""
from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from gradio_client import Client, handle_file

from conftest import save_tiny_dir, tiny

import app as app_module
from appkit.models import ModelCache
from decoding import Trace, load, run

# Gradio's queue builds DataFrames with options pandas 3 deprecates; not ours to fix.
pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]
PROMPT = "def f ( x ) : return x + 1"
FIXTURES = Path(__file__).parent / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slow_loader(name, **kw):
    """Models whose directory name contains 'slow' sleep in every forward: a run long enough to stop."""
    model, tok = load(name, **kw)
    if "slow" in Path(name).name:
        model.register_forward_pre_hook(lambda *a: time.sleep(0.03))
    return model, tok


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("app_models")
    d = {"target": save_tiny_dir(root / "target", "llama", seed=0),
         "draft": save_tiny_dir(root / "draft", "llama", seed=1),
         "slow": save_tiny_dir(root / "slow_target", "llama", seed=0)}
    bad = save_tiny_dir(root / "draft_vocab80", "llama", seed=2)
    tiny("llama", vocab=80, seed=2).save_pretrained(bad)  # same tokenizer files, different vocabulary size
    d["bad_draft"] = bad
    (root / "not_a_model").mkdir()
    (root / "not_a_model" / "config.json").write_text("{broken")
    d["broken"] = str(root / "not_a_model")
    return d


@pytest.fixture(scope="module")
def server(dirs):
    demo = app_module.build_demo(dirs["target"], dirs["draft"], public=False, cache=ModelCache(loader=slow_loader),
                                 max_trace_bytes=300_000)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(),
                            quiet=True, **app_module.launch_kwargs())
    yield url, demo
    demo.close()


@pytest.fixture(scope="module")
def client(server):
    return Client(server[0], verbose=False)


def settings(dirs, **kw) -> list:
    s = dict(target=dirs["target"], draft=dirs["draft"], device="auto", dtype="auto", prompt=PROMPT,
             method="greedy", max_new=20, W=4, N=3, G=4, max_ngram=3, num_tokens=8, spec_mode="chain", K=3,
             widths="2,2", budget=8, staged=False, temperature=0.0, top_k=0, top_p=1.0, seed=0)
    s.update(kw)
    return list(s.values())


def race_settings(dirs, methods, **kw) -> list:
    s = settings(dirs, **kw)
    return s[:5] + s[6:] + [methods]


def reference(dirs, method="greedy", n=20, **params) -> Trace:
    model, tok = load(dirs["target"])
    if method == "speculative":
        params["draft_model"] = load(dirs["draft"])[0]
    return run(model, tok, PROMPT, method, max_new_tokens=n, **params)


def saved_trace(path) -> dict:
    return json.loads(Path(path).read_text())


RUNS = [("greedy", {}),
        ("lookahead", dict(W=4, N=3, G=4)),
        ("prompt_lookup", dict(max_ngram=3, num_tokens=8)),
        ("speculative", dict(spec_mode="chain", K=3)),
        ("speculative", dict(spec_mode="tree", widths="2,2")),
        ("speculative", dict(spec_mode="budget", K=3, budget=6)),
        ("speculative", dict(spec_mode="chain", K=3, staged=True))]


@pytest.mark.parametrize("method,kw", RUNS, ids=[f"{m}-{k.get('spec_mode', '')}{'-staged' if k.get('staged') else ''}"
                                                  for m, k in RUNS])
def test_each_method_streams_and_finishes(client, dirs, method, kw):
    greedy = reference(dirs)
    job = client.submit(*settings(dirs, method=method, **kw), api_name="/run")
    final = job.result(timeout=120)
    outputs = job.outputs()
    assert len(outputs) >= 2, "the run streamed no intermediate update"
    text, live_a, live_b, html, stats, trace_path = final
    assert text == greedy.text and text.strip()
    assert "done" in stats and method in stats and "compression" in stats
    assert 'class="ds-stepper"' in html and "ds-data" in html
    assert live_a is not None and live_a["type"] == "plotly"
    tr = saved_trace(trace_path)
    assert tr["method"] == method and tr["output_ids"] == greedy.output_ids
    assert tr["stats"]["steps"] <= greedy.stats()["steps"]
    if kw.get("staged"):
        assert tr["config"]["staged"] is True
    if kw.get("spec_mode") == "tree":
        assert tr["config"]["tree"] == [2, 2]


def test_sampling_run_is_reproducible_and_kept_per_session(server, dirs):
    client = Client(server[0], verbose=False)
    a = client.predict(*settings(dirs, method="lookahead", temperature=0.8, top_k=20, seed=7), api_name="/run")
    b = client.predict(*settings(dirs, method="lookahead", temperature=0.8, top_k=20, seed=7), api_name="/run")
    assert a[0] == b[0] and saved_trace(a[5])["config"]["sampling"]["temperature"] == 0.8
    # the session keeps its last run: Replay with nothing picked replays it
    html, stats, text = client.predict(None, None, api_name="/replay")
    assert text == b[0] and "ds-stepper" in html
    other = Client(server[0], verbose=False)  # a fresh session has no last run
    expect_error(other, [None, None], "/replay", "run something first")


def test_race_reports_identical_tokens_for_greedy_modes(client, dirs):
    table, summary, fig, lat = client.predict(
        *race_settings(dirs, ["lookahead", "prompt_lookup", "speculative"]), api_name="/race")
    rows = {r[0]: dict(zip(table["headers"], r)) for r in table["data"]}
    assert list(rows) == ["greedy", "lookahead", "prompt_lookup", "speculative"]
    for m in ("lookahead", "prompt_lookup", "speculative"):
        assert rows[m]["exact"] == "✓ identical to greedy", rows[m]
        assert rows[m]["tokens"] == rows["greedy"]["tokens"] == 20
        assert rows[m]["speedup vs greedy"] > 0 and rows[m]["compression"] >= 1.0
    assert summary.count("identical to greedy") == 3
    assert fig["type"] == "plotly" and lat["type"] == "plotly"


def test_race_in_sampling_mode_does_not_claim_exactness(client, dirs):
    table, summary, _, _ = client.predict(*race_settings(dirs, ["lookahead"], temperature=1.0, seed=3),
                                          api_name="/race")
    assert "n/a (sampling" in table["data"][1][-1] and "Sampling mode" in summary


def test_profile_returns_plots_and_downloads(client, dirs):
    roof, flops, lat, summary, files = client.predict(*settings(dirs, method="lookahead", max_new=12),
                                                      api_name="/profile")
    assert all(f["type"] == "plotly" for f in (roof, flops, lat))
    assert "GFLOP/s" in summary
    names = sorted(Path(f).name for f in files)
    assert names == ["lookahead-report.html", "lookahead-trace.json", "lookahead.perfetto.json"]
    by = {Path(f).name: Path(f) for f in files}
    assert Trace.from_dict(saved_trace(by["lookahead-trace.json"])).method == "lookahead"
    assert "traceEvents" in by["lookahead.perfetto.json"].read_text()[:100000]
    page = by["lookahead-report.html"].read_text()
    assert "ds-stepper" in page and "<script src=" not in page  # offline report: everything inline


def test_autotune_sets_lookahead_parameters(client, dirs):
    W, N, G, note = client.predict(dirs["target"], dirs["draft"], "auto", "auto", PROMPT, api_name="/autotune")
    assert 1 <= W <= 64 and 2 <= N <= 16 and 0 <= G <= 64
    assert f"W={W}, N={N}" in note and "predicted" in note


def test_sweep_streams_progress(client, dirs):
    job = client.submit(dirs["target"], dirs["draft"], "auto", "auto", PROMPT, [3, 4], [1, 2], 16, api_name="/sweep")
    fig, table, status = job.result(timeout=120)
    assert len(job.outputs()) >= 4  # one update per run, then the final one
    assert status.startswith("done: 4 runs")
    assert [r[0] for r in table["data"]] == ["greedy", 3, 3, 4, 4]
    assert fig["type"] == "plotly"


def test_replay_recorded_and_uploaded_traces(client):
    html, stats, text = client.predict(handle_file(str(FIXTURES / "lookahead.json")), None, api_name="/replay")
    recorded = Trace.load(FIXTURES / "lookahead.json")
    assert "ds-stepper" in html and text == recorded.text and "lookahead" in stats
    shipped = sorted((Path(app_module.__file__).parent / "assets" / "traces").glob("*.json"))
    assert shipped, "assets/traces/ ships no recorded trace"
    for p in shipped:
        assert p.stat().st_size <= 1_000_000, f"{p.name} is larger than 1 MB"
        html, stats, _ = client.predict(None, str(p), api_name="/replay")
        assert "ds-stepper" in html and Trace.load(p).method in stats


def expect_error(client, args, api_name, *needles):
    with pytest.raises(Exception) as e:
        client.predict(*args, api_name=api_name)
    msg = str(e.value)
    for n in needles:
        assert n in msg, f"expected {n!r} in error {msg!r}"
    assert "Traceback" not in msg
    return msg


def test_bad_inputs_are_errors_and_the_server_keeps_serving(client, dirs, tmp_path):
    expect_error(client, settings(dirs, prompt="   "), "/run", "prompt is empty")
    expect_error(client, settings(dirs, max_new=100000), "/run", "max new tokens", "4096")
    expect_error(client, settings(dirs, method="lookahead", W=0), "/run", "W window", "[1, 64]")
    expect_error(client, settings(dirs, method="lookahead", N=17), "/run", "N n-gram")
    expect_error(client, settings(dirs, temperature=5), "/run", "temperature")
    expect_error(client, settings(dirs, method="speculative", spec_mode="tree", widths="a,b"), "/run", "tree widths")
    expect_error(client, settings(dirs, method="speculative", spec_mode="tree", widths="16,16,16"), "/run", "nodes")
    expect_error(client, settings(dirs, max_new=510), "/run", "positions")  # longer than the model's context
    expect_error(client, settings(dirs, target=str(tmp_path / "missing")), "/run", "does not exist")
    expect_error(client, settings(dirs, target=dirs["broken"]), "/run", "cannot load model")
    expect_error(client, settings(dirs, target=""), "/run", "no target model")
    expect_error(client, settings(dirs, method="speculative", draft=dirs["bad_draft"]), "/run", "vocabulary")
    expect_error(client, race_settings(dirs, []), "/race", "at least one")
    expect_error(client, [None, str(FIXTURES / "greedy.json")], "/replay", "")  # only the shipped list is readable
    expect_error(client, [dirs["target"], dirs["draft"], "auto", "auto", PROMPT, [], [1], 16], "/sweep", "at least one")
    bad = tmp_path / "corrupt.json"
    bad.write_text('{"schema": "decodescope.trace/1", "method": "greedy"')
    expect_error(client, [handle_file(str(bad)), None], "/replay", "not valid JSON")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"schema": "something/9", "steps": []}))
    expect_error(client, [handle_file(str(wrong)), None], "/replay", "unsupported trace schema")
    broken = saved_trace(FIXTURES / "lookahead.json")
    broken["steps"][1]["parents"] = broken["steps"][1]["parents"][:-1]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    expect_error(client, [handle_file(str(tmp_path / "broken.json")), None], "/replay", "corrupt")
    big = tmp_path / "big.json"
    big.write_text(" " * 400_000 + json.dumps(saved_trace(FIXTURES / "greedy.json")))  # over the 300 kB test cap
    expect_error(client, [handle_file(str(big)), None], "/replay", "too large")
    # ... and the next request still works
    out = client.predict(*settings(dirs, method="lookahead"), api_name="/run")
    assert out[0] == reference(dirs).text


def test_concurrent_clients_each_get_their_own_result(server, dirs):
    url = server[0]
    jobs = [("greedy", 12, "def f ( x ) : return x + 1"), ("lookahead", 16, "for i in range ( n ) :"),
            ("prompt_lookup", 10, "if x == 1 : return y"), ("speculative", 14, "class a : def b ( self ) :")]
    model, tok = load(dirs["target"])

    def one(job):
        method, n, prompt = job
        c = Client(url, verbose=False)
        return c.predict(*settings(dirs, method=method, max_new=n, prompt=prompt), api_name="/run")

    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(one, jobs))
    for (method, n, prompt), out in zip(jobs, results):
        tr = saved_trace(out[5])
        assert tr["method"] == method and tr["prompt_ids"] == tok(prompt)["input_ids"]
        assert tr["output_ids"] == run(model, tok, prompt, "greedy", max_new_tokens=n).output_ids
        assert out[0] == tr["text"]


def test_stop_cancels_and_frees_the_worker(server, dirs):
    c = Client(server[0], verbose=False)
    job = c.submit(*settings(dirs, target=dirs["slow"], max_new=400), api_name="/run")
    t0 = time.time()
    while len(job.outputs()) < 3 and time.time() - t0 < 60:  # the run is streaming
        time.sleep(0.05)
    assert not job.done()
    live = [o for o in job.outputs() if "running" in o[4]]  # step-by-step updates: partial text + live view
    assert live and 0 < len(live[-1][0]) and live[-1][1]["type"] == "plotly"
    sessions = server[1].decodescope["sessions"]
    c.predict(api_name="/stop")
    t1 = time.time()
    while not job.done() and time.time() - t1 < 20:
        time.sleep(0.05)
    assert job.done(), "Stop did not end the run"
    assert time.time() - t1 < 10
    # the worker thread is gone within a step and the queue serves the next request at once
    t2 = time.time()
    while any(t.name == "decodescope-run" for t in threading.enumerate()) and time.time() - t2 < 5:
        time.sleep(0.05)
    assert not any(t.name == "decodescope-run" for t in threading.enumerate())
    assert not sessions._events
    out = c.predict(*settings(dirs, max_new=8), api_name="/run")
    assert len(saved_trace(out[5])["output_ids"]) == 8


def test_public_mode_allow_list_and_limits(dirs, monkeypatch):
    monkeypatch.setenv("DECODESCOPE_PUBLIC", "1")
    demo = app_module.build_demo(dirs["target"], dirs["draft"])
    lim = demo.decodescope["limits"]
    assert lim.public and lim.hi("max_new_tokens") == 256 and lim.hi("window") == 16
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    try:
        c = Client(url, verbose=False)
        expect_error(c, settings(dirs, max_new=300), "/run", "max new tokens", "256")
        expect_error(c, settings(dirs, target=dirs["bad_draft"]), "/run", "local model paths are disabled")
        expect_error(c, settings(dirs, target="someone/secret-model"), "/run", "allow list")
        out = c.predict(*settings(dirs, method="lookahead"), api_name="/run")  # the default models are allowed
        assert out[0] == reference(dirs).text
    finally:
        demo.close()


def test_app_module_contract():
    src = Path(app_module.__file__).read_text()
    assert src.index("import spaces") < src.index("import gradio") < src.index("from decoding")
    assert "trust_remote_code=True" not in src
    demo = app_module.build_demo(public=False)
    fns = list(demo.fns.values())
    by = {f.api_name: f for f in fns}
    gpu = [by[n] for n in ("run", "race", "profile", "sweep", "load_models", "autotune")]
    assert {f.concurrency_id for f in gpu} == {app_module.GPU} and all(f.concurrency_limit == 1 for f in gpu)
    assert by["replay"].concurrency_id != app_module.GPU  # replay needs no model: it never waits for the GPU
    cancelled = {fns[i].api_name for f in fns for i in (f.cancels or [])}
    assert cancelled == {"run", "race", "profile", "sweep"}  # every long event has a Stop
    assert demo._queue.max_size == 32  # a bounded queue: a crowd gets "queue full", not an endless wait
    assert torch.get_num_threads() == 1
