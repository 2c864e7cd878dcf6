"""Public mode's work = everything a request costs the one worker: the prompt's tokens count in the budget and
have a cap, a Tune is budgeted and takes the model's turn one pilot run at a time (Stop ends it), and the
shared auto preset is never tuned with a visitor's own draft."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from gradio_client import Client

import app as app_module
from appkit.run import presets
from test_app import cache_dir, expect_msg, free_port  # noqa: F401
from test_public_sessions import args

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]


@pytest.fixture(scope="module")
def public_url():
    demo = app_module.build_demo(app_module.EMBEDDED_TARGET, app_module.EMBEDDED_DRAFT, public=True)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    yield url
    demo.close()


def test_the_prompt_counts_in_the_work_budget_and_has_a_token_cap(public_url):
    """' x' is one token of the embedded tokenizer: 1,100 of them pass the 20,000-character cap but not the
    1,024-token one; 900 of them x 10 runs of a race pass the new-token budget but not the whole one."""
    c = Client(public_url, verbose=False)
    expect_msg(c, args(" x" * 1100, "greedy", max_new=1), "/run", "prompt", "1,100 tokens", "1,024")
    msg = expect_msg(c, args(" x" * 900, "greedy", max_new=8) + [["lookahead"], 5], "/race", "work budget")
    assert "900 prompt + 8 new tokens) x 10 runs" in msg, msg
    assert c.predict(*args(" x" * 1000, "greedy", max_new=2), api_name="/run")[2]  # under both: it runs


def _started(job, within: float = 60.0) -> None:
    t0 = time.monotonic()
    while job.status().code.name not in ("PROCESSING", "ITERATING", "FINISHED") and time.monotonic() - t0 < within:
        time.sleep(0.05)


def test_tune_takes_turns_with_other_visitors_and_stop_ends_it(public_url):
    """A's Tune pilots ~30 short runs (several seconds): B's 8-token run gets a turn between two of them, not
    after the whole Tune; A's Stop then ends the Tune between two pilot runs."""
    a, b = Client(public_url, verbose=False), Client(public_url, verbose=False)
    job = a.submit(*args("def f(x):\n", "lookahead"), api_name="/tune")
    _started(job)
    time.sleep(0.5)  # past its model load, into its pilot runs
    out = b.predict(*args("def short():\n", "greedy", max_new=8), api_name="/run")
    assert out[2] and not job.done(), "B's run waited for A's whole Tune"
    a.predict(api_name="/stop")
    with pytest.raises(Exception) as e:  # noqa: PT011 - the refusal reaches the client as an AppError
        job.result(timeout=120)
    assert "Tune stopped" in str(e.value)


def test_a_visitors_own_draft_never_tunes_the_shared_preset(tmp_path, cache_dir, monkeypatch):  # noqa: F811
    """A model with no shipped preset (a copy of the embedded target, whose shape the shipped CPU presets are made
    not to know here: they match by shape), so its first auto speculative run tunes one. A picks another draft
    (the target drafting for itself): the shape is tuned for A's session only; B, on the page's draft, tunes the
    shared one, from the model and the shipped prompts."""
    monkeypatch.setattr("decoding.tuning.device_presets.embedded_shape", lambda: None)
    target = tmp_path / "copied-target"
    shutil.copytree(app_module.EMBEDDED_TARGET, target)
    demo = app_module.build_demo(str(target), app_module.EMBEDDED_DRAFT, public=True)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    try:
        a, b = Client(url, verbose=False), Client(url, verbose=False)
        own = dict(target=target.name, preset="auto", draft=target.name, max_new=8)
        mine = a.predict(*args("def f(x):\n", "speculative", **own), api_name="/run")[1]
        assert "tuned in this session" in mine, mine
        assert not presets._path().exists() or "speculative" not in presets._path().read_text()
        again = a.predict(*args("def g(x):\n", "speculative", **own), api_name="/run")[1]
        assert "tuned in this session" in again, again
        theirs = b.predict(*args("def f(x):\n", "speculative", target=target.name, preset="auto", max_new=8),
                           api_name="/run")[1]
        assert "tuned on this device just now" in theirs, theirs
        assert "speculative" in presets._path().read_text()
    finally:
        demo.close()


def test_the_greedy_speed_table_is_the_visitors_own(public_url):
    """A's greedy run on a secret prompt: A's lookahead run on it is compared with it, B's on the same prompt is
    not (a shared table keyed by the prompt told B that someone had run it)."""
    a, b = Client(public_url, verbose=False), Client(public_url, verbose=False)
    secret = "def secret_51HxQ9Z(x):\n"
    assert a.predict(*args(secret, "greedy", max_new=8), api_name="/run")[2]
    mine = a.predict(*args(secret, "lookahead", max_new=8), api_name="/run")[1]
    theirs = b.predict(*args(secret, "lookahead", max_new=8), api_name="/run")[1]
    # B is told to run greedy first; A's run is set against A's greedy (a ratio, or on a busy machine the cost
    # model against greedy's measured step: both need A's greedy)
    no_greedy = "speed vs greedy: **not measured** (run greedy on this prompt"
    assert no_greedy not in mine and "greedy's" in mine and no_greedy in theirs, (mine, theirs)


def test_history_runs_counts_the_visitors_own_earlier_run(public_url):
    """The second retrieval run of a session drafts from the first: its config says 1 earlier run."""
    c = Client(public_url, verbose=False)
    counts = []
    for prompt in ("def first(x):\n", "def second(x):\n"):
        out = c.predict(*args(prompt, "retrieval", max_new=8), api_name="/run")
        counts.append(json.loads(Path(out[4]).read_text())["config"]["history_runs"])
    assert counts == [0, 1], counts
