"""The CPU thread rule when --threads is not given: the usable cores minus the load, never more threads than
idle cores (a busy 2-core machine ran the default model ~40x slower on 2 threads), one for small models on
small machines, OMP_NUM_THREADS kept; the CLI's [threads] line says which rule chose."""
from __future__ import annotations

import torch

from conftest import tiny
from decoding.tuning.threads import apply, pick_threads


def test_the_rule_subtracts_the_load():
    assert pick_threads(134_500_000, 2, 1.6)[0] == 1  # the default model on a busy 2-core machine
    assert pick_threads(134_500_000, 2, 7.0)[0] == 1
    assert pick_threads(134_500_000, 2, 0.2)[0] == 2
    n, why = pick_threads(134_500_000, 16, 4.2)
    assert n == 12 and "16 usable cores minus the 1-minute load average 4.2" in why
    assert pick_threads(50_000_000, 2, 0.0) == (1, "1 (a model under 100M parameters on 2 cores: one thread)")
    assert pick_threads(134_500_000, 8, None)[0] == 8


def test_apply_sets_torch_and_keeps_omp_num_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        model = tiny("llama")
        assert apply(model, 3) == "3 (--threads)" and torch.get_num_threads() == 3
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        assert apply(model, None) == "1 (OMP_NUM_THREADS)"
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr("decoding.tuning.threads.usable_cores", lambda: 2)
        assert apply(model, None).startswith("1 (a model under 100M") and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_cli_prints_the_threads_line(tiny_dir, capsys, monkeypatch):
    from decoding.cli.main import main
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        assert main(["generate", "--model", tiny_dir, "--prompt", "def x ( y ) :", "--max-new-tokens", "3"]) == 0
    finally:
        torch.set_num_threads(before)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[threads] ")]
    assert len(lines) == 1 and ("usable cores" in lines[0] or "one thread" in lines[0]), lines
