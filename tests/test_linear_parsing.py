"""Every parser of a visitor's bytes runs in linear time and bounded memory.

Why: one 100 KB upload shaped to make the trace loader's depth pre-scan backtrack (a regular expression over
an unterminated string of escaped quotes) held the public server's interpreter for 51 s, quadratic in the
file's size. Here each family of adversarial inputs grows until one parse takes a measurable time, then the
input grows 4x: a linear parser takes ~4x as long, a quadratic one ~16x. Timings are the least of several
repeats with the garbage collector off, and the bound (10x) is generous, so a loaded 2-core box passes.
"""
from __future__ import annotations

import gc
import json
import time
import tracemalloc

import pytest

from appkit.page.tables import no_server_paths
from decoding.trace import Trace
from decoding.trace.check import TraceError, parse
from viz.describe import scrub_paths, short_name
from viz.escape import colour, esc, md_text, one_line

GROWTH = 4
MOST = 10  # a linear parser: ~4; a quadratic one: ~16
FLOOR_S = 0.005  # time a parse must take before its growth is measured (below it the clock is noise)
START = 4096
LARGEST = 512 * 1024  # x GROWTH = 2 MB of JSON; a visitor's text (a prompt, a trace's string) is smaller still
TEXT_LARGEST = 64 * 1024


def _trace(body: str) -> str:
    """A trace document whose text field holds `body` (reaches the schema and semantic checks)."""
    return ('{"schema": "decodescope.trace/2", "method": "greedy", "config": {}, "prompt_ids": [1], '
            '"text": "' + body + '"}')


# (name, size -> text); the shapes that make a scanner or a regular expression backtrack, or a parser allocate
JSON_FAMILIES = {
    "unterminated escaped quotes": lambda n: '"' + '\\"' * (n // 2),
    "quote backslash pairs": lambda n: '"\\' * (n // 2),
    "quotes": lambda n: '"' * n,
    "backslashes": lambda n: "\\" * n,
    "open brackets": lambda n: "[" * n,
    "open objects": lambda n: '{"a":' * (n // 5),
    "brackets in strings": lambda n: '["' + "[{" * (n // 2) + '"]',
    "long string": lambda n: '{"schema": "' + "x" * n + '"}',
    "escaped string": lambda n: '{"schema": "' + "\\n\\u0041" * (n // 8) + '"}',
    "integers": lambda n: "[" + "12345," * (n // 6) + "1]",
    "floats": lambda n: "[" + "1.5e3," * (n // 6) + "1]",
    "digits": lambda n: "1" * n,
    "minus signs": lambda n: "-" * n,
    "strings list": lambda n: "[" + '"ab",' * (n // 5) + '"a"]',
    "trace with a long text": lambda n: _trace("a\\\"" * (n // 3)),
    "trace with many ids": lambda n: _trace("x").replace('"prompt_ids": [1]', '"prompt_ids": [' + "1," * (n // 2) + "1]"),
    "trace with a long method": lambda n: _trace("x").replace('"greedy"', '"' + "a" * n + '"'),
    "trace with many vocab keys": lambda n: _trace("x").replace(
        '"text"', '"vocab": {' + ",".join(f'"{i}": "t"' for i in range(n // 10)) + '}, "text"'),
}

# every function that reads a visitor's text into a page or a message
TEXT_FAMILIES = {
    "slashes": lambda n: "/" * n,
    "path segments": lambda n: "/a" * (n // 2),
    "a path without an end": lambda n: "/" + "a." * (n // 2),
    "tildes": lambda n: "~/" * (n // 2),
    "drive letters": lambda n: "C:\\" * (n // 3),
    "markdown": lambda n: "[](!#" * (n // 5),
    "www": lambda n: "www." * (n // 4),
    "rgb": lambda n: "rgb(" + "1," * (n // 2),
    "whitespace": lambda n: " \t\n" * (n // 3),
}
TEXT_READERS = {"no_server_paths": no_server_paths, "scrub_paths": scrub_paths, "short_name": short_name,
                "md_text": md_text, "one_line": one_line, "esc": esc, "colour": colour}


def _parse(text: str) -> None:
    try:
        Trace.from_json(text)
    except TraceError:
        pass


def _seconds(fn, arg, repeats: int = 3) -> float:
    best = float("inf")
    gc.disable()  # (no gc.collect: with torch imported one takes ~0.2 s)
    try:
        for _ in range(repeats):
            t = time.perf_counter()
            fn(arg)
            best = min(best, time.perf_counter() - t)
    finally:
        gc.enable()
    return best


def _growth(fn, make, largest: int) -> tuple[int, float, float]:
    """(size, seconds at size, seconds at GROWTH x size) with the size the first that takes FLOOR_S."""
    n = START
    t = _seconds(fn, make(n))
    while t < FLOOR_S and n < largest:
        n *= 2
        t = _seconds(fn, make(n))
    return n, t, _seconds(fn, make(GROWTH * n))


def _check_linear(name: str, fn, make, largest: int = LARGEST) -> None:
    n, small, big = _growth(fn, make, largest)
    # a family that stays under the floor even at the largest size is refused at once (a size or bracket check)
    assert big <= max(MOST * small, 0.02), (
        f"{name}: {small * 1e3:.1f} ms at {n:,} characters but {big * 1e3:.1f} ms at {GROWTH * n:,}: "
        f"grows {big / max(small, 1e-9):.1f}x for {GROWTH}x the input (linear: ~{GROWTH}x)")


@pytest.mark.timing
@pytest.mark.parametrize("name", JSON_FAMILIES)
def test_trace_parsing_is_linear_in_the_upload(name):
    _check_linear(name, _parse, JSON_FAMILIES[name])


@pytest.mark.timing
@pytest.mark.parametrize("reader", TEXT_READERS)
def test_page_text_readers_are_linear(reader):
    for name, make in TEXT_FAMILIES.items():
        _check_linear(f"{reader} on {name}", TEXT_READERS[reader], make, TEXT_LARGEST)


@pytest.mark.parametrize("name", ["open brackets", "open objects", "strings list", "integers", "floats",
                                  "trace with many ids"])
def test_parsing_memory_is_bounded_by_the_file(name):
    """Peak memory of a 1 MB parse within 40x the file (an empty list costs the parser ~70 bytes for 3)."""
    text = JSON_FAMILIES[name](2**20)
    tracemalloc.start()
    try:
        _parse(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 40 * len(text), f"{name}: {peak / 2**20:.0f} MB to parse {len(text) / 2**20:.1f} MB"


def test_containers_of_a_real_trace_are_within_the_bracket_cap():
    """The bracket cap (one per 16 bytes) leaves room: the shipped traces hold about one per 30 bytes."""
    from pathlib import Path
    for f in sorted(Path(__file__).resolve().parents[1].glob("assets/traces/*.json")):
        text = f.read_text()
        assert (text.count("[") + text.count("{")) * 16 < len(text) + 16_000, f.name
        assert isinstance(parse(text), dict)
        json.loads(text)
