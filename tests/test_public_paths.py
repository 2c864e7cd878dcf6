"""A public page shows names, never server paths: the model lists in /, /config and /gradio_api/info, and a
refusal that lists the allow list (the embedded models' absolute paths were dropdown choices and ended every
refusal of an unlisted model)."""
from __future__ import annotations

import httpx
import pytest
from gradio_client import Client

import app as app_module
from decoding.models import DEFAULT_MODEL
from test_app import cache_dir, free_port  # noqa: F401
from test_public_limits import absolute_paths
from test_public_sessions import args

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning")]


def test_the_public_page_and_its_refusals_name_models_without_server_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DECODESCOPE_NO_FETCH", "1")
    # the default model by name, as on a Space that has it: the embedded pair joins the allow list
    demo = app_module.build_demo(DEFAULT_MODEL, public=True)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs(demo))
    try:
        pages = {route: httpx.get(url.rstrip("/") + route, timeout=60).text
                 for route in ("/", "/config", "/gradio_api/info")}
        c = Client(url, verbose=False)
        job = c.submit(*args("def f():\n", "greedy", target="someone/secret-model"), api_name="/run")
        with pytest.raises(Exception) as e:  # noqa: PT011 - the refusal reaches the client as an AppError
            job.result(timeout=120)
        pages["refusal"] = str(e.value)
    finally:
        demo.close()
    assert "allow list" in pages["refusal"]
    assert {k: absolute_paths(v) for k, v in pages.items() if absolute_paths(v)} == {}
