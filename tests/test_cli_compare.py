"""--compare greedy: interleaved rounds, the median speed-up with its spread (min-max), and on a busy machine
"machine busy: speed not measured" with the step counts instead of a ratio (the rule: decoding/tuning/busy.py)."""
import re

import pytest

from decoding.cli.main import main
from decoding.tuning import busy, threads

pytestmark = pytest.mark.usefixtures("no_cpu_kernel")
PROMPT = "def x ( y ) : return y + 1"


def compare(tiny_dir, capsys, *extra) -> list[str]:
    assert main(["generate", "--model", tiny_dir, "--method", "lookahead", "--prompt", PROMPT, "--max-new-tokens",
                 "8", "--compare", "greedy", *extra]) == 0
    return [x for x in capsys.readouterr().err.splitlines() if x.startswith("[compare]")]


def test_quiet_machine_prints_the_median_and_spread_of_interleaved_rounds(tiny_dir, capsys, monkeypatch):
    monkeypatch.setattr(threads, "load_average", lambda: 0.1)
    monkeypatch.setattr(busy, "load_average", lambda: 0.1)
    monkeypatch.setattr(busy, "MIN_CPU_SHARE", 0.0)  # the test process itself shares the cores: not what is tested
    calls = []
    real = busy.Clock.__enter__
    monkeypatch.setattr(busy.Clock, "__enter__", lambda self: calls.append(1) or real(self))
    lines = compare(tiny_dir, capsys, "--repeats", "3")
    assert len(lines) == 1 and "machine busy" not in lines[0], lines
    m = re.search(r"speed-up (\d+\.\d\d)x median of 3 interleaved rounds \(spread (\d+\.\d\d)-(\d+\.\d\d)x", lines[0])
    assert m, lines[0]
    med, lo, hi = map(float, m.groups())
    assert lo <= med <= hi and "identical to greedy" in lines[0] and "CPU" in lines[0]
    assert len(calls) == 6  # 3 rounds x (method, greedy)


def test_busy_load_says_so_with_the_step_counts_and_no_ratio(tiny_dir, capsys, monkeypatch):
    monkeypatch.setattr(busy, "load_average", lambda: 9.0)
    lines = compare(tiny_dir, capsys)
    assert len(lines) == 1 and "machine busy: speed not measured" in lines[0], lines
    assert "load average 9.0" in lines[0] and "speed-up" not in lines[0] and not re.search(r"\d\.\d\dx", lines[0])
    assert re.search(r"greedy \d+ steps for 8 tokens, lookahead \d+ steps for 8 tokens", lines[0])
    assert "identical to greedy" in lines[0]


def test_cpu_time_far_below_wall_time_is_busy_too(tiny_dir, capsys, monkeypatch):
    """A process that waited for a core (CPU time far below wall time) is busy even when the load looks low:
    a synthetic wait stands in for the scheduler."""
    monkeypatch.setattr(busy, "load_average", lambda: 0.1)
    monkeypatch.setattr(threads, "load_average", lambda: 0.1)
    real = busy.Clock.__exit__

    def slow_exit(self, *exc):
        import time
        time.sleep(0.3)  # wall time passes, no CPU time: as when another process holds the core
        return real(self, *exc)
    monkeypatch.setattr(busy.Clock, "__exit__", slow_exit)
    lines = compare(tiny_dir, capsys, "--repeats", "1")
    assert len(lines) == 1 and "machine busy: speed not measured" in lines[0] and "waited for a core" in lines[0]
    assert "speed-up" not in lines[0]


def test_busy_rule():
    assert busy.busy_reason(2.5, 2) and busy.busy_reason(1.5, 2) is None
    assert busy.busy_reason(None, 2, cpu_s=0.2, wall_s=1.0) and busy.busy_reason(None, 2, cpu_s=0.95, wall_s=1.0) is None


def test_repeats_without_compare_is_refused_before_loading(tiny_dir, capsys):
    assert main(["generate", "--model", tiny_dir, "--prompt", PROMPT, "--repeats", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--compare greedy" in err[0]
