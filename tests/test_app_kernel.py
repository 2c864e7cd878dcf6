"""The app's CPU kernel selector, end to end through a launched server (gradio_client): a run on the int8 kernel
says so in its result line and its trace, returns the int8 mode's greedy tokens, and the model cache keeps the
two kernels' copies apart (their packed weights differ); a kernel that does not exist is refused in one message."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from gradio_client import Client
from transformers import AutoModelForCausalLM

import app as app_module
from appkit.models.model_cache import ModelCache
from appkit.run.settings import FIELDS, Settings
from conftest import save_tiny_dir
from decoding import load, run
from test_app import free_port
from test_cpu_blocks import quantize_model

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]
PROMPT = "def x ( y ) : return y + 1 def x ( y ) :"


@pytest.fixture(scope="module")
def blocks_dir(tmp_path_factory):
    """A tiny model whose Linears are exactly ggml blocks (the int8 kernel runs block weights only)."""
    folder = save_tiny_dir(tmp_path_factory.mktemp("kernel") / "tiny", seed=3)
    model = AutoModelForCausalLM.from_pretrained(folder)
    quantize_model(model, lambda name: "q8_0" if name == "lm_head" else "q4_1").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def served(blocks_dir, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("DECODESCOPE_CACHE", str(tmp_path_factory.mktemp("cache")))
    cache = ModelCache()
    demo = app_module.build_demo(blocks_dir, blocks_dir, public=False, cache=cache)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(),
                            quiet=True, **app_module.launch_kwargs())
    yield Client(url, verbose=False), cache
    demo.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def inputs(folder: str, **kw) -> list:
    s = Settings(target=folder, draft=folder, prompt=PROMPT, method="prompt_lookup", preset="manual", max_new=16,
                 max_ngram=3, num_tokens=8)
    for k, v in kw.items():
        setattr(s, k, v)
    return [getattr(s, f) for f in FIELDS]


def test_a_run_on_the_int8_kernel_says_int8_and_returns_that_modes_greedy(served, blocks_dir):
    client, cache = served
    want = {k: run(*load(blocks_dir, device="cpu", layout="packed", kernel=k), PROMPT, "greedy", max_new_tokens=16,
                   trace=False).output_ids for k in ("fp32", "int8")}
    assert want["int8"] != want["fp32"]  # this model's int8 greedy leaves the float32 one: the test can tell them
    for kernel in ("int8", "fp32"):
        msg, stats, text, html, path = client.predict(*inputs(blocks_dir, kernel=kernel), api_name="/run")
        assert msg == "", msg
        assert f"{kernel} kernel" in stats and f"{'fp32' if kernel == 'int8' else 'int8'} kernel" not in stats
        tr = json.loads(Path(path).read_text())
        assert tr["model"]["cpu_kernel"]["kernel"] == kernel
        assert tr["output_ids"] == want[kernel], kernel
    assert {key[3] for key in cache._models} == {"fp32", "int8"}  # two copies, keyed by kernel
    again = client.predict(*inputs(blocks_dir, kernel="int8"), api_name="/run")
    assert json.loads(Path(again[4]).read_text())["output_ids"] == want["int8"] and len(cache._models) == 2
    msg, info = client.predict(blocks_dir, blocks_dir, "auto", "auto", "int8", api_name="/load_models")
    assert "**int8** CPU kernel" in info, info


def test_an_unknown_kernel_is_refused_in_one_message(served, blocks_dir):
    """Through the API: the page's choice list refuses it (the client sees one error naming the choices);
    and the settings check says the same for any caller that reaches it without the page (ZeroGPU's worker)."""
    from gradio_client.exceptions import AppError
    from appkit.public.limits import Limits
    from appkit.run.settings import check_common
    client, cache = served
    with pytest.raises(AppError, match="int4") as e:
        client.predict(*inputs(blocks_dir, kernel="int4"), api_name="/run")
    assert "fp32" in str(e.value) and "int8" in str(e.value)
    assert "int4" not in {key[3] for key in cache._models}
    problems: list[str] = []
    check_common(Settings(prompt=PROMPT, kernel="int4"), Limits(public=False), problems)
    assert problems == ["**CPU kernel** is one of fp32, int8, got 'int4'"]
