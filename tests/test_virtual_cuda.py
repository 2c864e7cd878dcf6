"""Every method on the virtual CUDA device (decoding/testing/virtual_cuda.py), through the path a CUDA user
gets: the model moved with .to("cuda"), the static cache, graph buckets captured by the emulated graph.
Each run must mix no devices (a mismatch raises), capture every bucket it used, and give the ids of the
same run on the CPU; host reads (and blocking uploads, which drain the stream as a read does) per decode
step are counted: at most 2 per greedy step for every method, and per sampled step for all but staged
trees (recorded in SAMPLED_READS). Mutations show that the
device catches a torch.arange without device=, a mask built on the host and a .item() inside a captured
region, each named by file and line."""
from __future__ import annotations

import copy
import inspect
import os
from pathlib import Path

import pytest
import torch

from conftest import hf_greedy
from decoding import Sampling, generate
from decoding.testing import virtual_cuda as vc_mod
from decoding.fast.graphs import emulated_graphs
from decoding.fast.static_cache import StaticKV
from decoding.testing.virtual_cuda import DeviceMismatch, virtual_cuda
from gpu_cases import CASES, PROMPT, Models, heads_dir

N = 12
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SAMPLED = Sampling(0.8, top_k=20, seed=3)
# host reads per greedy decode step (trace off): at most 2 for every method, the step's argmax and one read
# of the whole draft (draft models, EAGLE and dynamic trees chain their levels on the device on CUDA)
READS = 2
# Sampled steps: verification walks the tree on the device and is read once with the argmax (verify.walk),
# and speculative chains, trees, dynamic trees and EAGLE draw their levels on the device from host uniforms
# (one read of the draft). Above the goal where drafts are still drawn with the host's generator, one read
# per level: staged trees (stage 2's checks). Recorded, so that no read is added unseen; methods not listed
# are held to the goal (these 12-token runs).
SAMPLED_READS = {"staged": 4}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """CPU models per dtype and their virtual-CUDA copies (moved once, as a user's model.to("cuda")); heads
    and adapters made for each dtype's target (their fingerprint names the weights). The CPU GEMM kernel is
    off: its build is not what this file tests, and the CPU rows compare with the device's F.linear."""
    from decoding.methods.self_draft.self_spec_adapter import new_adapter, save_adapter
    tmp = tmp_path_factory.mktemp("vcuda")
    gemm = os.environ.get("DECODESCOPE_CPU_GEMM")
    os.environ["DECODESCOPE_CPU_GEMM"] = "0"
    m = Models(tmp)
    out = {}
    for name, dtype in DTYPES.items():
        cpu = copy.copy(m)
        cpu.target, cpu.draft = copy.deepcopy(m.target).to(dtype), copy.deepcopy(m.draft).to(dtype)
        cpu.heads = {k: heads_dir(cpu.target, k, tmp / name / k) for k in ("medusa", "eagle")}
        layer, cfg = new_adapter(cpu.target, 1)
        save_adapter(layer, cfg, tmp / name / "adapter")
        cpu.adapter = str(tmp / name / "adapter")
        dev = copy.copy(cpu)
        with virtual_cuda():
            dev.target, dev.draft = copy.deepcopy(cpu.target).to("cuda"), copy.deepcopy(cpu.draft).to("cuda")
        out[name] = (cpu, dev)
    yield out
    if gemm is None:
        os.environ.pop("DECODESCOPE_CPU_GEMM", None)
    else:
        os.environ["DECODESCOPE_CPU_GEMM"] = gemm


def per_step_reads(vc, steps: list) -> object:
    """step_context that files the syncs of each step."""
    class Mark:
        def __enter__(self):
            self.n = vc.mark()

        def __exit__(self, *exc):
            steps.append(vc.since(self.n))
    return lambda index, kind: Mark()


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(CASES))
def test_every_method_runs_exact_on_the_virtual_cuda_device(models, case, dtype, sampled, record_property):
    from decoding.methods.retrieve.suffix_cache import HISTORY
    cpu, dev = models[dtype]
    sampling = SAMPLED if sampled else Sampling()
    HISTORY.commit_pending()  # retrieval drafts from earlier runs of the process: both runs start from none
    HISTORY.clear()
    with emulated_graphs():
        ref = generate(cpu.target, PROMPT, cpu.drafter(case), max_new_tokens=N, sampling=sampling, static=True,
                       trace=False)
    steps: list = []
    HISTORY.commit_pending()
    HISTORY.clear()
    with virtual_cuda() as vc:
        tr = generate(dev.target, PROMPT, dev.drafter(case), max_new_tokens=N, sampling=sampling, trace=False,
                      step_context=per_step_reads(vc, steps))
    g = tr.config["graphs"]
    assert tr.config["static"] and g["on"] and not g["failed"] and set(g["used"]) <= set(g["captured"]), g
    assert tr.output_ids == ref.output_ids, f"{case} {dtype} sampled={sampled}: virtual CUDA != CPU"
    if dtype == "fp32" and not sampled:
        assert tr.output_ids == hf_greedy(cpu.target, PROMPT, N)
    worst = max(steps[1:], key=len)
    record_property("host_reads", f"{case} {dtype} {'sampled' if sampled else 'greedy'}: max {len(worst)} "
                                  f"per step: {', '.join(map(str, worst))}")
    assert len(worst) <= (SAMPLED_READS.get(case, READS) if sampled else READS), [str(s) for s in worst]
    assert vc.uploads["pinned"] > 0  # the engine's uploads go through pinned staging on CUDA


@pytest.mark.parametrize("case,sampled", [("dynamic", False), ("eagle", False), ("chain", True), ("tree", True),
                                          ("eagle", True)],
                         ids=["dynamic", "eagle", "chain-sampled", "tree-sampled", "eagle-sampled"])
def test_the_read_count_sees_a_read_per_draft_level(models, case, sampled, monkeypatch):
    """The count can fail: with the levels forced back to one host read each (DEVICE_DRAFT=0, the CPU's
    path; sampled: children drawn with the host's generator), the same run on the device exceeds the goal
    of 2, each read named by its line."""
    from decoding.methods.draft_model import draft_tree
    monkeypatch.setattr(draft_tree, "DEVICE_DRAFT", False)
    cpu, dev = models["fp32"]
    steps: list = []
    with virtual_cuda() as vc:
        tr = generate(dev.target, PROMPT, dev.drafter(case), max_new_tokens=N, trace=False,
                      sampling=SAMPLED if sampled else Sampling(), step_context=per_step_reads(vc, steps))
    assert len(tr.output_ids) == N and (sampled or tr.output_ids == hf_greedy(cpu.target, PROMPT, N))
    worst = max(steps[1:], key=len)
    assert len(worst) > READS and all(s.kind == "copy" and ".py:" in s.where for s in worst), list(map(str, worst))


def test_a_traced_run_reads_the_targets_tree_probabilities_and_an_untraced_one_does_not(models):
    """medusa's tree view (target_prob) costs a host read on CUDA: taken when tracing, skipped without.
    The read lives in the tree drafters' shared record (methods/tree_verdict.py)."""
    cpu, dev = models["fp32"]
    reads = {}
    for trace in (True, False):
        steps: list = []
        with virtual_cuda() as vc:
            tr = generate(dev.target, PROMPT, dev.drafter("medusa"), max_new_tokens=N, trace=trace,
                          step_context=per_step_reads(vc, steps))
        reads[trace] = [s for step in steps[1:] for s in step if s.where.startswith("methods/tree_verdict.py")]
        if trace:
            assert all(st.info["tree"]["target_prob"][1] is not None for st in tr.steps[1:] if "tree" in st.info)
    assert reads[True] and not reads[False]


def test_the_profilers_step_runs_on_the_virtual_device(models, tmp_path):
    """profiling.profile_run on CUDA: StepClock's CUDA events and memory readings, the run exact."""
    from profiling.profiler import profile_run
    cpu, dev = models["fp32"]
    with virtual_cuda():
        tr, prof = profile_run(dev.target, None, PROMPT, "lookahead", max_new_tokens=N, window=4, ngram=3,
                               guesses=4, perfetto_path=tmp_path / "p.json", measure_peaks=False)
    assert tr.output_ids == hf_greedy(cpu.target, PROMPT, N)
    assert tr.config["graphs"]["on"] and not tr.config["graphs"]["failed"]
    assert prof["memory"]["kind"] == "cuda_allocator"


# ---------------------------------------------------------------- mutations: what the device must catch

def _line(fn, marker: str) -> str:
    """'tests/test_virtual_cuda.py:N' of the line of fn holding `marker`."""
    src, start = inspect.getsourcelines(fn)
    n = next(i for i, text in enumerate(src) if marker in text)
    return f"tests/{Path(__file__).name}:{start + n}"


def test_catches_an_arange_without_device(models, monkeypatch):
    cpu, dev = models["fp32"]
    fill = StaticKV._fill_mask

    def fill_mask(self, mask, vis, length, start, q):
        fill(self, mask, vis, length, start, q)
        cols = torch.arange(mask.shape[-1])  # made: forgot device=
        mask[0, 0, 0].add_(cols, alpha=0)  # used

    monkeypatch.setattr(StaticKV, "_fill_mask", fill_mask)
    monkeypatch.setitem(dev.target.__dict__, "_decodescope_static_pool", [])
    with virtual_cuda(), pytest.raises(DeviceMismatch) as e:
        generate(dev.target, PROMPT, max_new_tokens=4)
    assert _line(fill_mask, "# used") in str(e.value) and _line(fill_mask, "# made") in str(e.value)
    with emulated_graphs():  # the same mutation passes on the CPU: only the device sees it
        assert generate(cpu.target, PROMPT, max_new_tokens=4, static=True).output_ids


def test_catches_a_mask_built_on_the_host(models, monkeypatch):
    cpu, dev = models["fp32"]
    forward = StaticKV._forward

    def host_mask_forward(self, io, mask, kv, keep, fn=None, hid=None):
        host = torch.zeros(mask.shape, dtype=mask.dtype)  # the mask built on the host
        host.masked_fill_(torch.ones(mask.shape, dtype=torch.bool).triu(1 + mask.shape[-1] - mask.shape[-2]),
                          torch.finfo(mask.dtype).min)
        return forward(self, io, host, kv, keep, fn, hid)

    monkeypatch.setattr(StaticKV, "_forward", host_mask_forward)
    monkeypatch.setitem(dev.target.__dict__, "_decodescope_static_pool", [])  # no bucket captured earlier
    with virtual_cuda(), pytest.raises(DeviceMismatch) as e, pytest.warns(UserWarning, match="capture failed"):
        generate(dev.target, PROMPT, max_new_tokens=4)
    assert _line(host_mask_forward, "# the mask built on the host") in str(e.value)


def test_catches_an_item_inside_a_captured_region(models, monkeypatch):
    cpu, dev = models["fp32"]
    forward = StaticKV._forward

    def reading_forward(self, io, mask, kv, keep, fn=None, hid=None):
        if int(io[0, 0].item()) < 0:  # a host read in the region
            raise AssertionError
        return forward(self, io, mask, kv, keep, fn, hid)

    monkeypatch.setattr(StaticKV, "_forward", reading_forward)
    monkeypatch.setitem(dev.target.__dict__, "_decodescope_static_pool", [])  # no bucket captured earlier
    where = _line(reading_forward, "# a host read in the region")
    with virtual_cuda() as vc, pytest.warns(UserWarning, match="capture failed"):
        tr = generate(dev.target, PROMPT, max_new_tokens=4)
    failed = tr.config["graphs"]["failed"]
    assert failed and all(where in err and "sync" in err for err in failed.values()), failed
    assert any(s.where == where for s in vc.syncs)  # counted as a host read with its caller too
    assert tr.output_ids == hf_greedy(cpu.target, PROMPT, 4)  # the buckets ran eagerly: same tokens


def test_numpy_of_a_device_tensor_is_refused_as_on_cuda():
    with virtual_cuda():
        t = torch.ones(3, device="cuda")
        with pytest.raises(TypeError, match="Use Tensor.cpu"):
            t.numpy()
        assert torch.cuda.is_available() and t.device.type == "cuda"
    assert vc_mod.active() is None and torch.cuda.is_available() is False


def test_a_model_moved_to_cuda_after_a_cpu_run_gets_a_cache_on_its_device():
    """The cache pool lives on the model: after a static run on the CPU, model.to("cuda") (or to bf16) must
    not be handed the CPU (or fp32) cache it left behind."""
    from conftest import tiny
    model = tiny("llama", seed=4)
    want = hf_greedy(model, PROMPT, 8)
    with emulated_graphs():
        assert generate(model, PROMPT, max_new_tokens=8, static=True).output_ids == want
    with virtual_cuda():
        model.to("cuda")
        tr = generate(model, PROMPT, max_new_tokens=8)
    assert tr.output_ids == want and tr.config["static"] and not tr.config["graphs"]["failed"]


def test_the_apps_run_handler_runs_on_the_virtual_device(tiny_dir, monkeypatch):
    """The Run tab's handler with device "cuda" (its worker thread included): the model loads onto the
    device and pre-captures its buckets (up to 16 rows here: all 45 take a minute on the virtual device),
    the run takes the graph path and gives the CPU run's ids. The machine's peaks are not measured: on
    the virtual device that would time the CPU's matmuls through the dispatcher for minutes."""
    import functools
    import types

    import app as app_module
    from appkit.models import model_cache
    from decoding.engine import runner
    from appkit.run import costs
    monkeypatch.setattr(model_cache, "precapture", functools.partial(runner.precapture, max_bucket=16))
    monkeypatch.setattr(costs, "machine_peaks", lambda model: None)  # a benchmark of the CPU behind the device
    from appkit.run.settings import FIELDS, Settings
    from decoding import load, make_drafter
    s = Settings(target=tiny_dir, draft=tiny_dir, prompt="def x ( y ) :", method="lookahead", preset="manual",
                 max_new=12, window=4, ngram=3, guesses=4, device="cuda", dtype="fp32")
    with virtual_cuda() as vc:
        h = app_module.build_demo(tiny_dir, tiny_dir, public=False).decodescope["handlers"]
        outs = list(h.run(types.SimpleNamespace(session_hash="vcuda"), *[getattr(s, f) for f in FIELDS]))
    trace = outs[-1][-1]
    import html  # the stats line escapes file-derived values for Markdown (":" as &#58;), shown as typed
    assert isinstance(trace, dict) and "on cuda:0" in html.unescape(outs[-1][1]), outs[-1][1]
    model, tok = load(tiny_dir)
    with emulated_graphs():
        ref = generate(model, tok(s.prompt)["input_ids"], make_drafter("lookahead", window=4, ngram=3, guesses=4),
                       max_new_tokens=12, static=True)
    assert trace["output_ids"] == ref.output_ids
    g = trace["config"]["graphs"]
    assert g["on"] and not g["failed"] and set(g["used"]) <= set(g["captured"])
    assert vc.syncs  # the worker thread's host reads were seen


def test_a_blocking_upload_is_a_sync_and_a_queued_pinned_one_is_not():
    """On CUDA a copy to the device waits for the stream to drain unless it is non_blocking from pinned
    memory (torch's memcpy_and_sync, the driver's pageable staging): the device records it as a sync."""
    host = torch.arange(4)
    with virtual_cuda() as vc:
        dev = torch.zeros(4, dtype=torch.long, device="cuda")
        n = vc.mark()
        torch.tensor([1, 2], device="cuda")  # python data
        host.to("cuda")  # pageable
        dev.copy_(host.pin_memory())  # pinned but blocking
        dev.copy_(host.pin_memory(), non_blocking=True)  # queued like a kernel
        host.pin_memory().to("cuda", non_blocking=True)
    line = inspect.currentframe().f_lineno
    made = vc.since(n)
    assert [s.kind for s in made] == ["upload"] * 3, list(map(str, made))
    assert [s.where for s in made] == [f"tests/{Path(__file__).name}:{line - k}" for k in (5, 4, 3)]
    assert vc.uploads == {"pinned": 3, "pageable": 2}
