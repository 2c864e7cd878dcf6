"""What crosses ZeroGPU's boundary: every @spaces.GPU event returns host data only (ZeroGPU pickles the
return value back from its forked worker, and a CUDA tensor would need the GPU to unpickle), and a failure
reaches the visitor as a message or gr.Error (any other exception shows as a generic error there).

The real fork needs a ZeroGPU Space; here each event's function (the very callable app.py hands to
spaces.GPU) runs in-process on tiny models, and its outputs go through pickle and a walk for tensors."""
from __future__ import annotations

import pickle

import gradio as gr
import pytest
import torch

from conftest import save_tiny_dir

import app as app_module
from appkit.run.settings import FIELDS, Settings

GPU_EVENTS = ("run", "race", "profile", "sweep", "tune", "load_models")


def tensors_in(x, seen=None) -> list[str]:
    """Paths of torch tensors anywhere inside x (containers, dicts, objects' __dict__)."""
    seen = set() if seen is None else seen
    if id(x) in seen:
        return []
    seen.add(id(x))
    if isinstance(x, torch.Tensor):
        return [type(x).__name__]
    if isinstance(x, dict):
        items = x.items()
    elif isinstance(x, (list, tuple, set)):
        items = enumerate(x)
    elif hasattr(x, "__dict__") and not isinstance(x, type):
        items = vars(x).items()
    else:
        return []
    return [f"{k}.{p}" for k, v in items for p in tensors_in(v, seen)]


def last(result):
    """A handler's final value: generators (streaming events) yield until the end."""
    if hasattr(result, "__next__"):
        out = None
        for out in result:
            pass
        return out
    return result


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zgpu")
    t, d = save_tiny_dir(root / "target", "llama", seed=0), save_tiny_dir(root / "draft", "llama", seed=1)
    return app_module.build_demo(default_target=t, default_draft=d, public=False), t, d


def values(target, draft, **kw) -> list:
    s = Settings(target=target, draft=draft, prompt="def f ( x ) : return x", method="lookahead", preset="manual",
                 max_new=8, window=2, ngram=3, guesses=2, max_ngram=3, num_tokens=4, draft_tokens=2, widths="2,1",
                 budget=4)
    for k, v in kw.items():
        setattr(s, k, v)
    return [getattr(s, f) for f in FIELDS]


EXTRA = {"race": [["greedy", "lookahead"], 1], "sweep": [[3], [1], 8, [], []]}


@pytest.mark.parametrize("event", GPU_EVENTS)
def test_gpu_events_return_host_data_only(demo, event):
    blocks, target, draft = demo
    fn = {f.api_name: f for f in blocks.fns.values()}[event]
    args = [target, draft, "cpu", "float32"] if event == "load_models" else values(target, draft) + EXTRA.get(event, [])
    if fn.fn.__code__.co_varnames[:1] == ("request",) or "request" in getattr(fn.fn, "__signature__", "").__str__():
        args = [None] + args
    out = last(fn.fn(*args))
    assert out is not None
    assert tensors_in(out) == [], f"{event} returns tensors: {tensors_in(out)[:3]}"
    pickle.loads(pickle.dumps(out))  # what ZeroGPU does with it


def test_a_failing_event_is_a_message_not_an_exception(demo):
    blocks, target, draft = demo
    fn = {f.api_name: f for f in blocks.fns.values()}["run"]
    try:
        out = last(fn.fn(None, *values("/no/such/model", draft)))
    except gr.Error as e:  # the one exception type ZeroGPU passes through as it is
        assert "does not exist" in str(e)
        return
    text = " ".join(str(o) for o in out if isinstance(o, str))
    assert "does not exist" in text
    pickle.loads(pickle.dumps(out))
