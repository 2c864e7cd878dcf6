"""Argument checks shared by every CLI (decoding, fetch-model, profiling, viz): one line, never a traceback.

A leaf module (it imports nothing of the project), so the model fetcher and the loader can use it without
importing the engine.
"""
from __future__ import annotations

import argparse
import codecs
import contextlib
import math
import os
import re
import sys
from pathlib import Path

# --- Argument checks shared by every CLI (decoding, profiling, profiling.project/.operators, viz) ----------
# Bad input is one line on stderr ("error: ..."), exit status 2, never a traceback: every option that takes a
# value gets one of these types (or choices), so argparse refuses it before anything loads.

THREADS = (1, 256)  # --threads: torch/tokenizers thread pools; 100000 made the tokenizers pool panic (SIGSEGV)
MAX_ECHO = 40  # characters of a refused value repeated in the message


_PROGS: dict[str, str] = {}  # program name as a module spells it -> as the running command is called


@contextlib.contextmanager
def program_names(names: dict[str, str]):
    """Within the block, a OneLineParser built with prog P shows names[P] instead (its subcommands follow):
    `decodescope generate --help` says `usage: decodescope generate`, not `python -m decoding generate`."""
    saved = dict(_PROGS)
    _PROGS.update(names)
    try:
        yield
    finally:
        _PROGS.clear()
        _PROGS.update(saved)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a refused argument is ONE line on stderr (`error: --window must be an integer in
    [1, 64], got 0`), exit status 2, as the CLIs' own checks print it; --help is unchanged."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("prog") in _PROGS:
            kwargs["prog"] = _PROGS[kwargs["prog"]]
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        head, sep, rest = message.partition(": ")
        if head.startswith("argument ") and sep and rest.startswith("must "):
            message = f"{head[len('argument '):]} {rest}"  # "argument --x: must ..." -> "--x must ..."
        self.exit(2, f"error: {one_line(message)}\n")


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace | int:
    """parser.parse_args(argv), but --help and a refused argument come back as their exit status (0, 2)
    instead of SystemExit: every CLI's main(argv) returns an int, called in-process or as a program."""
    try:
        return parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)


def one_line(e: object, limit: int = 1000) -> str:
    """An exception or message as one line (newlines folded), cut at `limit` characters."""
    text = re.sub(r"\s*[\r\n]+\s*", " ", str(e)).strip() or type(e).__name__
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _echo(text: str) -> str:
    """A refused value as the message repeats it: a number as typed, anything else quoted (and cut)."""
    text = str(text)
    if len(text) <= MAX_ECHO and re.fullmatch(r"[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?(nan|inf|infinity)",
                                             text.strip(), re.I):
        return text.strip()
    return repr(text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + "...")


def _checked(fn, kind: str, **info):
    fn.checked, fn.kind = True, kind  # tests/test_cli_fuzz.py finds every option's check through these
    for k, v in info.items():
        setattr(fn, k, v)
    return fn


def int_in(lo: int, hi: int):
    """argparse type: a whole number in [lo, hi]."""
    def parse(text: str) -> int:
        try:
            v = int(str(text).strip())
        except ValueError:  # not a number, 1.5, 1e3, nan, a 100000-digit integer
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be an integer in [{lo}, {hi}], got {_echo(text)}")
        return v
    return _checked(parse, "int", lo=lo, hi=hi)


def float_in(lo: float, hi: float, *, open_lo: bool = False):
    """argparse type: a finite number in [lo, hi] ((lo, hi] with open_lo); NaN, inf and 1e309 refused."""
    def parse(text: str) -> float:
        try:
            v = float(str(text).strip())
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and (lo < v if open_lo else lo <= v) and v <= hi):
            raise argparse.ArgumentTypeError(
                f"must be a number in {'(' if open_lo else '['}{lo:g}, {hi:g}], got {_echo(text)}")
        return v
    return _checked(parse, "float", lo=lo, hi=hi, open_lo=open_lo)


def _nonempty(text: str) -> str:
    if not str(text).strip() or "\x00" in str(text):
        raise argparse.ArgumentTypeError("must not be empty" if "\x00" not in str(text) else
                                         "must not contain NUL characters")
    return text


nonempty = _checked(_nonempty, "str")  # argparse type: a non-empty string (model ids, devices, --stop, ...)


def input_file(text: str) -> str:
    """argparse type: an existing file (its content is checked by whoever reads it)."""
    p = Path(_nonempty(text))
    if not p.exists():
        raise argparse.ArgumentTypeError(f"must name an existing file; {_echo(text)} does not exist")
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"must name a file; {_echo(text)} is a directory")
    return text


def input_dir(text: str) -> str:
    """argparse type: an existing folder."""
    p = Path(_nonempty(text))
    if not p.is_dir():
        raise argparse.ArgumentTypeError(
            f"must name an existing folder; {_echo(text)} " + ("is a file" if p.exists() else "does not exist"))
    return text


def text_path(text: str) -> str:
    """argparse type: an existing folder, or a UTF-8 text file (NUL bytes or invalid UTF-8 = binary)."""
    p = Path(_nonempty(text))
    if not p.exists():
        raise argparse.ArgumentTypeError(f"must name existing files or folders; {_echo(text)} does not exist")
    if p.is_file() and is_binary(p):
        raise argparse.ArgumentTypeError(f"must name UTF-8 text files; {_echo(text)} is binary")
    return text


def output_file(text: str) -> str:
    """argparse type: a file to write (its folder is created), not an existing folder."""
    p = Path(_nonempty(text))
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"must name a file to write; {_echo(text)} is a directory")
    parent = next((a for a in p.absolute().parents if a.exists()), None)
    if parent is not None and not parent.is_dir():
        raise argparse.ArgumentTypeError(f"must name a file to write; {_echo(str(parent))} is a file, not a folder")
    return text


def output_dir(text: str) -> str:
    """argparse type: a folder to write into (created if missing), not an existing file."""
    p = Path(_nonempty(text))
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"must name a folder; {_echo(text)} is a file")
    parent = next((a for a in p.absolute().parents if a.exists()), None)
    if parent is not None and not parent.is_dir():
        raise argparse.ArgumentTypeError(f"must name a folder; {_echo(str(parent))} is a file, not a folder")
    return text


for _fn, _kind in ((input_file, "input_file"), (input_dir, "input_dir"), (text_path, "text_path"),
                   (output_file, "output_file"), (output_dir, "output_dir")):
    _checked(_fn, _kind)


def is_binary(path: Path, sample: int = 1 << 20) -> bool:
    """NUL bytes or invalid UTF-8 in the file's first `sample` bytes (a cut multi-byte character is fine)."""
    with open(path, "rb") as f:
        raw = f.read(sample)
    if b"\x00" in raw:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=len(raw) < sample)
    except UnicodeDecodeError:
        return True
    return False


# --- Stages that may take long (reading weights, packing them, tuning, loading a reference) ------------------
# A first run was silent for minutes (377 s for 9 s of decoding), and its lines arrived at once at the end. A
# stage of a model whose weights are SAY_MB or more (reading and packing them takes over a second on any CPU)
# says what it does as it starts, flushed; a small model's stages (and so its one-line refusals) print nothing,
# the same on a quiet or a busy machine. DECODESCOPE_SAY_STAGES=1 says every stage.
SAY_MB = 100
SAY_ENV = "DECODESCOPE_SAY_STAGES"


def says(mb: float | None) -> bool:
    """Whether a stage of a model with `mb` MB of weights is said (None: size unknown, not said)."""
    return os.environ.get(SAY_ENV, "").strip() == "1" or (mb is not None and mb >= SAY_MB)


@contextlib.contextmanager
def stage(what: str, mb: float | None = None):
    """Say `what` on stderr, flushed, as the block starts, when says(mb)."""
    if says(mb):
        print(what, file=sys.stderr, flush=True)
    yield
