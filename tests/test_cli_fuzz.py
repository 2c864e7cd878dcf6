"""Fuzzing every option of every CLI: bad input ends with ONE line on stderr ("error: ..."), exit status 2,
never a traceback, never a crash.

The options are read from the argparse parsers themselves (decoding generate / train-heads, profiling,
profiling.project, profiling.operators, viz report / side-by-side), so a new option is fuzzed, and must
declare its check (a type from decoding/cli/habits.py or choices), without touching this file. Each case calls
main(argv) in-process; two run a real process (a crash there, SIGSEGV, would not show in-process).
Each command's valid base run is checked to succeed, so a bad value that slipped through shows as rc 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import WORDS
from decodescope.cli import main as decodescope_main
from decoding.cli.main import build_parser as decoding_parser
from decoding.cli.main import main as decoding_main
from profiling.__main__ import build_parser as profiling_parser
from profiling.__main__ import main as profiling_main
from profiling.operators import build_parser as operators_parser
from profiling.operators import main as operators_main
from profiling.project import build_parser as project_parser
from profiling.project import main as project_main
from viz.__main__ import build_parser as viz_parser
from viz.__main__ import main as viz_main

FIXTURES = Path(__file__).parent / "fixtures"
TRACE, TRACE_B = FIXTURES / "lookahead.json", FIXTURES / "greedy.json"
PROFILE = FIXTURES / "profile_greedy.json"
ROOT = Path(__file__).resolve().parent.parent


def _sub(ap: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


# command -> (its parser, its main, the subcommand word main() needs first)
COMMANDS = {
    "generate": (lambda: _sub(decoding_parser(), "generate"), decoding_main, ["generate"]),
    "train-heads": (lambda: _sub(decoding_parser(), "train-heads"), decoding_main, ["train-heads"]),
    "convert": (lambda: _sub(decoding_parser(), "convert"), decoding_main, ["convert"]),
    "profiling": (profiling_parser, profiling_main, []),
    "project": (project_parser, project_main, []),
    "operators": (operators_parser, operators_main, []),
    "report": (lambda: _sub(viz_parser(), "report"), viz_main, ["report"]),
    "side-by-side": (lambda: _sub(viz_parser(), "side-by-side"), viz_main, ["side-by-side"]),
}

# Where an option is used at all (e.g. --ngram-table only with --method speculative --staged), so its own
# check is what refuses the value, not "this option needs another method".
SPECULATIVE = ["--method", "speculative", "--draft", "<TINY>"]
CONTEXT = {**{o: SPECULATIVE for o in ("--draft", "--draft-tokens", "--tree", "--tree-budget", "--draft-confidence")},
           "--ngram-table": SPECULATIVE + ["--staged"],
           **{o: ["--method", "prompt_lookup"] for o in ("--num-tokens", "--max-ngram", "--candidates", "--reference",
                                                        "--reference-tokens")},
           "--block": ["--method", "jacobi"],
           **{o: ["--method", "medusa"] for o in ("--heads", "--budget", "--draft-vocab", "--acceptance")}}

# Values beyond the generic ones, for options whose text is parsed later (or names a known thing).
EXTRA = {"--tree": ["abc", "0", "-1", "1e309", "nan", "99999999999999999999", "3,,2", "65,65"],
         "--devices": [",", " , ", "B999", "A100,nope"],
         "--device": ["nope", "cuda:99"],
         "--dtype": ["fp8", "nan"],
         "--kind": ["hydra", "nan"],
         "--model": ["<MISSING>", "<DIR>", "<BINARY>"],
         "--draft": ["<MISSING>", "<DIR>", "<BINARY>"],
         "--heads": ["<MISSING>", "<DIR>", "<BINARY>"],
         "--reference": ["<MISSING>", "<DIR>", "<BINARY>"],
         "--prompt-file": ["<MISSING>", "<DIR>", "<BINARY>", "<NUL_JSON>", "<DEEP_JSON>"],
         "--ngram-table": ["<BINARY>", "<DEEP_JSON>", "<BAD_TABLE>"],
         "--profile": ["<BINARY>", "<DEEP_JSON>", "<NOT_OBJECT>"],
         "trace": ["<MISSING>", "<DIR>", "<BINARY>"],
         "traces": ["<MISSING>", "<DIR>", "<BINARY>"]}


def generic_bad_values(action: argparse.Action) -> list[str]:
    """Out of range, zero, negative, NaN, inf, 1e309, non-numeric, empty: by the kind of the option's check."""
    kind = getattr(action.type, "kind", None)
    if action.choices is not None:
        return ["", "no-such-choice"]
    if kind == "int":
        lo, hi = action.type.lo, action.type.hi
        vals = [str(lo - 1), str(hi + 1), "-1", "0", "nan", "inf", "1e309", "1.5", "abc", ""]
        return [v for v in vals if not (v.lstrip("-").isdigit() and lo <= int(v) <= hi)] + ["9" * 100_000]
    if kind == "float":
        lo, hi = action.type.lo, action.type.hi
        vals = ["nan", "-nan", "inf", "-inf", "1e309", "-1e309", "abc", "", str(lo - 1), str(hi + 1)]
        return vals + ([str(lo), "0"] if action.type.open_lo and lo == 0 else [])
    if kind == "str":
        return ["", "   "]
    if kind == "input_file":
        return ["", "<MISSING>", "<DIR>"]
    if kind == "input_dir":
        return ["", "<MISSING>", "<FILE>"]
    if kind == "text_path":
        return ["", "<MISSING>", "<BINARY>"]
    if kind == "output_file":
        return ["", "<DIR>", "<FILE>/child"]
    if kind == "output_dir":
        return ["", "<FILE>", "<FILE>/child"]
    # an option without a declared check (test_every_option_declares_a_check fails for it): fuzz by its type
    if action.type is int:
        return ["-1", "nan", "inf", "1e309", "abc", "", "9" * 100_000]
    if action.type is float:
        return ["nan", "inf", "-inf", "1e309", "abc", ""]
    return ["", "   "]


def value_actions(ap: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in ap._actions if a.nargs != 0 and not isinstance(a, argparse._SubParsersAction)]


def option_name(a: argparse.Action) -> str:
    return max(a.option_strings, key=len) if a.option_strings else a.dest


CASES = [(cmd, option_name(a)) for cmd, (build, _, _) in COMMANDS.items() for a in value_actions(build())]


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_every_option_declares_a_check(cmd):
    """A value-taking option without a checking type or choices (a bare type=int, str, float) would take
    0, -1, NaN or an empty string silently: each one must say what it accepts."""
    unchecked = [option_name(a) for a in value_actions(COMMANDS[cmd][0]())
                 if a.choices is None and not getattr(a.type, "checked", False)]
    assert not unchecked, f"{cmd}: options without a range/type check: {unchecked}"


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("fuzz")
    (d / "dir").mkdir()
    (d / "file.txt").write_text("just text\n")
    (d / "binary.bin").write_bytes(b"def f\x00(x):\n\x00\xff\xfe return x\n")
    (d / "nul.json").write_text(json.dumps(["a prompt", "with a \x00 NUL"]))
    (d / "deep.json").write_text("[" * 100_000)
    (d / "table.json").write_text(json.dumps({"1 2": [3]}))
    (d / "list.json").write_text("[1, 2]")
    data = d / "data"
    data.mkdir()
    (data / "a.txt").write_text(" ".join(WORDS * 12))
    from test_fetch_model import tiny_source, write_gguf
    write_gguf(d / "tiny.gguf", tiny_source())
    return {"<GGUF>": str(d / "tiny.gguf"), "<TINY>": tiny_dir, "<MISSING>": str(d / "no" / "such"), "<DIR>": str(d / "dir"),
            "<FILE>": str(d / "file.txt"), "<BINARY>": str(d / "binary.bin"), "<NUL_JSON>": str(d / "nul.json"),
            "<DEEP_JSON>": str(d / "deep.json"), "<BAD_TABLE>": str(d / "table.json"),
            "<NOT_OBJECT>": str(d / "list.json"), "<DATA>": str(data), "<OUT>": str(d / "out"), "root": d}


def base_argv(cmd: str, option: str) -> tuple[list[str], list[str]]:
    """(options, positionals) of a valid, fast run of `cmd` (test_base_runs_succeed checks it)."""
    if cmd == "generate":
        return ["--model", "<TINY>", "--max-new-tokens", "2", "--method", "greedy"] + (
            [] if option in ("--prompt", "--prompt-file") else ["--prompt", "def x ( y ) :"]), []
    if cmd == "profiling":
        return ["--model", "<TINY>", "--max-new-tokens", "2", "--method", "greedy", "--no-peaks",
                "--out", "<OUT>/prof"], []
    if cmd == "train-heads":
        return ["--model", "<TINY>", "--kind", "medusa", "--data", "<DATA>", "--out", "<OUT>/heads", "--seq", "16",
                "--max-tokens", "200", "--epochs", "0.2", "--n-heads", "2"], []
    if cmd in ("project", "operators"):
        return [], [str(TRACE)]
    if cmd == "convert":
        return ["--cache", "<OUT>/cache"], ["<GGUF>"]
    if cmd == "report":
        return ["-o", "<OUT>/report.html", "--profile", str(PROFILE)], [str(TRACE)]
    if cmd == "side-by-side":
        return ["-o", "<OUT>/sbs.html"], [str(TRACE), str(TRACE_B)]
    raise AssertionError(cmd)


def resolve(args: list[str], paths: dict) -> list[str]:
    out = []
    for a in args:
        for k, v in paths.items():
            if k.startswith("<") and k in a:
                a = a.replace(k, v)
        out.append(a)
    return out


def call(main, argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's way out, should a main() not turn it into its return value
        rc = e.code if isinstance(e.code, int) else 2
    except Exception as e:  # noqa: BLE001 - what escapes main() is the failure to report
        rc = f"an uncaught {type(e).__name__}: {str(e)[:100]}"
    out = capsys.readouterr()
    return rc, out.out, out.err


def refusal_problem(rc, err: str) -> str | None:
    """None if (rc, stderr) is a proper refusal: exit status 2, one line "error: ...", no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if isinstance(rc, str):
        return rc
    if rc != 2:
        return f"exit status {rc}"
    if "Traceback" in err:
        return "a traceback"
    if len(lines) != 1 or not lines[0].startswith("error:"):
        return f"{len(lines)} lines: {err[:300]!r}"
    return None


@pytest.mark.parametrize("cmd,option", CASES, ids=[f"{c}{o if o.startswith('-') else ' ' + o}" for c, o in CASES])
def test_bad_values_are_refused_with_one_line(cmd, option, paths, capsys):
    build, main, head = COMMANDS[cmd]
    action = next(a for a in value_actions(build()) if option_name(a) == option)
    options, positionals = base_argv(cmd, option)
    bad_values = generic_bad_values(action) + EXTRA.get(option, [])
    failures = []
    for bad in bad_values:
        if action.option_strings:
            argv = head + options + CONTEXT.get(option, []) + [f"{option}={bad}"] + positionals
        else:  # a positional: the bad value in its place
            argv = head + options + [bad] + positionals[1:]
        rc, out, err = call(main, resolve(argv, paths), capsys)
        problem = refusal_problem(rc, err)
        if problem:
            failures.append(f"{option}={bad[:30]!r}: {problem}")
    assert not failures, f"{cmd}: " + "; ".join(failures)


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_help_lists_the_options_and_exits_0(cmd, capsys):
    build, main, head = COMMANDS[cmd]
    rc, out, err = call(main, head + ["--help"], capsys)
    assert rc == 0 and "usage:" in out and not err
    # every option is listed, except those hidden on purpose (profile hides generate's options it refuses)
    assert all(option_name(a) in out for a in value_actions(build()) if a.option_strings and a.help != argparse.SUPPRESS)


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_base_runs_succeed(cmd, paths, capsys):
    """The fuzz above only proves something if the same command without the bad value succeeds."""
    build, main, head = COMMANDS[cmd]
    options, positionals = base_argv(cmd, "")
    rc, out, err = call(main, resolve(head + options + positionals, paths), capsys)
    assert rc == 0, err[-2000:]


def malformed_traces(d: Path, good: dict) -> dict[str, Path]:
    docs = {"steps are integers": json.dumps({**good, "steps": [1, 2]}),
            "config is a string": json.dumps({**good, "config": "abc"}),
            "model is a list": json.dumps({**good, "model": [1]}),
            "deeply nested": "[" * 100_000,
            "deeply nested steps": json.dumps({**good, "steps": []})[:-2] + "[" * 100_000,
            "100000-digit integer": json.dumps({**good, "prompt_ids": [1]}).replace("[1]", "[" + "9" * 100_000 + "]"),
            "NaN document": "NaN",
            "NaN wall time": json.dumps({**good, "wall_s": 1.0}).replace('"wall_s": 1.0', '"wall_s": NaN'),
            "NaN token": json.dumps({**good, "output_ids": [7]}).replace('"output_ids": [7]', '"output_ids": [NaN]'),
            "1e309 wall time": json.dumps({**good, "wall_s": 1.0}).replace('"wall_s": 1.0', '"wall_s": 1e309'),
            "binary": "\x00\x01\x02",
            "not UTF-8": None}
    out = {}
    for name, text in docs.items():
        p = d / (name.replace(" ", "_") + ".json")
        if text is None:
            p.write_bytes(b'{"schema": "\xff\xfe"}')
        else:
            p.write_text(text)
        out[name] = p
    return out


@pytest.mark.parametrize("cmd", ["report", "side-by-side", "project", "operators"])
def test_malformed_traces_are_one_line(cmd, paths, capsys):
    good = json.loads(TRACE.read_text())
    build, main, head = COMMANDS[cmd]
    failures = []
    for name, p in malformed_traces(paths["root"], good).items():
        if cmd == "report":
            argv = ["report", str(p), "-o", str(paths["root"] / "m.html")]
        elif cmd == "side-by-side":
            argv = ["side-by-side", str(TRACE), str(p), "-o", str(paths["root"] / "m.html")]
        else:
            argv = [str(p)]
        rc, out, err = call(main, argv, capsys)
        problem = refusal_problem(rc, err)
        if problem:
            failures.append(f"{name}: {problem}")
    assert not failures, f"{cmd}: " + "; ".join(failures)
    assert not (paths["root"] / "m.html").exists()


def test_decodescope_dispatch_refuses_with_one_line(paths, capsys):
    deep = paths["<DEEP_JSON>"]
    for argv in ([], ["nope"], ["app", "--port", "1"], ["generate", "--threads=0"], ["profile", "--top-p=nan"],
                 ["report", paths["<MISSING>"]], ["report", deep], ["project", deep], ["project", str(TRACE), "--devices="]):
        rc, out, err = call(decodescope_main, argv, capsys)
        assert refusal_problem(rc, err) is None, (argv, rc, err)


def _real_process(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def test_threads_100000_is_refused_before_any_thread_pool_starts(tiny_dir):
    """It used to panic in the tokenizers' thread pool: SIGSEGV, exit status 139 (in-process it would kill
    the test run, so a real process)."""
    r = _real_process("-m", "decoding", "generate", "--model", tiny_dir, "--prompt", "x", "--threads", "100000")
    assert refusal_problem(r.returncode, r.stderr) is None, (r.returncode, r.stderr[-2000:])
    assert "--threads must be an integer in [1, 256]" in r.stderr


def test_deeply_nested_trace_in_a_real_process(paths):
    r = _real_process("-m", "profiling.operators", paths["<DEEP_JSON>"])
    assert refusal_problem(r.returncode, r.stderr) is None, (r.returncode, r.stderr[-2000:])
