"""The capture-safety checker (decoding/fast/capture_check.py) on CPU: it flags what breaks or silently
corrupts a CUDA graph (host syncs, data-dependent shapes, Python data and RNG inside the region,
tensors read or written that are not fixed buffers), and every method's graph-path buckets are clean
(only the allowed findings: the graph outputs, copied right after the replay)."""
from __future__ import annotations

import pytest
import torch

from conftest import hf_greedy, tiny
from decoding import generate
from decoding.engine.core import Core, core_options
from decoding.fast import capture_check
from decoding.fast.capture_check import check_callable, checking, summary, unexplained
from gpu_cases import CASES, PROMPT, Models


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return Models(tmp_path_factory.mktemp("heads"))


def kinds(fn, static=()):
    with torch.inference_mode():
        return {(f["kind"], f["op"]) for f in check_callable(fn, list(static), "cpu")[1]}


def test_checker_flags_what_breaks_a_graph():
    x, buf = torch.arange(8.0), torch.zeros(8)
    assert ("sync", "item") in kinds(lambda: buf.add_(x.sum().item()), [buf])
    assert ("sync", "tolist") in kinds(lambda: (buf.add_(1), x.tolist())[0], [buf])
    assert ("sync", "is_nonzero") in kinds(lambda: buf.add_(1) if bool(x[1]) else buf, [buf])
    assert ("dynamic", "nonzero") in kinds(lambda: buf.nonzero(), [buf])
    assert ("dynamic", "index") in kinds(lambda: buf[buf > 0], [buf])
    assert ("dynamic", "masked_select") in kinds(lambda: buf.masked_select(buf > 0), [buf])
    assert ("host-data", "lift_fresh") in kinds(lambda: buf + torch.tensor([1.0] * 8), [buf])
    assert ("rng", "uniform_") in kinds(lambda: buf.uniform_(), [buf])
    with torch.inference_mode():
        read = check_callable(lambda: buf.add_(x), [buf], "cpu")[1]          # x: not a fixed buffer
        write = check_callable(lambda: x.add_(1), [buf], "cpu")[1]           # a write outside them
    assert [f["detail"].split()[0] for f in read if f["kind"] == "foreign"] == ["reads"]
    assert [f["detail"].split()[0] for f in write if f["kind"] == "foreign"] == ["writes"]
    assert ("output", "output 0") in kinds(lambda: buf * 2, [buf])          # lives in the graph pool
    assert kinds(lambda: buf.mul_(2).add_(1), [buf]) == set()               # clean: in place on a fixed buffer


def test_a_step_reading_a_fresh_tensor_is_caught(monkeypatch):
    """A bucket whose region reads a tensor made per step (here: the rows read, as a fresh upload instead
    of the io buffer) would replay the first step's rows forever: the checker names it."""
    from decoding.fast.static_cache import StaticKV
    real = StaticKV.bucket_args

    def fresh_rows(self, key):
        a = real(self, key)
        return a[:3] + ((a[3].clone(),) if torch.is_tensor(a[3]) else (a[3],))

    monkeypatch.setattr(StaticKV, "bucket_args", fresh_rows)
    model = tiny("llama", seed=3)
    with core_options(fixed=True), checking() as report:
        core = Core(model, static=True)
        core.prefill(PROMPT)
        core.commit(list(range(len(PROMPT))))
        core.forward([1, 2, 3, 4, 5], [-1, 0, 1, 0, 3], rows=[0, 2])
    bad = [f for fs in report["buckets"].values() for f in unexplained(fs)]
    assert any(f["kind"] == "foreign" for f in bad), report


@pytest.mark.parametrize("case", list(CASES))
def test_every_method_has_capture_safe_buckets(models, case):
    """The graph path's data path (fixed mode) for every method: each bucket a run uses, run once more as
    a capture would, has no finding outside capture_check.ALLOWED (each allowed one says why); output
    still HF greedy."""
    with core_options(fixed=True), checking() as report:
        tr = generate(models.target, PROMPT, models.drafter(case), max_new_tokens=16, static=True)
    assert tr.output_ids == hf_greedy(models.target, PROMPT, 16)
    s = summary(report)
    used = {b.removeprefix("draft ") for b in tr.config["graphs"]["used"]}  # target and draft buckets
    assert s and set(s) == used, (s, tr.config["graphs"])
    assert all(not b["unexplained"] for b in s.values()), s
    assert all(a in {f"{k} {o}" for k, o in capture_check.ALLOWED} for b in s.values() for a in b["allowed"])
    if case == "lookahead-W15N5G15":
        assert any(name.startswith("256") or name.startswith("128") for name in s), s
