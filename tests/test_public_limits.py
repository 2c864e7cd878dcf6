"""Public mode's limits, as a visitor meets them: names off the allow list (the same answer whether a path
exists or not, before any file is looked at), no server path in /config, profile files bounded on disk, one
running and one queued job per session, and a work budget per request."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

import app as app_module
from appkit.public.limits import Limits
from test_app import cache_dir, expect_msg, free_port  # noqa: F401
from test_public_sessions import args

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]
ROOT = Path(__file__).resolve().parent.parent
EXISTING = ["assets/../../../../etc/passwd", "/etc/passwd", str(ROOT / "assets" / "heads"), "./assets/target", "/"]
MISSING = ["assets/../../../../etc/no-such-file", "/etc/no-such-file", str(ROOT / "no-such-model"), "./no/such", "/nope"]


def test_names_off_the_allow_list_get_one_answer_and_no_file_is_looked_at(monkeypatch):
    lim = Limits(public=True)
    looked: list[str] = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (looked.append(str(p)), real_stat(p, *a, **k))[1])
    answers = set()
    for name in EXISTING + MISSING + ["someone/secret-model"]:
        with pytest.raises(ValueError) as e:
            lim.model_name(name, "target")
        answers.add(str(e.value))
    assert len(answers) == 1, answers
    assert looked == [], looked
    assert "allow list" in answers.pop()


def test_existing_and_missing_paths_are_refused_alike_through_the_api():
    demo = app_module.build_demo(app_module.EMBEDDED_TARGET, app_module.EMBEDDED_DRAFT, public=True)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    try:
        c = Client(url, verbose=False)
        msgs = {expect_msg(c, args("def f():", "greedy", target=name), "/run", "allow list")
                for name in ("assets/../../../../etc/passwd", "assets/../../../../etc/no-such-file")}
        assert len(msgs) == 1, msgs
        loaded = {c.predict(name, "assets/draft", "cpu", "fp32", api_name="/load_models")[0]
                  for name in ("/etc/passwd", "/etc/no-such-file")}
        assert len(loaded) == 1, loaded
    finally:
        demo.close()


def absolute_paths(text: str) -> list[str]:
    """Server paths in a page's config: this checkout, the cache, the temp folder, the home folder."""
    needles = {str(ROOT), os.environ["DECODESCOPE_CACHE"], tempfile.gettempdir() + "/", str(Path.home()) + "/"}
    return [text[max(0, m.start() - 60):m.end() + 40] for n in needles for m in re.finditer(re.escape(n), text)]


def test_config_of_a_public_page_shows_no_server_path(monkeypatch, tmp_path):
    """The default model is not cached (its status names the cache folder): the page says so without the path."""
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DECODESCOPE_NO_FETCH", "1")
    demo = app_module.build_demo(public=True)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    try:
        cfg = httpx.get(url.rstrip("/") + "/config", timeout=60).text
    finally:
        demo.close()
    assert "not in the cache" in cfg  # the status line is there
    assert absolute_paths(cfg) == []


def test_profile_downloads_stay_under_the_disk_cap_after_10_profiles(monkeypatch, tmp_path):
    """Each profile writes its Perfetto files, traces and report, and Gradio keeps a copy: after 10 profiles
    the bytes on disk (ours + Gradio's cache) are at most the cap plus the newest request's files (twice: ours
    and Gradio's copy), the oldest having gone first, and the newest downloads are still there."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    demo = app_module.build_demo(app_module.EMBEDDED_TARGET, app_module.EMBEDDED_DRAFT, public=True)
    dl = demo.decodescope["handlers"].downloads
    dl.root = tmp_path / "downloads"
    assert dl.others == [tmp_path / "gradio"]
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    try:
        c = Client(url, verbose=False)
        first = c.predict(*args("def f(x):\n    return x\n", "lookahead", max_new=8), api_name="/profile")
        one = dl.used()  # one profile: our files and Gradio's copy
        assert one > 0 and len(first[5]) >= 4
        dl.cap = int(1.5 * one)
        written = one
        for i in range(9):
            out = c.predict(*args(f"def f{i}(x):\n    return x + {i}\n", "lookahead", max_new=8), api_name="/profile")
            written += one
            assert not out[0] or isinstance(out[0], dict), out[0]  # no message (an update without a value)
            assert dl.used() <= dl.cap + one * 1.5, (i, dl.used(), dl.cap)
        assert written > 6 * dl.cap  # without the cap the disk would hold all of it
        assert all(Path(f).is_file() for f in out[5])  # the newest downloads are kept
    finally:
        demo.close()


LONG = ["lookahead", "prompt_lookup", "jacobi", "retrieval"]


@pytest.fixture(scope="module")
def public_url():
    demo = app_module.build_demo(app_module.EMBEDDED_TARGET, app_module.EMBEDDED_DRAFT, public=True)
    # these tests' visitors stand for people at different addresses but all call from 127.0.0.1: the limit
    # per address is off here (tests/test_public_clients.py tests it with two loopback addresses)
    demo.decodescope["handlers"].turns.client_jobs = None
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    yield url
    demo.close()


def test_a_session_has_one_running_and_one_queued_job_and_a_third_is_refused(public_url):
    """Three jobs from one session at once (two races, a run): one runs, one waits, the third is refused in
    one line, whichever reached the server last; the other two finish and the session goes on."""
    c = Client(public_url, verbose=False)
    jobs = [c.submit(*args(f"def f{i}(x):\n", "greedy", max_new=48), LONG, 1, api_name="/race") for i in range(2)]
    jobs.append(c.submit(*args("def g():\n", "greedy", max_new=8), api_name="/run"))
    refused, done = [], []
    for j in jobs:
        try:
            done.append(j.result(timeout=300))
        except Exception as e:  # noqa: BLE001 - the refusal reaches the client as an error
            refused.append(str(e))
    assert len(refused) == 1 and "one job at a time" in refused[0], refused
    assert len(done) == 2 and all(out[1] or out[2] for out in done)
    assert c.predict(*args("def g():\n", "greedy", max_new=8), api_name="/run")[2]  # and the session goes on


def test_a_new_visitors_short_run_goes_before_six_long_jobs_next_repeats(public_url):
    """Six visitors queue a race each (5 runs of 48 tokens); a seventh asks for 8 tokens of greedy. Its run
    gets the next turn on the model, not the end of the queue: at most one race has finished when it has."""
    long = [Client(public_url, verbose=False) for _ in range(6)]
    jobs = [c.submit(*args(f"def f{i}(x):\n", "greedy", max_new=48), LONG, 1, api_name="/race")
            for i, c in enumerate(long)]
    victim = Client(public_url, verbose=False)
    out = victim.predict(*args("def short():\n", "greedy", max_new=8), api_name="/run")
    finished = sum(j.done() for j in jobs)
    assert out[2] and finished <= 1, finished
    for j in jobs:
        j.result(timeout=600)


def test_work_budget_and_emulated_half_precision_are_refused_in_one_line(public_url):
    c = Client(public_url, verbose=False)
    methods = ["lookahead", "prompt_lookup", "speculative", "jacobi", "medusa", "eagle", "retrieval"]
    msg = expect_msg(c, args("def f():\n", "greedy", max_new=256) + [methods, 10], "/race", "work budget")
    assert "prompt + 256 new tokens) x 80 runs" in msg and "8,192" in msg
    assert c.predict(*args("def f():\n", "greedy", max_new=16), methods, 2, api_name="/race")[1]  # < 8,192: allowed
    import torch
    if not torch.cuda.is_available():
        expect_msg(c, args("def f():\n", "greedy", dtype="fp16"), "/run", "dtype", "fp32")


def test_a_visitors_tuning_stays_in_that_visitors_session(public_url, cache_dir):  # noqa: F811
    """Tune in session A: A's auto runs use it; B's keep the shipped preset, and nothing is written for the device."""
    from appkit.run import presets
    a, b = Client(public_url, verbose=False), Client(public_url, verbose=False)
    line = a.predict(*args("def f(x):\n", "lookahead"), api_name="/tune")[1]
    assert "this session's auto preset" in line, line
    assert not presets._path().exists() or "lookahead" not in presets._path().read_text()
    mine = a.predict(*args("def f(x):\n", "lookahead", preset="auto"), api_name="/run")[1]
    theirs = b.predict(*args("def f(x):\n", "lookahead", preset="auto"), api_name="/run")[1]
    assert "tuned in this session" in mine and "tuned in this session" not in theirs, (mine, theirs)
