"""A public Space is shared: one visitor's prompt must never reach another visitor. Two gradio_client sessions
against the app in public mode (the embedded models): A runs on a prompt holding a secret, B on its first
characters. Nothing of the secret may reach B: not its text, its trace download, its step view (the tree) or
its race. The same session, running B's prompt, does draft the secret (the control: the checks can fail).
Also: a race's repeats all start from the same state (no repeat drafts from an earlier one's output)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from gradio_client import Client

import app as app_module
from appkit.run.settings import FIELDS, Settings
from appkit.page.tables import display_name
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET, load
from test_app import cache_dir, free_port  # noqa: F401

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]

SECRET = "sk-live-51HxQ9ZqWv7Lm2Pt"
A_PROMPT = f"import os\n\nAPI_KEY = '{SECRET}'\n\n\ndef key():\n    return API_KEY\n"
B_PROMPT = "import sys\n\nAPI_KEY = 'sk-live"
STATEFUL = ["retrieval"]  # methods that keep state between runs (docs/public-mode.md): the suffix cache
OTHERS = ["greedy", "lookahead", "prompt_lookup", "jacobi", "speculative", "medusa", "eagle"]


@pytest.fixture(scope="module")
def url():
    demo = app_module.build_demo(EMBEDDED_TARGET, EMBEDDED_DRAFT, public=True)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs(demo))  # as served: the queue's admission per client too
    yield url
    demo.close()


@pytest.fixture(scope="module")
def tok():
    return load(EMBEDDED_TARGET)[1]


def args(prompt: str, method: str, **kw) -> list:
    s = Settings(target=display_name(EMBEDDED_TARGET), draft=display_name(EMBEDDED_DRAFT), prompt=prompt,
                 method=method, preset="manual", max_new=24, window=3, ngram=3, guesses=3, max_ngram=3,
                 num_tokens=8, draft_tokens=3, widths="2,2", budget=8, block=4)
    for k, v in kw.items():
        setattr(s, k, v)
    return [getattr(s, f) for f in FIELDS]


def leaked(out, tok, method: str = "retrieval") -> list[str]:
    """Where the secret shows in one /run answer: text, status, step view, trace download, drafted tokens."""
    msg, stats, text, html, path = out[:5]
    trace = json.loads(Path(path).read_text())
    found = [name for name, value in (("text", text), ("status", stats), ("step view", html),
                                      ("trace download", json.dumps(trace))) if "51HxQ9Z" in str(value)]
    own = set(trace["prompt_ids"]) | set(trace["output_ids"])
    drafted = {t for s in trace["steps"] for t in s.get("tokens", [])} | {int(k) for k in trace.get("vocab", {})}
    # the secret's multi-character tokens that B never wrote; a copying method drafts only what B's own text holds
    secret = {i for i in tok(SECRET)["input_ids"] if len(tok.decode([i])) > 1} - own
    if drafted & secret or (method == "retrieval" and drafted - own):
        found.append("drafted tokens")
    if "earlier_run" in json.dumps(trace) or (trace["config"].get("history_runs") or 0) > 0:
        found.append("an earlier run")
    return found


def test_a_secret_in_one_visitors_retrieval_prompt_never_reaches_another(url, tok):
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    assert a.session_hash != b.session_hash
    a.predict(*args(A_PROMPT, "retrieval"), api_name="/run")
    out = b.predict(*args(B_PROMPT, "retrieval"), api_name="/run")
    assert not out[0], out[0]
    assert leaked(out, tok) == []
    trace = json.loads(Path(out[4]).read_text())
    assert "history_runs" not in json.dumps(trace) or trace["config"]["history_runs"] == 0
    # B's race (retrieval beside greedy): its side-by-side views and tables hold none of it either
    race = b.predict(*args(B_PROMPT, "retrieval"), ["retrieval"], 1, api_name="/race")
    assert "51HxQ9Z" not in json.dumps(race, default=str)
    # the control: A's own session, on B's prompt, does draft the rest of the key from A's earlier run
    mine = a.predict(*args(B_PROMPT, "retrieval"), api_name="/run")
    assert "drafted tokens" in leaked(mine, tok) and "an earlier run" in leaked(mine, tok)
    steps = json.loads(Path(mine[4]).read_text())["steps"]
    assert any("earlier_run" in (s["info"].get("retrieval") or {}).get("drafted_from", []) for s in steps)


@pytest.mark.parametrize("method", STATEFUL + OTHERS)
def test_no_method_carries_one_visitors_prompt_into_another_session(url, tok, method):
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    a.predict(*args(A_PROMPT, method), api_name="/run")
    out = b.predict(*args(B_PROMPT, method), api_name="/run")
    assert not out[0], out[0]
    assert leaked(out, tok, method) == [], method


def test_every_repeat_of_a_race_starts_from_the_same_state(tok):
    """race_runs: retrieval's repeats draft the same trees (none from an earlier repeat's output), after a
    session's Run tab run (which they all read, frozen)."""
    from appkit.run.handlers import Prepared
    from appkit.race.race import race_runs
    from decoding import make_sampling
    from decoding.methods.retrieve.suffix_cache import History

    model, _ = load(EMBEDDED_TARGET)
    history = History()
    s = Settings(method="retrieval", datastore="")
    p = Prepared(s, A_PROMPT, 32, make_sampling(0.0, 0, 1.0, 0), model, tok, params={"retrieval": {}}, history=history)
    first = p.run("greedy")  # an earlier Run of this session on this prompt: every repeat reads it
    history.add(first.prompt_ids + first.output_ids)

    class Job:
        def report(self, _):
            pass

        def check(self, *a):
            pass

    runs = race_runs(p, ["retrieval", "prompt_lookup"], 3, Job())
    trees = [[(st.tokens, st.accepted, st.info["retrieval"].get("drafted_from")) for st in t.steps[1:]]
             for t in runs["retrieval"]]
    assert len(trees) == 3 and trees[0] == trees[1] == trees[2]
    assert len(history.runs) == 1 and history.pending is None  # the race joined nothing
    assert all(t.config["history_runs"] == 1 for t in runs["retrieval"])
    assert any("earlier_run" in (f or []) for tree in trees for _, _, f in tree)  # it did read the earlier run
