"""A trace is untrusted input: the one validating loader (decoding/trace/check.py, behind Trace.from_dict,
Trace.load, Trace.from_json and the app's upload) refuses each class of crafted file with one TraceError
naming the value, bounds the work a file can cause, and a fuzzer that mutates the shipped traces finds no
other exception and no accepted trace that renders a payload."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from decoding.trace import Trace
from decoding.trace.check import CAPS, TraceError, check_document, parse

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.json"))
FIXTURES = [p for p in sorted((ROOT / "tests" / "fixtures").glob("*.json")) if not p.name.startswith("profile")]
PAYLOADS = ['"><img src=x onerror=alert(1)>', "</title><img src=x onerror=alert(1)>",
            "1' onmouseover='alert(1)' x='", "<script>alert(1)</script>", "javascript:alert(1)"]


def doc(name: str = "lookahead_W5_N4_G5") -> dict:
    return json.loads((ROOT / "assets" / "traces" / f"{name}.json").read_text())


def refused(d, *needles: str) -> str:
    with pytest.raises(TraceError) as e:
        Trace.from_dict(d)
    msg = str(e.value)
    assert msg.startswith("not a DecodeScope trace") and "\n" not in msg, msg
    assert not any(p in msg for p in PAYLOADS) and "<" not in msg, msg  # a message never echoes markup
    for n in needles:
        assert n in msg, msg
    return msg


@pytest.mark.parametrize("path", SHIPPED + FIXTURES, ids=lambda p: p.stem)
def test_every_shipped_and_fixture_trace_passes_the_loader(path):
    tr = Trace.load(path)
    assert tr.steps and check_document(json.loads(tr.to_json())) is not None  # what we write, we read


@pytest.mark.parametrize("field,value,where", [
    ("positions", '"><img src=x onerror=alert(1)>', "steps[3].positions[0]"),
    ("kv_len", "</title><img src=x onerror=alert(1)>", "steps[3].kv_len"),
    ("index", "1' onmouseover='alert(1)' x='", "steps[3].index"),
])
def test_the_reported_script_payloads_are_refused(field, value, where):
    d = doc()
    if field == "positions":
        d["steps"][3]["positions"][0] = value
    else:
        d["steps"][3][field] = value
    refused(d, where, "a string of")


def test_cycles_and_late_parents_are_refused_in_steps_and_trees():
    d = doc()
    d["steps"][3]["parents"] = [5] * len(d["steps"][3]["parents"])
    refused(d, "steps[3].parents[0] = 5 is not before node 0")
    d = doc("speculative_tree_3-2-1")
    k = next(i for i, s in enumerate(d["steps"]) if len(s["info"].get("tree", {}).get("parents", [])) > 2)
    d["steps"][k]["info"]["tree"]["parents"][1] = 2
    refused(d, f"steps[{k}].info.tree.parents[1] = 2 is not before node 1")
    d = doc("speculative_tree_3-2-1")
    d["steps"][k]["info"]["accepted_path"] = [0, 99]
    refused(d, "accepted_path[1] = 99 is not a node")


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["steps"][3].__setitem__("accepted", [5] * 1_000_000), "1,000,000 entries"),
    (lambda d: d.__setitem__("steps", [copy.deepcopy(d["steps"][1]) for _ in range(CAPS["steps"] + 1)]), "steps (at most"),
    (lambda d: d["steps"][3].__setitem__("roles", ["window"] * (len(d["steps"][3]["tokens"]) - 1)), "roles has"),
    (lambda d: d["steps"][3]["tokens"].__setitem__(0, 10**7 + 5), "outside the vocabulary"),
    (lambda d: d["steps"][3].__setitem__("kept", [10_000]), "kept[0] = 10000 is not a query index"),
    (lambda d: d["steps"][3].__setitem__("n_query", 999), "n_query = 999"),
    (lambda d: d["steps"][3].__setitem__("index", 7), "steps[3].index = 7"),
    (lambda d: d["steps"][3]["origins"].append("target"), "origins"),
    (lambda d: d.__setitem__("config", "x"), "config = a string of 1 characters: expected object"),
    (lambda d: d.__setitem__("steps", [1, 2]), "expected object"),
    (lambda d: d["vocab"].__setitem__("<b>", "x"), "vocab has a key that is not a token id"),
    (lambda d: d["steps"][3]["roles"].__setitem__(0, "<b>x</b>"), "steps[3].roles[0]"),
    (lambda d: d.__setitem__("method", "<script>"), "method"),
    (lambda d: d.__setitem__("text", "x" * (CAPS["string"] + 1)), "characters (at most"),
])
def test_wrong_types_broken_rules_and_oversize_traces_get_one_line(mutate, needle):
    d = doc()
    mutate(d)
    refused(d, needle)


@pytest.mark.parametrize("text,needle", [
    ("[" * 33 + "]" * 33, "nested deeper than 32"),  # checked on the parsed document
    ("[" * 5_000 + "]" * 5_000 + " " * 200_000, "nested deeper than 32"),  # json's own RecursionError
    ("[" * 100_000 + "]" * 100_000, "100,000 brackets"),  # refused before parsing: memory
    ('{"schema": ' + "1" * 100_000 + "}", "a number with 100,000 characters"),
    ('{"schema": NaN}', "NaN is not a JSON number"),
    ('{"schema": -Infinity}', "-Infinity is not a JSON number"),
    ('{"schema": 1e309}', "out of range"),
    (b"\xff\xfe{}", "not UTF-8"),
    ('{"schema": "decodescope.trace/2"', "not valid JSON"),
])
def test_parsing_bounds_depth_number_size_and_constants(text, needle):
    with pytest.raises(TraceError, match=needle):
        Trace.from_json(text)


def test_a_string_holding_brackets_is_not_nesting():
    """Brackets inside strings are not nesting: a token text of 100 "[" is fine."""
    d = doc()
    d["vocab"][next(iter(d["vocab"]))] = "[" * 100 + '\\"{'
    assert Trace.from_json(json.dumps(d)).vocab


def test_oversize_files_are_refused_before_reading(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(CAPS["bytes"] + 1)
    with pytest.raises(TraceError, match="too large"):
        Trace.load(big)


# ---- the fuzzer: mutate the shipped traces anywhere, with anything ----

def _paths(v, at=()):
    yield at
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v[:6]):  # a few entries of each list: the structure, not every token
            yield from _paths(x, (*at, i))


BASES = [json.loads(p.read_text()) for p in SHIPPED]
PATHS = [(b, p) for b, d in enumerate(BASES) for p in _paths(d) if p]
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(PAYLOADS) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(PAYLOADS + ["tokens", "parents", "x"]),
                                                                   inner, max_size=3),
    max_leaves=8)


def _mutated(which: int, value) -> dict:
    base, path = PATHS[which]
    d = copy.deepcopy(BASES[base])
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return d


@settings(max_examples=250, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(which=st.integers(min_value=0, max_value=len(PATHS) - 1), value=VALUES)
def test_fuzzed_traces_load_or_raise_the_one_error(which, value):
    d = _mutated(which, value)
    try:
        Trace.from_json(json.dumps(d))
    except TraceError as e:
        assert "\n" not in str(e) and "<" not in str(e)


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(which=st.integers(min_value=0, max_value=len(PATHS) - 1), value=VALUES)
def test_fuzzed_traces_that_load_render_inert(which, value):
    """What the loader accepts, every picture draws without an exception, and no payload survives
    unescaped in the HTML (attributes, SVG titles, scripts)."""
    import viz
    from viz.summaries.report import report_html

    try:
        tr = Trace.from_json(json.dumps(_mutated(which, value)))
    except TraceError:
        return
    for html in (viz.step_view_html(tr), report_html(tr)):
        for p in ("<img src=x", "<script>alert", "onerror=alert", "onmouseover='alert"):
            assert p not in html


# ---- bounded work: a replay at the caps ----

def test_a_replay_at_the_caps_is_bounded_in_time_and_memory(tmp_path):
    """A speculative trace of 1,000 steps with 200-node trees (10 MB, the shape that amplifies most: every
    node reaches the page) replays through the app's handler in bounded time; after it, the server's memory
    returns near its baseline (RSS within 150 MB), checked in a fresh process."""
    script = textwrap.dedent(f"""
        import copy, json, resource, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from gc import collect
        from appkit.race.replay import load_trace
        import viz

        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

        d = json.load(open({str(ROOT / "assets" / "traces" / "speculative_tree_3-2-1.json")!r}))
        base = next(s for s in d["steps"] if len(s["info"].get("tree", {{}}).get("tokens", [])) > 2)
        steps, kv, out, n = d["steps"][:1], d["steps"][0]["kv_len"] + d["steps"][0]["n_query"], list(d["steps"][0]["accepted"]), 200
        while len(steps) < 1000:
            s = copy.deepcopy(base)
            s.update(index=len(steps), kv_len=kv, n_query=n, tokens=[base["tokens"][0]] * n, parents=[-1] + [0] * (n - 1),
                     positions=[kv] + [kv + 1] * (n - 1), roles=["x0"] + ["draft"] * (n - 1),
                     slots=[[0, 0]] + [[i, 1] for i in range(1, n)], kept=[0])
            s["accepted"], s["origins"] = s["accepted"][:1], ["target"]
            t = s["info"]["tree"]
            t.update(tokens=s["tokens"], parents=s["parents"], depth=[0] + [1] * (n - 1),
                     draft_prob=[None] + [0.1] * (n - 1), target_prob=[None] + [0.1] * (n - 1),
                     origin=["target"] + ["draft"] * (n - 1))
            t.pop("pruned", None)
            s["info"]["accepted_path"], s["info"]["first_rejected"] = [0], 1
            kv += 1; out += s["accepted"]; steps.append(s)
        d.update(steps=steps, output_ids=out); d.pop("stats", None); d.pop("speculative", None)
        open(sys.argv[1], "w").write(json.dumps(d))
        del d, steps, base
        small = {str(SHIPPED[0])!r}
        viz.step_view_html(load_trace(small)); collect()
        before = rss()
        t0 = time.perf_counter()
        html = viz.step_view_html(load_trace(sys.argv[1]))  # one replay: the time bound is per replay
        took = time.perf_counter() - t0
        size = len(html)
        del html
        collect()
        print(json.dumps({{"before": before, "after": rss(), "seconds": took, "html_mb": size / 2**20}}))
    """)
    path = tmp_path / "big.json"
    r = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])
    print(m, f"{path.stat().st_size / 2**20:.1f} MB trace")
    assert m["seconds"] < 60 and m["html_mb"] < 24, m  # docs/trace.md records the measured numbers
    assert m["after"] - m["before"] < 150, m
