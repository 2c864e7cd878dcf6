"""The Gradio app end to end: a launched server driven by gradio_client, exactly as a remote user would.

Tiny random models (tests/conftest.py) stand in for the embedded ones so the whole file runs in seconds;
the app takes its default models as arguments (app.build_demo(default_target=..., default_draft=...)).
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from conftest import other_tokenizer, save_tiny_dir, tiny

import app as app_module
from appkit.models.model_cache import ModelCache
from appkit.run.settings import FIELDS, Settings
from appkit.run.stream import MIN_INTERVAL_S
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
    tiny("llama", vocab=80, seed=2).save_pretrained(bad)  # another vocabulary size and another tokenizer
    other_tokenizer(bad)  # (a padded embedding alone is fine when the tokenizers agree)
    d["bad_draft"] = bad
    (root / "not_a_model").mkdir()
    (root / "not_a_model" / "config.json").write_text("{broken")
    d["broken"] = str(root / "not_a_model")
    return d


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    """Presets and machine peaks go to a temporary cache, never to ~/.cache or the repo."""
    old = os.environ.get("DECODESCOPE_CACHE")
    os.environ["DECODESCOPE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield os.environ["DECODESCOPE_CACHE"]
    if old is None:
        os.environ.pop("DECODESCOPE_CACHE")
    else:
        os.environ["DECODESCOPE_CACHE"] = old


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
    """The API's inputs, by name: Settings' field order is the only order there is."""
    s = Settings(target=dirs["target"], draft=dirs["draft"], prompt=PROMPT, method="greedy", preset="manual",
                 max_new=20, window=4, ngram=3, guesses=4, max_ngram=3, num_tokens=8, draft_tokens=3, widths="2,2",
                 budget=8)
    for k, v in kw.items():
        assert k in FIELDS, k
        setattr(s, k, v)
    return [getattr(s, f) for f in FIELDS]


def race_settings(dirs, methods, **kw) -> list:
    return settings(dirs, **kw) + [methods]


def reference(dirs, method="greedy", n=20, **params) -> Trace:
    model, tok = load(dirs["target"])
    if method == "speculative":
        params["draft_model"] = load(dirs["draft"])[0]
    return run(model, tok, PROMPT, method, max_new_tokens=n, **params)


def sent(value) -> bool:
    """An output the event really updated (gr.skip() reaches the client as a bare update)."""
    return value not in (None, "") and not (isinstance(value, dict) and value.get("__type__") == "update")


def saved_trace(path) -> dict:
    return json.loads(Path(path).read_text())


RUNS = [("greedy", {}),
        ("lookahead", dict(window=4, ngram=3, guesses=4)),
        ("prompt_lookup", dict(max_ngram=3, num_tokens=8)),
        ("speculative", dict(spec_mode="chain", draft_tokens=3)),
        ("speculative", dict(spec_mode="tree", widths="2,2")),
        ("speculative", dict(spec_mode="budget", draft_tokens=3, budget=6)),
        ("speculative", dict(spec_mode="chain", draft_tokens=3, staged=True))]


@pytest.mark.parametrize("method,kw", RUNS, ids=[f"{m}-{k.get('spec_mode', '')}{'-staged' if k.get('staged') else ''}"
                                                  for m, k in RUNS])
def test_each_method_streams_and_finishes(client, dirs, method, kw):
    greedy = reference(dirs)
    job = client.submit(*settings(dirs, method=method, **kw), api_name="/run")
    msg, stats, text, html, trace_path = job.result(timeout=120)
    assert len(job.outputs()) >= 2, "the run streamed no intermediate update"
    assert msg == "" and text == greedy.text and text.strip()
    assert "done" in stats and method in stats and "compression" in stats
    assert 'class="ds-stepper"' in html and "ds-data" in html
    assert "roofline" in html  # the analytic per-step profile is on by default
    tr = saved_trace(trace_path)
    assert tr["method"] == method and tr["output_ids"] == greedy.output_ids
    assert tr["stats"]["steps"] <= greedy.stats()["steps"]
    if kw.get("staged"):
        assert tr["config"]["staged"] is True
    if kw.get("spec_mode") == "tree":
        assert tr["config"]["tree"] == [2, 2]
    if method == "speculative":
        assert tr["config"]["confidence"] == Settings().confidence  # the cutoff control's default


def test_draft_cutoff_control_reaches_the_drafter(client, dirs):
    """The cutoff is the user's with every preset: 0 drafts the full tree, 1 prunes every extension."""
    greedy = reference(dirs)
    nodes = {}
    for cutoff in (0.0, 1.0):
        for preset in ("manual", "auto"):
            out = client.predict(*settings(dirs, method="speculative", spec_mode="tree", widths="2,2",
                                           confidence=cutoff, preset=preset), api_name="/run")
            tr = saved_trace(out[4])
            assert tr["config"]["confidence"] == cutoff and tr["output_ids"] == greedy.output_ids
            if preset == "manual":
                nodes[cutoff] = sum(len(s["tokens"]) for s in tr["steps"][1:])
    assert nodes[0.0] > nodes[1.0]


def test_streaming_is_throttled_and_light(client, dirs):
    """While the run goes only text and a one-line status travel; the step view comes once at the end."""
    job = client.submit(*settings(dirs, target=dirs["slow"], method="lookahead", max_new=60), api_name="/run")
    job.result(timeout=120)
    outs = job.outputs()
    live = [o for o in outs if "running" in (o[1] or "")]
    assert live, "no live update"
    assert not any(sent(o[3]) or sent(o[4]) for o in live), "the step view was sent while streaming"
    assert all("|" not in o[1] for o in live)  # a line, not the stats table
    # 60 tokens at >= 30 ms a step: ~2 s of decoding; at most one update per MIN_INTERVAL_S (+ first, last)
    assert len(live) <= 2 + 60 * 0.03 / MIN_INTERVAL_S * 1.5


def test_sampling_run_is_reproducible_and_kept_per_session(server, dirs):
    client = Client(server[0], verbose=False)
    a = client.predict(*settings(dirs, method="lookahead", temperature=0.8, top_k=20, seed=7), api_name="/run")
    b = client.predict(*settings(dirs, method="lookahead", temperature=0.8, top_k=20, seed=7), api_name="/run")
    assert a[2] == b[2] and saved_trace(a[4])["config"]["sampling"]["temperature"] == 0.8
    # the session keeps its last run: Replay with nothing picked replays it
    msg, stats, html, text = client.predict(None, None, api_name="/replay")
    assert text == b[2] and "ds-stepper" in html and "Recorded elsewhere" not in stats  # measured here
    other = Client(server[0], verbose=False)  # a fresh session has no last run
    assert "run something first" in other.predict(None, None, api_name="/replay")[0]


def race_rows(table) -> dict:
    return {r[0]: dict(zip(table["headers"], r)) for r in table["data"]}


def test_race_reports_identical_tokens_for_greedy_modes(client, dirs):
    job = client.submit(*race_settings(dirs, ["lookahead", "prompt_lookup", "speculative"]), api_name="/race")
    msg, summary, table, fig, lat, sbs = job.result(timeout=300)
    rows = race_rows(table)
    assert list(rows) == ["greedy", "lookahead", "prompt_lookup", "speculative"]
    for m in ("lookahead", "prompt_lookup", "speculative"):
        assert rows[m]["exact"] == "✓ identical to greedy", rows[m]
        assert rows[m]["tokens"] == rows["greedy"]["tokens"] == 20
        assert rows[m]["speedup vs greedy"] > 0 and rows[m]["compression"] >= 1.0
    assert rows["lookahead"]["config"] == "W4 N3 G4"
    assert summary.count("identical to greedy") == 3
    assert fig["type"] == "plotly" and lat["type"] == "plotly"
    # repeats interleaved (default 3): median and min-max spread per method, the winner named
    assert all(r["runs"] == 3 for r in rows.values())
    for r in rows.values():
        lo, hi = map(float, r["wall s (min-max)"].split("-"))
        assert lo <= r["wall s (median)"] <= hi
    best = max(rows.values(), key=lambda r: r["speedup vs greedy"])["method"]
    assert "Median of 3 interleaved runs" in summary
    verdict = summary.split("\n\n")[1]  # one winner, or the methods whose runs overlap the best one's
    assert verdict.startswith(f"**Winner: {best}**") or (verdict.startswith("**Too close to call: ")
                                                        and f"{best} leads by median" in verdict) or (
        verdict.startswith("**Machine busy: speed not measured**") and "cost model" in summary), verdict  # loaded
    progress = [str(o[1]) for o in job.outputs()]
    assert any("of 3)" in x for x in progress), progress  # the repeats stream (which ones arrive depends on polling)
    # every method gets one line with measured numbers: why it won or lost
    for m in ("lookahead", "prompt_lookup", "speculative"):
        line = next(x for x in summary.split("\n\n") if x.startswith((f"**{m}** is ", f"**{m}** did greedy's work")))
        assert "1-token step" in line and "tokens per step" in line and ("x measured" in line and " ms)" in line
                                                                          or "measured is noise" in line
                                                                          or "speed not measured (machine busy)" in line), line
    assert "**greedy** is the baseline" in summary
    # side by side: one row per method, aligned by output position; a row's cells are its steps
    assert "aligned by output" in sbs and all(f"data-run='{m}'" in sbs for m in rows)
    look = sbs.split("data-run='lookahead'")[1].split("</tr>")[0]
    assert look.count("<td") == rows["lookahead"]["steps"]  # every step of the 20-token run, prefill included


def test_race_and_sweep_with_heads(client, dirs, tmp_path):
    """Medusa and EAGLE race as choices (off by default) from one heads folder holding medusa/ and eagle/
    (heads trained a few steps on the target's own greedy text): both rows are greedy's tokens."""
    from appkit.race.tabs import RACE_CHOICES, RACE_DEFAULT
    from test_heads import _train
    assert {"medusa", "eagle"} <= set(RACE_CHOICES) and not {"medusa", "eagle"} & set(RACE_DEFAULT)
    model, _ = load(dirs["target"])
    for kind in ("medusa", "eagle"):
        _train(model, kind, tmp_path / "heads" / kind, epochs=2)
    _, summary, table, _, _, _ = client.predict(
        *race_settings(dirs, ["eagle", "medusa"], heads=str(tmp_path / "heads"), heads_budget=8) + [1],
        api_name="/race")
    rows = race_rows(table)
    assert list(rows) == ["greedy", "eagle", "medusa"]
    for m in ("eagle", "medusa"):
        assert rows[m]["exact"] == "✓ identical to greedy" and rows[m]["tokens"] == 20, rows[m]
        assert rows[m]["config"] == "tree budget 8"
        assert f"a {m} step (head forwards + a" in summary
    # typical acceptance: an opt-in checkbox, sampling only, and the stats line says the text is not exact
    for preset in ("manual", "auto"):  # auto: the note survives the preset's own note
        msg, stats, _, _, path = client.predict(*settings(dirs, method="medusa", heads=str(tmp_path / "heads"),
                                                          typical=True, temperature=1.0, preset=preset),
                                                api_name="/run")
        assert msg == "" and "typical acceptance (NOT exact)" in stats, (preset, stats)
        assert saved_trace(path)["config"]["acceptance"] == "typical"
    expect_msg(client, settings(dirs, method="eagle", heads=str(tmp_path / "heads"), typical=True), "/run",
               "typical acceptance", "temperature > 0")
    # the Sweep's tree-size sweep: one line per heads method, one point per budget, each a real run
    msg, status, fig, table = client.predict(*settings(dirs, heads=str(tmp_path / "heads")), [], [], 16,
                                             ["medusa", "eagle"], [4, 8], api_name="/sweep")
    assert status.startswith("done: 4 runs"), status
    head = table["headers"]
    got = {(r[0], r[head.index("tree budget")]): r[head.index("compression")] for r in table["data"]}
    assert set(got) == {("greedy", ""), ("medusa", 4), ("medusa", 8), ("eagle", 4), ("eagle", 8)}
    model, tok = load(dirs["target"])
    want = run(model, tok, PROMPT, "eagle", max_new_tokens=16, heads=str(tmp_path / "heads" / "eagle"), budget=8)
    assert got["eagle", 8] == round(want.stats()["compression"], 3)
    assert "eagle (tree budget)" in json.dumps(fig) and "medusa (tree budget)" in json.dumps(fig)


def test_race_repeats_input_is_checked_and_honoured(client, dirs):
    expect_msg(client, race_settings(dirs, ["lookahead"]) + [0], "/race", "repeats", "[1, 10]", "got 0")
    _, summary, table, _, _, _ = client.predict(*race_settings(dirs, ["lookahead"]) + [1], api_name="/race")
    assert [r["runs"] for r in race_rows(table).values()] == [1, 1] and "Median of 1 interleaved run " in summary


def test_race_explains_a_mismatch_by_dtype():
    from appkit.race.race import drift_note
    rows = [{"method": "greedy", "exact": "reference"}, {"method": "lookahead", "exact": "✗ differs from greedy at token 108"}]
    assert "expected bfloat16 drift" in drift_note(rows, "torch.bfloat16") and "fp32" in drift_note(rows, "torch.bfloat16")
    assert "bug" in drift_note(rows, "torch.float32") and drift_note(rows[:1], "torch.bfloat16") == ""


def test_prompt_hint_follows_the_loaded_model_and_unreachable_models_are_marked(server, dirs):
    from appkit.page.hints import hub_label, prompt_hint
    from decoding.models import max_positions
    url, demo = server
    h = demo.decodescope["handlers"]
    Client(url, verbose=False).predict(*settings(dirs, max_new=2), api_name="/run")
    model = h.cache.get(dirs["target"])[0]
    info = prompt_hint(h, dirs["target"], "auto", "auto")["info"]
    assert f"{max_positions(model.config):,} positions" in info and "2,048" not in info
    assert "once it loads" in prompt_hint(h, dirs["slow"] + "-not-loaded", "auto", "auto")["info"]
    assert "not downloaded" in hub_label("decodescope-test/no-such-model")


def test_lesson_stops_are_data_and_follow_the_methods_that_exist(monkeypatch):
    from appkit.page import lesson
    from decoding.api import METHODS
    assert [s.method for s in lesson.stops()] == [s.method for s in lesson.STOPS if s.method in METHODS]
    order = [s.method for s in lesson.STOPS]
    assert order[:4] == ["greedy", "jacobi", "lookahead", "prompt_lookup"] and order[4:7] == ["speculative"] * 3
    la = next(s for s in lesson.STOPS if s.method == "lookahead")
    assert la.settings == {"window": 5, "ngram": 4, "guesses": 5} and la.expect["window"] == [5, 3]  # the paper's W5 N4 G5
    for s in lesson.STOPS:
        assert s.narration.count(". ") + s.narration.count("! ") >= 1 and s.look and s.prompt  # two sentences at least
        assert set(lesson.values(s)) <= set(FIELDS) and lesson.values(s)["preset"] == "teach"
    monkeypatch.setattr(lesson, "METHODS", (*METHODS, "jacobi", "medusa"))  # a branch adds a method: its stop appears
    assert "jacobi" in [s.method for s in lesson.stops()] and "medusa" in lesson.start_label()
    out = lesson.go(-1, 0)
    assert out[0] == 0 and "Stop 1 of" in out[1] and "teaching preset" in out[1]
    assert lesson.go(len(lesson.stops()) - 1, 1)[0] == len(lesson.stops()) - 1  # clamps at the last stop


def test_teaching_preset_runs_the_fields_and_says_so(client, dirs):
    out = client.predict(*settings(dirs, method="lookahead", preset="teach", window=5, ngram=4, guesses=5, max_new=8),
                         api_name="/run")
    assert out[0] == "" and "teaching preset W5 N4 G5" in out[1]
    assert saved_trace(out[4])["config"]["window"] == 5
    out = client.predict(*settings(dirs, method="lookahead", max_new=8), api_name="/run")
    assert "manual preset W4 N3 G4" in out[1]


def test_side_by_side_aligns_runs_by_output_position():
    import viz
    g, la = Trace.load(FIXTURES / "greedy.json"), Trace.load(FIXTURES / "lookahead.json")
    rows = {r["name"]: r for r in viz.side_by_side.data({"greedy": g, "lookahead": la})}
    for name, tr in (("greedy", g), ("lookahead", la)):
        cells = rows[name]["cells"]
        assert [t for c in cells for t in c["tokens"]] == tr.output_ids[:len([t for c in cells for t in c["tokens"]])]
        assert all(b["start"] == a["start"] + len(a["tokens"]) for a, b in zip(cells, cells[1:]))  # no gap, no overlap
    assert all(len(c["tokens"]) == 1 for c in rows["greedy"]["cells"])
    assert rows["lookahead"]["steps"] < rows["greedy"]["steps"] and rows["lookahead"]["tokens"] == rows["greedy"]["tokens"]
    page = viz.side_by_side.html({"greedy": g, "lookahead": la})
    wide = [c for c in rows["lookahead"]["cells"] if len(c["tokens"]) > 1][0]
    assert f"colspan='{len(wide['tokens'])}' title='step {wide['step']}" in page and "scroll →" in page


def test_race_order_is_interleaved_and_rotated():
    from appkit.race.race import order
    assert [order(["g", "a", "b"], r) for r in range(3)] == [["g", "a", "b"], ["a", "b", "g"], ["b", "g", "a"]]


def test_race_in_sampling_mode_does_not_claim_exactness(client, dirs):
    _, summary, table, _, _, _ = client.predict(*race_settings(dirs, ["lookahead"], temperature=1.0, seed=3) + [1],
                                             api_name="/race")
    exact = table["data"][1][table["headers"].index("exact")]
    assert "n/a (sampling" in exact and "Sampling mode" in summary


def test_auto_preset_is_tuned_once_and_cached_outside_the_repo(client, dirs, cache_dir):
    job = client.submit(*settings(dirs, method="lookahead", preset="auto", max_new=12), api_name="/run")
    out = job.result(timeout=300)
    assert out[0] == "" and "auto preset W" in out[1] and "tuned on this device just now" in out[1]
    assert any("tuning the auto preset" in str(o[1]) for o in job.outputs())  # never a silent "loading model…"
    stored = json.loads((Path(cache_dir) / "presets.json").read_text())
    assert any(k.startswith(dirs["target"]) for k in stored)
    again = client.predict(*settings(dirs, method="lookahead", preset="auto", max_new=12), api_name="/run")
    assert "(tuned on this device)" in again[1]  # from the cache: no second tuning
    assert not list(Path(app_module.__file__).parent.glob("**/presets.json"))


def test_auto_preset_of_a_method_without_tuner_is_its_defaults(dirs, cache_dir):
    """Self-speculative, retrieval and prompt lookup have no tuner: "auto" runs their defaults (was a KeyError)."""
    from appkit.run import presets
    from decoding.models import DEFAULT_MODEL
    model, tok = load(dirs["target"])
    for name in (DEFAULT_MODEL, dirs["target"]):
        for m in ("self_speculative", "retrieval", "prompt_lookup"):
            pr = presets.resolve(name, model, tok, m)
            shipped = presets.SHIPPED_CPU_DEFAULT if name == DEFAULT_MODEL else presets.SHIPPED_CPU
            assert pr["params"] == shipped.get(m, presets.SHIPPED_CPU[m]) and presets.describe(m, pr["params"]), \
                (name, m)


def test_every_run_shows_its_speed_against_greedy_or_says_it_was_not_measured(client, dirs):
    prompt = PROMPT + " # speed"
    first = client.predict(*settings(dirs, method="lookahead", prompt=prompt, max_new=8), api_name="/run")
    assert "speed vs greedy: **not measured**" in first[1], first[1]
    client.predict(*settings(dirs, method="greedy", prompt=prompt, max_new=8), api_name="/run")
    after = client.predict(*settings(dirs, method="lookahead", prompt=prompt, max_new=8), api_name="/run")
    # a figure with its interval from both runs' step times, "within noise", or no speed-up (greedy's work)
    # ... or, on a busy machine (the other test worker), no ratio: the cost model against greedy's measured step
    claim = re.search(r"\*\*[0-9.]+x\*\* greedy's speed \([0-9.]+-[0-9.]+x from [0-9.]+ tokens per step|"
                      r"within noise of greedy's speed \(|no speed-up over greedy's speed: [0-9]+ steps for|"
                      r"machine busy: speed vs greedy's speed not measured \(.+\); cost model: [0-9]+ steps for [0-9]+ "
                      r"tokens .* against greedy's 1 row at [0-9.]+ ms", after[1])
    assert claim, after[1]
    other = client.predict(*settings(dirs, method="lookahead", prompt=prompt, max_new=9), api_name="/run")
    assert "not measured" in other[1]  # another length is another measurement


@pytest.mark.timing  # 1 vs 2 threads measured: the other worker would take the second core
def test_cpu_threads_are_picked_by_measurement(dirs, monkeypatch):
    """The thread count is what decodes fastest here (as W/N/G are picked), measured once per model; a model
    the engine's one-thread rule covers (small, <= 2 cores) is not measured."""
    import torch
    from appkit.run import handlers
    from decoding.tuning.tune import tune_threads
    model, tok = load(dirs["target"])
    before = torch.get_num_threads()
    try:
        for slow in (1, 2):  # a forward costs 20 ms more at `slow` threads: the other count must win
            hook = model.register_forward_pre_hook(lambda *a, s=slow: time.sleep(0.02 if torch.get_num_threads() == s else 0))
            r = tune_threads(model, tok, PROMPT, candidates=[1, 2], pilot_tokens=3)
            hook.remove()
            assert r["threads"] == 3 - slow and torch.get_num_threads() == 3 - slow and set(r["tokens_per_s"]) == {1, 2}
        assert not handlers.needs_thread_timing(model)  # small on 2 cores: one thread, not measured
        monkeypatch.setattr(os, "cpu_count", lambda: 4)
        assert handlers.needs_thread_timing(model)
        r = handlers.threads_for(model, tok)
        assert model.decodescope_threads is r and torch.get_num_threads() == r["threads"]
        assert handlers.threads_note(r).startswith(f"{r['threads']} CPU thread") and "measured: 1 → " in handlers.threads_note(r)
        assert not handlers.needs_thread_timing(model)  # once per model
    finally:
        torch.set_num_threads(before)


def test_a_draft_shipped_for_the_default_model_is_found_and_races(tmp_path, monkeypatch):
    """Until a draft shares SmolLM2's tokenizer, the Race's default leaves speculative out (it cannot run);
    a draft folder shipped under assets/drafts/ with the same vocabulary is picked with no other change."""
    import json as _json
    from appkit.models import drafts
    from appkit.race.tabs import RACE_DEFAULT
    from decoding.models import DEFAULT_MODEL, EMBEDDED_DRAFT, EMBEDDED_TARGET
    monkeypatch.setattr(drafts, "SHIPPED_DRAFTS", tmp_path / "drafts")
    assert drafts.draft_for(DEFAULT_MODEL) is None and drafts.draft_for(EMBEDDED_TARGET) == EMBEDDED_DRAFT
    assert "speculative" not in drafts.race_default(RACE_DEFAULT, DEFAULT_MODEL, EMBEDDED_DRAFT)
    assert "speculative" in drafts.race_default(RACE_DEFAULT, EMBEDDED_TARGET, EMBEDDED_DRAFT)
    smol = tmp_path / "drafts" / "smollm2-draft"
    smol.mkdir(parents=True)
    (smol / "config.json").write_text(_json.dumps({"vocab_size": 49152}))
    assert drafts.draft_for(DEFAULT_MODEL) == str(smol)
    assert "speculative" in drafts.race_default(RACE_DEFAULT, DEFAULT_MODEL, str(smol))


def test_tune_button_sets_the_auto_preset(client, dirs, cache_dir):
    msg, line, W, N, G, preset = client.predict(*settings(dirs, method="lookahead"), api_name="/tune")
    assert msg == "" and preset == "auto" and 1 <= W <= 64 and 2 <= N <= 16 and 0 <= G <= 64
    assert f"W{W} N{N} G{G}" in line and "saved as the auto preset" in line
    assert "What it measured" in line and "1-token step" in line and "tokens/step at" in line  # not silent


def test_auto_fields_show_what_auto_runs(server, dirs):
    """After an auto run, every method's fields hold the preset it used; manual then runs the same."""
    from appkit.page import autofields
    url, demo = server
    h = demo.decodescope["handlers"]
    c = Client(url, verbose=False)
    out = c.predict(*settings(dirs, method="lookahead", preset="auto", max_new=8), api_name="/run")
    cfg = saved_trace(out[4])["config"]
    ups = dict(zip(autofields.FIELDS + ("note",), autofields.shown(h, *settings(dirs, preset="auto", window=9))))
    assert [ups[k]["value"] for k in ("window", "ngram", "guesses")] == [cfg["window"], cfg["ngram"], cfg["guesses"]]
    assert f"lookahead **W{cfg['window']} N{cfg['ngram']} G{cfg['guesses']}**" in ups["note"]
    manual = autofields.shown(h, *settings(dirs))
    assert all(u.get("__type__") == "update" and "value" not in u for u in manual[:-1]) and "manual" in manual[-1]
    # speculative: the staged tree it runs is what the fields show, so "manual" runs the same shape
    assert autofields.field_values("speculative", {"tree": [2, 1, 1, 1, 1], "staged": True}) == \
        {"spec_mode": "tree", "widths": "2,1,1,1,1", "staged": True}
    assert autofields.field_values("speculative", {"draft_tokens": 5}) == {"spec_mode": "chain", "draft_tokens": 5,
                                                                          "staged": False}


def test_profile_returns_plots_and_downloads(client, dirs):
    msg, summary, roof, flops, lat, files, ops = client.predict(*settings(dirs, method="lookahead", max_new=12),
                                                                api_name="/profile")
    assert all(f["type"] == "plotly" for f in (roof, flops, lat, ops))
    assert "operator breakdown" in json.loads(ops["plot"])["layout"]["title"]["text"].lower()
    assert "GFLOP/s" in summary
    names = sorted(Path(f).name for f in files)
    assert names == ["greedy-trace.json", "greedy.perfetto.json", "lookahead-report.html", "lookahead-trace.json",
                     "lookahead.perfetto.json"]  # greedy profiled and traced beside the method, as the tab says
    by = {Path(f).name: Path(f) for f in files}
    for m in ("greedy", "lookahead"):
        assert Trace.from_dict(saved_trace(by[f"{m}-trace.json"])).method == m
        assert "traceEvents" in by[f"{m}.perfetto.json"].read_text()[:100000]
    assert {"greedy steps", "lookahead steps"} <= {t.get("name") for t in roof["plot"] and json.loads(roof["plot"])["data"]}
    assert "**greedy**" in summary and "**lookahead**" in summary
    page = by["lookahead-report.html"].read_text()
    assert "ds-stepper" in page and "<script src=" not in page  # offline report: everything inline


def test_sweep_streams_progress(client, dirs):
    job = client.submit(*settings(dirs), [3, 4], [1, 2], 16, api_name="/sweep")
    msg, status, fig, table = job.result(timeout=120)
    assert len(job.outputs()) >= 3
    assert status.startswith("done: 4 runs")
    assert [r[0] for r in table["data"]] == ["greedy", 3, 3, 4, 4]
    assert fig["type"] == "plotly"


def test_replay_recorded_and_uploaded_traces(client):
    msg, stats, html, text = client.predict(handle_file(str(FIXTURES / "lookahead.json")), None, api_name="/replay")
    recorded = Trace.load(FIXTURES / "lookahead.json")
    assert "ds-stepper" in html and text == recorded.text and "lookahead" in stats
    shipped = sorted((Path(app_module.__file__).parent / "assets" / "traces").glob("*.json"))
    assert shipped, "assets/traces/ ships no recorded trace"
    for p in shipped:
        assert p.stat().st_size <= 1_000_000, f"{p.name} is larger than 1 MB"
        msg, stats, html, _ = client.predict(None, p.name, api_name="/replay")
        assert msg == "" and "ds-stepper" in html and Trace.load(p).method in stats
        from viz.exports.teach import teaching_step
        opens = int(re.search(r'data-initial="(\d+)"', html).group(1))
        assert opens == teaching_step(Trace.load(p))["k"] > 0, (p.name, opens)  # a step that shows its point, not the prefill
        assert f"Why this step:** {teaching_step(Trace.load(p))['shows']}" in stats, p.name  # and says why
        assert "Recorded elsewhere: its tokens/s and wall time are the recording machine's" in stats, p.name


MODEL_EVENTS = ("/run", "/race", "/profile", "/sweep", "/tune")


def expect_msg(client, args, api_name, *needles) -> str:
    """A refused request: the message output (beside the controls) says why, the status is reset, nothing
    else is replaced; the model events also raise it to the API client (gr.Error) with the same words."""
    job = client.submit(*args, api_name=api_name)
    if api_name in MODEL_EVENTS:
        with pytest.raises(AppError) as e:
            job.result(timeout=120)
        for n in needles:
            assert n.replace("**", "") in str(e.value), f"expected {n!r} in the client's error {e.value}"
        out = job.outputs()[-1]
    else:
        out = job.result(timeout=120)
    msg = out[0]
    assert msg, f"no message for {args}"
    for n in needles:
        assert n in msg, f"expected {n!r} in message {msg!r}"
    assert "Traceback" not in msg and "loading model" not in str(out[1])
    return msg


def test_bad_inputs_get_a_message_never_a_silent_clamp(client, dirs, tmp_path):
    expect_msg(client, settings(dirs, prompt="   "), "/run", "prompt", "empty")
    expect_msg(client, settings(dirs, max_new=0), "/run", "max new tokens", "[1, 4096]", "got 0")
    expect_msg(client, settings(dirs, max_new=-5), "/run", "max new tokens", "got -5")
    expect_msg(client, settings(dirs, max_new=100000), "/run", "max new tokens", "4096")
    expect_msg(client, settings(dirs, max_new=2.5), "/run", "max new tokens", "whole number")
    expect_msg(client, settings(dirs, method="lookahead", window=0), "/run", "W window", "[1, 64]", "got 0")
    expect_msg(client, settings(dirs, method="lookahead", ngram=1), "/run", "N n-gram", "[2, 16]", "got 1")
    expect_msg(client, settings(dirs, method="lookahead", guesses=-1), "/run", "G guesses", "got -1")
    # all problems at once, not one per click
    msg = expect_msg(client, settings(dirs, method="lookahead", window=0, ngram=1, guesses=-1), "/run", "W window")
    assert "N n-gram" in msg and "G guesses" in msg
    expect_msg(client, settings(dirs, method="lookahead", window=64, ngram=16, guesses=64), "/run",
               "1,920 query tokens per step", "budget")
    expect_msg(client, settings(dirs, temperature=5), "/run", "temperature")
    expect_msg(client, settings(dirs, method="speculative", spec_mode="tree", widths="a,b"), "/run", "tree widths")
    expect_msg(client, settings(dirs, method="speculative", spec_mode="tree", widths="16,16,16"), "/run", "nodes")
    expect_msg(client, settings(dirs, method="speculative", confidence=1.5), "/run", "draft cutoff", "[0, 1]")
    msg = expect_msg(client, settings(dirs, max_new=510), "/run", "positions", "510 new", "the model has 512")
    assert "lower max new tokens to" in msg
    expect_msg(client, settings(dirs, target=str(tmp_path / "missing")), "/run", "does not exist")
    expect_msg(client, settings(dirs, target=dirs["broken"]), "/run", "cannot load model")
    expect_msg(client, settings(dirs, target=""), "/run", "no target model")
    expect_msg(client, settings(dirs, method="speculative", draft=dirs["bad_draft"]), "/run", "vocabulary")
    expect_msg(client, race_settings(dirs, []), "/race", "at least one")
    with pytest.raises(Exception, match="not in the list of choices"):  # only the shipped names are readable
        client.predict(None, str(FIXTURES / "greedy.json"), api_name="/replay")
    expect_msg(client, settings(dirs) + [[], [1], 16], "/sweep", "at least one")
    bad = tmp_path / "corrupt.json"
    bad.write_text('{"schema": "decodescope.trace/1", "method": "greedy"')
    expect_msg(client, [handle_file(str(bad)), None], "/replay", "not valid JSON")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"schema": "something/9", "steps": []}))
    expect_msg(client, [handle_file(str(wrong)), None], "/replay", "not a DecodeScope trace", "something/9")
    (tmp_path / "old.json").write_text(json.dumps({**saved_trace(FIXTURES / "greedy.json"), "schema": "decodescope.trace/0"}))
    out = client.predict(handle_file(str(tmp_path / "old.json")), None, api_name="/replay")
    assert "another version of DecodeScope" in out[0] and "None" not in out[0]
    assert out[1] == "Nothing replayed — see the message above." and out[2] == "" and out[3] == ""  # nothing stale
    broken = saved_trace(FIXTURES / "lookahead.json")
    broken["steps"][1]["parents"] = broken["steps"][1]["parents"][:-1]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    expect_msg(client, [handle_file(str(tmp_path / "broken.json")), None], "/replay", "not a DecodeScope trace",
               "steps[1].parents has")
    big = tmp_path / "big.json"
    big.write_text(" " * 400_000 + json.dumps(saved_trace(FIXTURES / "greedy.json")))  # over the 300 kB test cap
    expect_msg(client, [handle_file(str(big)), None], "/replay", "too large")
    # ... and the next request still works
    out = client.predict(*settings(dirs, method="lookahead"), api_name="/run")
    assert out[0] == "" and out[2] == reference(dirs).text


def test_error_keeps_the_previous_output(server, dirs):
    c = Client(server[0], verbose=False)
    job = c.submit(*settings(dirs, max_new=0), api_name="/run")
    with pytest.raises(AppError, match="max new tokens"):
        job.result(timeout=60)
    last = job.outputs()[-1]
    assert "max new tokens" in last[0] and last[1].startswith("Not run")
    assert not any(sent(x) for x in last[2:])  # output, step view, trace: left as they were


def test_one_token_run_says_mean_accepted_na_and_shows_no_server_path(client, dirs):
    msg, stats, text, html, path = client.predict(*settings(dirs, method="lookahead", max_new=1), api_name="/run")
    assert "**n/a** mean accepted" in stats
    tr = saved_trace(path)
    assert not os.path.isabs(tr["model"]["name"]) and Path(path).name == "lookahead-trace.json"
    assert dirs["target"] not in Path(path).read_text()  # nowhere in the download (config paths too)
    msg, info = client.predict(dirs["target"], dirs["draft"], "auto", "auto", api_name="/load_models")
    assert "/" + dirs["target"].lstrip("/") not in info and "positions" in info


def test_budget_line_follows_w_n_g(server):
    from appkit.run.settings import budget_line
    lim = server[1].decodescope["limits"]
    assert "**50** query tokens" in budget_line(Settings(method="lookahead", window=5, ngram=4, guesses=5), lim)
    assert "1,920" in budget_line(Settings(method="lookahead", window=64, ngram=16, guesses=64), lim)
    assert "W window" in budget_line(Settings(method="lookahead", window=0), lim)
    assert "**16** query tokens" in budget_line(Settings(method="speculative", spec_mode="tree", widths="3,2,1"), lim)
    assert budget_line(Settings(method="greedy"), lim) == ""


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
        tr = saved_trace(out[4])
        assert tr["method"] == method and tr["prompt_ids"] == tok(prompt)["input_ids"]
        assert tr["output_ids"] == run(model, tok, prompt, "greedy", max_new_tokens=n).output_ids
        assert out[2] == tr["text"]


@pytest.mark.timing
def test_stop_ends_within_a_second_and_keeps_the_partial_run(server, dirs):
    c = Client(server[0], verbose=False)
    job = c.submit(*settings(dirs, target=dirs["slow"], max_new=400), api_name="/run")
    t0 = time.time()
    while not any("running" in (o[1] or "") for o in job.outputs()) and time.time() - t0 < 60:
        time.sleep(0.02)
    time.sleep(0.3)
    assert not job.done()
    c.predict(api_name="/stop")
    t1 = time.time()
    while not any("Stopped" in (o[1] or "") for o in job.outputs()) and time.time() - t1 < 10:
        time.sleep(0.01)
    latency = time.time() - t1
    assert latency < 1.0, f"Stop took {latency:.2f} s to show"
    msg, stats, text, html, path = job.result(timeout=30)
    n = int(stats.split("Stopped after ")[1].split()[0])
    assert 0 < n < 400 and text
    assert "ds-stepper" in html  # the partial run's step view
    tr = saved_trace(path)
    assert len(tr["output_ids"]) == n and tr["stop_reason"] == "stopped" and tr["text"] == text
    t2 = time.time()  # the worker thread is gone within a step and the queue serves the next request at once
    while any(t.name == "decodescope-run" for t in threading.enumerate()) and time.time() - t2 < 5:
        time.sleep(0.05)
    assert not any(t.name == "decodescope-run" for t in threading.enumerate())
    assert not server[1].decodescope["sessions"]._events
    out = c.predict(*settings(dirs, max_new=8), api_name="/run")
    assert len(saved_trace(out[4])["output_ids"]) == 8


def test_stop_keeps_the_finished_race_rows(server, dirs):
    c = Client(server[0], verbose=False)
    job = c.submit(*race_settings(dirs, ["lookahead", "prompt_lookup"], target=dirs["slow"], max_new=60),
                   api_name="/race")
    t0 = time.time()
    while not any("running lookahead" in (o[1] or "") for o in job.outputs()) and time.time() - t0 < 60:
        time.sleep(0.02)
    c.predict(api_name="/stop")
    msg, summary, table, _, _, _ = job.result(timeout=30)
    assert "Stopped during lookahead" in summary and list(race_rows(table)) == ["greedy"]


def test_public_mode_allow_list_and_limits(dirs, monkeypatch):
    monkeypatch.setenv("DECODESCOPE_PUBLIC", "1")
    demo = app_module.build_demo(dirs["target"], dirs["draft"])
    lim = demo.decodescope["limits"]
    assert lim.public and lim.hi("max_new_tokens") == 256 and lim.hi("window") == 16
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    try:
        c = Client(url, verbose=False)
        expect_msg(c, settings(dirs, max_new=300), "/run", "max new tokens", "256")
        expect_msg(c, settings(dirs, method="lookahead", window=16, ngram=8, guesses=16), "/run", "budget", "128")
        expect_msg(c, settings(dirs, target=dirs["bad_draft"]), "/run", "local model paths are disabled")
        expect_msg(c, settings(dirs, target="someone/secret-model"), "/run", "allow list")
        out = c.predict(*settings(dirs, method="lookahead"), api_name="/run")  # the default models are allowed
        assert out[2] == reference(dirs).text
    finally:
        demo.close()


def test_app_module_contract():
    src = Path(app_module.__file__).read_text()
    assert src.index("import spaces") < src.index("import gradio") < src.index("from decoding")
    assert "trust_remote_code=True" not in src
    demo = app_module.build_demo(public=False)
    fns = list(demo.fns.values())
    by = {f.api_name: f for f in fns}
    gpu = [by[n] for n in ("run", "race", "profile", "sweep", "load_models", "tune")]
    assert {f.concurrency_id for f in gpu} == {app_module.GPU} and all(f.concurrency_limit == 1 for f in gpu)
    assert by["replay"].concurrency_id != app_module.GPU  # replay needs no model: it never waits for the GPU
    assert by["replay"].concurrency_id == app_module.RENDER and by["replay"].concurrency_limit == 1  # one at a time
    assert by["stop"].queue is False  # Stop never waits behind the run it stops
    assert demo._queue.max_size == 32  # a bounded queue: a crowd gets "queue full", not an endless wait
    assert torch.get_num_threads() == 1
    for path in Path(app_module.__file__).parent.glob("appkit/**/*.py"):  # small, readable modules, every room
        assert len(path.read_text().splitlines()) < 320, path.name


def test_jacobi_and_the_reference_box(client, dirs):
    """The Jacobi method and the reference text box reach the engine through the app's API;
    a bad block or an oversize reference gets the field's message."""
    from decoding.methods.lookup.reference_text import MAX_REFERENCE_CHARS
    greedy = reference(dirs)
    msg, stats, text, html, path = client.predict(*settings(dirs, method="jacobi", block=3), api_name="/run")
    tr = saved_trace(path)
    assert msg == "" and tr["method"] == "jacobi" and tr["config"]["block"] == 3
    assert tr["output_ids"] == greedy.output_ids and "data-view='trajectory'" in html
    msg, stats, text, html, path = client.predict(*settings(dirs, method="prompt_lookup", reference=greedy.text),
                                                  api_name="/run")
    tr = saved_trace(path)
    assert tr["output_ids"] == greedy.output_ids and tr["config"]["references"] == 1
    assert "reference" in {o for s in tr["steps"] for o in s["origins"]}
    expect_msg(client, settings(dirs, method="jacobi", block=0), "/run", "K block", "got 0")
    expect_msg(client, settings(dirs, method="prompt_lookup", reference="x" * (MAX_REFERENCE_CHARS + 1)), "/run",
               "reference text", "too long")


def test_sweep_draws_the_jacobi_line(client, dirs):
    """N = 0 in the Sweep is plain Jacobi with block K = W: its own line beside lookahead's."""
    msg, status, fig, table = client.predict(*settings(dirs), [0, 3], [1, 2], 16, api_name="/sweep")
    assert status.startswith("done: 4 runs")
    assert [r[0] for r in table["data"]] == ["greedy", "jacobi", "jacobi", 3, 3]
    assert "Jacobi (block K = W)" in json.dumps(fig)


def test_self_speculative_and_retrieval_run_in_the_app(client, dirs, tmp_path):
    """Both survey families reach the engine through the app's API with their pictures: self-speculative with
    the adapter named in the heads box (exactly HF greedy's ids), retrieval from the suffix cache; a model
    without a shipped adapter and the shipped datastore on another tokenizer each get the field's message."""
    from decoding.methods.self_draft.self_spec_adapter import new_adapter, save_adapter
    greedy = reference(dirs)
    model, _ = load(dirs["target"])
    save_adapter(*new_adapter(model, 1), tmp_path / "adapter")
    msg, stats, text, html, path = client.predict(*settings(dirs, method="self_speculative",
                                                            heads=str(tmp_path / "adapter")), api_name="/run")
    tr = saved_trace(path)
    assert msg == "" and tr["method"] == "self_speculative" and tr["output_ids"] == greedy.output_ids
    assert tr["config"]["exit_layer"] == 1 and "data-view='tree'" in html
    msg, stats, text, html, path = client.predict(*settings(dirs, method="retrieval", datastore=""), api_name="/run")
    tr = saved_trace(path)
    assert msg == "" and tr["method"] == "retrieval" and tr["output_ids"] == greedy.output_ids
    assert "data-view='retrieval'" in html
    expect_msg(client, settings(dirs, method="self_speculative", heads=""), "/run", "adapter")
    expect_msg(client, settings(dirs, method="retrieval", datastore="shipped"), "/run", "retrieval source")
