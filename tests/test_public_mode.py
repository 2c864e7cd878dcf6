"""A public Space, attacked through its API as a visitor would: crafted traces in Replay, server paths in the
heads field, a device of the visitor's choosing, and numbers that are not numbers. Each gets one message
naming the field (gr.Error to the client), and the server goes on serving."""
from __future__ import annotations

import json
import math

import pytest
from gradio_client import Client, handle_file

import app as app_module
from test_app import FIXTURES, cache_dir, dirs, expect_msg, free_port, reference, saved_trace, settings  # noqa: F401

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]


@pytest.fixture(scope="module")
def public(dirs, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("DECODESCOPE_PUBLIC", "1")
    demo = app_module.build_demo(dirs["target"], dirs["draft"])
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs(demo))  # as served: the queue's admission per client too
    yield Client(url, verbose=False)
    demo.close()
    mp.undo()


def test_heads_field_takes_the_shipped_names_only_and_never_looks_at_a_path(public, dirs):
    for path in ("/etc", "../../", "/root/.cache/x"):
        msg = expect_msg(public, settings(dirs, method="medusa", heads=path), "/run", "shipped heads only")
        assert path not in msg and "holds no heads" not in msg


def test_the_visitors_device_reaches_no_model(public, dirs):
    """device="cuda" on a CPU server: the target and the draft both load where the server decides."""
    out = public.predict(*settings(dirs, method="speculative", device="cuda", spec_mode="chain"), api_name="/run")
    assert out[2] == reference(dirs, "speculative", draft_tokens=3).text
    msg, info = public.predict(dirs["target"], dirs["draft"], "cuda", "auto", api_name="/load_models")
    assert "device **cpu**" in info and "not loaded" not in info and "torch" not in info.lower()


def raw_call(client: Client, api: str, body: str) -> str:
    """POST a JSON body as raw text (NaN, Infinity and 1e309 included: gradio_client refuses to encode them,
    an attacker's script does not) and return the event stream's text."""
    import httpx

    base = client.src.rstrip("/")
    r = httpx.post(f"{base}/gradio_api/call/{api}", content=body, headers={"content-type": "application/json"})
    r.raise_for_status()
    return httpx.get(f"{base}/gradio_api/call/{api}/{r.json()['event_id']}", timeout=120).text


@pytest.mark.parametrize("field,value,needle", [
    ("max_new", "NaN", "max new tokens"),
    ("max_new", "Infinity", "max new tokens"),
    ("max_new", "1e309", "max new tokens"),
    ("window", "true", "W window"),
    ("temperature", "-Infinity", "temperature"),
    ("top_p", "NaN", "top-p"),
    ("seed", "1e309", "seed"),
    ("confidence", "NaN", "draft cutoff"),
])
def test_numbers_that_are_not_numbers_name_the_field_and_its_range(public, dirs, field, value, needle):
    from appkit.run.settings import FIELDS

    method = "speculative" if field == "confidence" else "lookahead"
    args = settings(dirs, method=method)
    args[FIELDS.index(field)] = "@@"
    body = json.dumps({"data": args}).replace('"@@"', value)
    out = raw_call(public, "run", body)
    assert "event: error" in out and needle in out, out[-600:]
    assert "convert" not in out and "Overflow" not in out and "Traceback" not in out, out[-600:]
    assert public.predict(*settings(dirs, method="greedy"), api_name="/run")[2]  # and it goes on serving


def test_a_list_prompt_is_not_run_as_its_str(public, dirs):
    job = public.submit(*settings(dirs, prompt=["def f(x):", "return"]), api_name="/run")
    with pytest.raises(Exception) as e:
        job.result(timeout=120)
    assert "prompt" in str(e.value)


def test_crafted_traces_are_refused_in_replay_and_the_server_keeps_serving(public, tmp_path):
    good = saved_trace(FIXTURES / "lookahead.json")
    crafted = {
        "positions": ('"><img src=x onerror=alert(1)>', lambda d, v: d["steps"][1]["positions"].__setitem__(0, v),
                      "steps[1].positions[0] = a string of 30 characters: expected integer"),
        "kv_len": ("</title><img src=x onerror=alert(1)>", lambda d, v: d["steps"][1].__setitem__("kv_len", v),
                   "steps[1].kv_len"),
        "index": ("1' onmouseover='alert(1)' x='", lambda d, v: d["steps"][1].__setitem__("index", v), "steps[1].index"),
        "cycle": (5, lambda d, v: d["steps"][1].__setitem__("parents", [v] * len(d["steps"][1]["parents"])),
                  "is not before node 0"),
        "tokens": (None, lambda d, v: d["steps"][1].__setitem__("accepted", [5] * 100_000), "100,000 entries"),
    }
    for name, (value, mutate, needle) in crafted.items():
        d = json.loads(json.dumps(good))
        mutate(d, value)
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(d))
        out = public.predict(handle_file(str(f)), None, api_name="/replay")
        assert needle in out[0] and "<img" not in out[0] and out[2] == "", (name, out[0])
    (tmp_path / "deep.json").write_text("[" * 5_000 + "]" * 5_000 + " " * 200_000)
    assert "nested deeper" in public.predict(handle_file(str(tmp_path / "deep.json")), None, api_name="/replay")[0]
    (tmp_path / "huge.json").write_text('{"schema": ' + "9" * 100_000 + "}")
    assert "a number with" in public.predict(handle_file(str(tmp_path / "huge.json")), None, api_name="/replay")[0]
    msg, stats, html, text = public.predict(handle_file(str(FIXTURES / "lookahead.json")), None, api_name="/replay")
    assert not msg and "ds-stepper" in html and text
