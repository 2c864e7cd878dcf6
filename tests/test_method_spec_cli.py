"""The CLI reads the method specs: a method declared in one new file (a SPEC) and one registry entry shows up
in `decodescope generate --help` with its flag, its range check and its "needs --method" sentence; and no CLI-side
file compares a method name with a string literal (method_literal_comparisons, reusable by other folders' tests).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from decodescope.cli import main as decodescope
from decoding.methods import registry

ROOT = Path(__file__).resolve().parent.parent

TOY = '''
from dataclasses import dataclass

from decoding.engine.drafter import Greedy
from decoding.methods.spec import MethodSpec, knob


class Toy(Greedy):
    name = "toy_copy"


@dataclass
class ToyParams:
    span: int = knob(3, lo=1, hi=9, cli="--toy-span", help="toy: tokens the toy copies per step")
    budget: int = knob(None, lo=1, hi=8, cli="--budget", help="nodes the toy verifies per step")


SPEC = MethodSpec(name="toy_copy", drafter=Toy, params=ToyParams, label="toy copy", colour="#123456",
                  summary="a toy", explain="### Toy\\nA toy method for the CLI test.")
'''


@pytest.fixture
def toy_registry(tmp_path, monkeypatch):
    """The registry with one more module: a toy method in its own file under tmp_path."""
    (tmp_path / "toy_copy_method.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = registry.load_specs(registry.MODULES + ("toy_copy_method",))
    monkeypatch.setattr(registry, "SPECS", specs)
    monkeypatch.setattr(registry, "METHODS", tuple(specs))
    yield specs
    sys.modules.pop("toy_copy_method", None)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = decodescope(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_new_method_appears_in_generate_help(toy_registry, capsys):
    rc, out, _ = _cli(capsys, "generate", "--help")
    assert rc == 0
    assert "--toy-span" in out and "toy: tokens the toy copies per step" in out
    assert "toy_copy" in out.split("--method", 1)[1].split("\n", 1)[0]  # among the method choices
    assert "toy_copy: nodes the toy verifies per step" in " ".join(out.split())  # --budget's help, shared


@pytest.mark.parametrize("args,msg", [
    (["--method", "greedy", "--toy-span", "3"], "error: --toy-span needs --method toy_copy"),
    (["--method", "toy_copy", "--toy-span", "0"], "--toy-span must be an integer in [1, 9], got 0"),
    (["--method", "lookahead", "--budget", "4"],
     "error: --budget needs --method medusa, eagle, retrieval, self_speculative or toy_copy"),
    (["--method", "toy_copy", "--window", "3"], "error: --window, --ngram, --guesses, --no-prompt-ngrams, "
                                                 "--text-span need --method lookahead"),
], ids=["own-flag-other-method", "own-range", "shared-flag", "other-flag"])
def test_a_new_methods_flags_are_checked_before_a_model_loads(toy_registry, capsys, args, msg):
    rc, _, err = _cli(capsys, "generate", "--prompt", "x", *args)
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, err


def test_without_the_registry_line_the_method_is_absent(capsys):
    rc, out, _ = _cli(capsys, "generate", "--help")
    assert rc == 0 and "--toy-span" not in out and "toy_copy" not in out


# ---- no method name compared with a string literal ----

# CLI-side files that must read the specs instead (the app and viz folders add theirs to their own tests).
CLI_FILES = ("decoding/__main__.py", "decoding/cli_run.py", "decoding/cli_setup.py", "decoding/parallel/cli.py",
             "decoding/tune.py", "decoding/presets.py", "decoding/stats.py", "decoding/hf_generate.py",
             "decoding/trace.py", "decoding/trace_check.py", "profiling")

_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def _literals(node: ast.AST) -> list[str]:
    """String constants a comparison operand spells out: "eagle", or ("medusa", "eagle") / [..] / {..}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.BinOp):  # HEADS + ("retrieval",)
        return _literals(node.left) + _literals(node.right)
    return []


def literal_comparisons(source: str, names: tuple[str, ...], filename: str = "<source>") -> list[str]:
    """'file:line: code' for every ==, !=, in, not in, is (not) comparison (and match-case value) in `source`
    one of whose operands is a string literal (or a literal tuple/list/set) holding one of `names`."""
    tree = ast.parse(source, filename)
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                if isinstance(op, _OPS) and any(v in names for side in operands[i:i + 2] for v in _literals(side)):
                    hit = True
        elif isinstance(node, ast.MatchValue):
            hit = any(v in names for v in _literals(node.value))
        if hit:
            found.append(f"{filename}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return found


def method_literal_comparisons(paths, root: Path = ROOT, names: tuple[str, ...] | None = None) -> list[str]:
    """literal_comparisons of every .py file under `paths` (files or folders, relative to root) against the
    registry's method names: what a test asserts is empty for the folders that must read the specs."""
    names = tuple(registry.METHODS) if names is None else names
    files = []
    for p in paths:
        p = root / p
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return [hit for f in files for hit in literal_comparisons(f.read_text(), names, str(f.relative_to(root)))]


def test_the_checker_finds_each_form_of_comparison():
    src = ('if args.method == "eagle": pass\n'
           'x = m != "greedy"\n'
           'y = method in ("medusa", "eagle")\n'
           'z = method not in HEADS + ("retrieval",)\n'
           'match method:\n'
           '    case "jacobi": pass\n'
           'ok = method == BASELINE or kind == "chain" or "lookahead" + "x"\n')
    hits = literal_comparisons(src, registry.METHODS)
    assert [h.split(":")[1] for h in hits] == ["1", "2", "3", "4", "6"], hits


def test_cli_files_compare_no_method_name_with_a_literal():
    hits = method_literal_comparisons(CLI_FILES)
    assert not hits, "compare with spec fields (needs, tuner, pictures, BASELINE), not names:\n" + "\n".join(hits)
