"""The CLI reads the method specs: a method declared in one new file (a SPEC) and one registry entry shows up
in `decodescope generate --help` with its flag, its range check and its "needs --method" sentence (the literal
check for every folder is tests/test_method_spec.py's).
"""
from __future__ import annotations

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
    toy_span: int = knob(3, lo=1, hi=9, cli="--toy-span", help="toy: tokens the toy copies per step")
    budget: int = knob(None, shared=True, lo=1, hi=8, cli="--budget", help="nodes the toy verifies per step")


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
     "error: --budget needs --method " + " or ".join(", ".join(
         [m for m in registry.METHODS if any(k.cli == "--budget" for k in registry.SPECS[m].knobs())]
         + ["toy_copy"]).rsplit(", ", 1))),  # every spec whose knob takes --budget, then the toy's
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
