"""`python -m profiling` prints what it measured, not Kineto's USDT marker lines (profiler_start / stop), and a
real error written while the profiler starts or stops still reaches stderr."""
from __future__ import annotations

import os

import torch

from conftest import tiny
from profiling.profiler import profile_run, without_usdt_lines

MARKER = b"USDT:2026-12-02 02:34:30 8244:8244 SyncActivityProfilerHandler.cpp:52] profiler_start\n"


def test_torch_profiler_itself_writes_the_marker_lines(capfd):
    """The control: without the filter, this torch writes them (so the test below can fail)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        torch.ones(3).add_(1)
    assert "profiler_start" in capfd.readouterr().err


def test_a_profiled_run_writes_no_usdt_line(capfd, tmp_path):
    model = tiny("llama")
    tr, prof = profile_run(model, None, [5, 6, 7, 8, 5, 6, 7], "greedy", max_new_tokens=4,
                           perfetto_path=tmp_path / "greedy.perfetto.json", measure_peaks=False)
    err = capfd.readouterr().err
    assert len(tr.output_ids) == 4 and prof
    assert "USDT" not in err and "profiler_start" not in err and "profiler_stop" not in err, err


def test_the_filter_keeps_every_other_line(capfd):
    with without_usdt_lines():
        os.write(2, MARKER)
        os.write(2, b"ERROR: a real problem\n")
        os.write(2, MARKER.replace(b"52] profiler_start", b"59] profiler_stop"))
        os.write(2, b"USDT: not kineto's marker\n")
    err = capfd.readouterr().err
    assert err == "ERROR: a real problem\nUSDT: not kineto's marker\n", err
