"""Every command the README and docs/ show still works: each shell line that calls one of our CLIs parses
with that CLI's own argparse parser (nothing is decoded, no model loads), every script it names exists,
every ```python block compiles, and the README's Python example really runs (on the embedded model: the
test suite sets DECODESCOPE_NO_FETCH=1, so load() falls back to it).

Conventions the pages follow so this can check them: a ```bash block holds commands a reader can paste (a
synopsis with [optional] parts or a|b choices goes in a ```text block); a file the command reads that is not
in the repository (run.json, my_docs/) is the reader's own, so the test makes an empty stand-in for it; a
path into the repository (assets/..., bench/...) must exist."""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import json
import os
import re
import runpy
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell"}
OUR_MODULES = ("decoding", "profiling", "viz", "appkit", "decodescope")
REPO_TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: str

    @property
    def where(self) -> str:
        name = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{name}:{self.line}"


def blocks(page: Path, text: str | None = None) -> list[Block]:
    text = page.read_text() if text is None else text
    return [Block(page, text.count("\n", 0, m.start()) + 1, m.group(1).lower(), m.group(2))
            for m in FENCE.finditer(text)]


def shell_lines(body: str) -> str:
    """The block as one line of shell: backslash-newlines joined, comments dropped, other newlines -> ';'
    (newlines inside quotes, as in python -c "...", are kept)."""
    out, quote, i = [], None, 0
    while i < len(body):
        c = body[i]
        if quote:
            out.append(c)
            if c == "\\" and quote == '"' and i + 1 < len(body):
                out.append(body[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
            out.append(c)
        elif c == "\\" and body[i + 1:i + 2] == "\n":
            out.append(" ")
            i += 1
        elif c == "#" and (not out or out[-1][-1] in " \t;"):  # a comment starts a word
            while i < len(body) and body[i] != "\n":
                i += 1
            continue
        elif c == "\n":
            out.append(" ; ")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def commands(body: str) -> list[list[str]]:
    """Every simple command of a shell block, variables set earlier in the block expanded."""
    lex = shlex.shlex(shell_lines(body), posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    env: dict[str, str] = {}
    cmds, cur = [], []
    for tok in [*lex, ";"]:
        if tok in (";", "&&", "||", "|", "&", ";;"):
            while cur and re.fullmatch(r"[A-Za-z_]\w*=.*", cur[0]):  # VAR=value [cmd]
                k, v = cur.pop(0).split("=", 1)
                env[k] = v
            if cur:
                cmds.append(cur)
            cur = []
        else:
            cur.append(re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), tok))
    return cmds


@dataclass
class Cli:
    """One of our commands: how to run its argument parsing."""
    kind: str  # "module" (python -m / torchrun -m), "script" (python FILE.py), "console" (decodescope), "file"
    target: str
    args: list[str]


def our_cli(argv: list[str]) -> Cli | None:
    """Which of our CLIs a command calls, or None (pip, git, pytest, python -c ...)."""
    if not argv:
        return None
    prog = Path(argv[0]).name
    if prog in ("python", "python3") and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2 and argv[2].split(".")[0] in OUR_MODULES:
            return Cli("module", argv[2], argv[3:])
        if argv[1].endswith(".py"):
            return Cli("script", argv[1], argv[2:])
        return None
    if prog == "torchrun" and "-m" in argv:
        i = argv.index("-m")
        return Cli("module", argv[i + 1], argv[i + 2:])
    if prog == "decodescope":
        return Cli("console", "decodescope", argv[1:])
    if prog in ("bash", "sh") and len(argv) > 1 and argv[1].endswith(".sh"):
        return Cli("file", argv[1], argv[2:])
    return None


def our_commands(pages: list[Path] = PAGES) -> list[tuple[str, list[str]]]:
    return [(f"{b.where} `{' '.join(c)[:70]}`", c) for p in pages for b in blocks(p) if b.lang in SHELL
            for c in commands(b.body) if our_cli(c)]


class Parsed(BaseException):
    """Raised right after a CLI's argparse parser accepted its arguments: nothing after parsing runs."""


@contextlib.contextmanager
def stop_after_parsing():
    orig = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        ns = orig(self, args, namespace)
        raise Parsed(ns)
    argparse.ArgumentParser.parse_args = parse_args
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = orig


ENTRY = re.compile(r"^from (\.[\w.]*) import main$", re.M)  # a package's thin __main__.py: `from .cli.main import main`


def source_of(cli: Cli) -> Path:
    """The file whose parser reads the arguments: a thin __main__.py hands them to the module it imports main from."""
    if cli.kind in ("script", "file"):
        return ROOT / cli.target
    spec = importlib.util.find_spec(cli.target)
    assert spec is not None and spec.origin, f"no module {cli.target}"
    origin = Path(spec.origin)
    if origin.name != "__init__.py":
        return origin
    main = origin.parent / "__main__.py"
    entry = ENTRY.search(main.read_text()) if main.is_file() else None
    if entry:
        return source_of(Cli(cli.kind, importlib.util.resolve_name(entry.group(1), cli.target), cli.args))
    return main


def parse_once(cli: Cli) -> tuple[bool, str]:
    """(parsed, what argparse said): run the CLI's entry point until its parser has accepted the arguments."""
    err = io.StringIO()
    saved_argv = list(sys.argv)
    try:
        with stop_after_parsing(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if cli.kind == "console":
                from decodescope.cli import main
                rc = main(list(cli.args))
            elif cli.kind == "module":
                sys.argv = [cli.target, *cli.args]
                with warnings.catch_warnings():  # "found in sys.modules": imported earlier, run again here
                    warnings.simplefilter("ignore", RuntimeWarning)
                    runpy.run_module(cli.target, run_name="__main__", alter_sys=True)
                rc = None
            else:
                sys.argv = [str(ROOT / cli.target), *cli.args]
                runpy.run_path(str(ROOT / cli.target), run_name="__main__")
                rc = None
    except Parsed:
        return True, ""
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        sys.argv = saved_argv
    return rc == 0, err.getvalue().strip() or f"exit status {rc} without parsing its arguments"


MISSING = re.compile(r"must name (?:an )?existing (file|folder|files or folders)[^;]*; "
                     r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") does not exist")


def check_command(argv: list[str], workdir: Path, installed: bool = False) -> None:
    """Assert that argv (one of our CLIs, as a page shows it) parses; workdir is the current directory,
    holding the repository's top-level entries, where the reader's own files get stand-ins. installed: the
    package runs from a wheel's install and workdir holds nothing of the checkout, so a path into the
    checkout (assets/target) is an error: the reader who ran `pip install` has no such folder."""
    cli = our_cli(argv)
    src = source_of(cli)
    assert src.is_file(), f"{cli.target} does not exist"
    for tok in cli.args:  # a path into the repository must be there
        path = tok.split("=", 1)[-1]
        if "/" in path and path.split("/")[0] in REPO_TOP and not re.search(r"[*?<>{}$]", path):
            assert not installed, (f"{path} is a path into the checkout: from an installed package it does "
                                   "not exist (name it: embedded, embedded-draft, a shipped name)")
            assert (ROOT / path).exists(), f"{path} is named as a repository path but does not exist"
    code = src.read_text()
    compile(code, str(src), "exec")
    if cli.kind == "file":
        return
    # no argparse (neither parse_args nor a build_parser handing its parser to a shared runner): no options
    if "parse_args" not in code and "def build_parser" not in code and cli.kind != "console":
        assert not cli.args, f"{cli.target} reads no options (no argparse parser), yet is given {cli.args}"
        return
    made = []
    for _ in range(8):
        ok, said = parse_once(cli)
        if ok:
            return
        m = MISSING.search(said)
        if not m:
            break
        name = ast.literal_eval(m.group(2))
        if name.endswith("...") or Path(name).is_absolute() or name.split("/")[0] in REPO_TOP or name in made:
            break  # cut, absolute or the repository's own: nothing to stand in for
        stand_in = workdir / name
        if m.group(1) == "folder" or name.endswith("/"):
            stand_in.mkdir(parents=True, exist_ok=True)
        else:
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text("def f(x):\n    return x\n")
        made.append(name)
    raise AssertionError(f"`{' '.join(argv)}` does not parse: {said}")


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A current directory that shows the repository's top-level entries (links) and nothing else of it."""
    for name in REPO_TOP:
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


COMMANDS = our_commands()


def test_the_pages_show_commands_of_every_cli():
    """The extraction finds what the pages hold (an empty list would make the checks below pass vacuously)."""
    kinds = {(our_cli(c).kind, our_cli(c).target.split(".py")[0].split(".")[0]) for _, c in COMMANDS}
    assert {("module", "decoding"), ("module", "profiling"), ("module", "viz"), ("console", "decodescope"),
            ("script", "app")} <= kinds, kinds
    readme = [c for w, c in COMMANDS if w.startswith("README.md")]
    assert ["python", "app.py"] in readme and any(c[:4] == ["python", "-m", "decoding", "generate"] for c in readme)


@pytest.mark.parametrize("argv", [c for _, c in COMMANDS], ids=[w for w, _ in COMMANDS])
def test_every_command_on_the_pages_parses(argv, workdir):
    check_command(argv, workdir)


@pytest.mark.parametrize("argv", [
    ["python", "-m", "decoding", "generate", "--method", "lookahead", "--windw", "5"],  # a misspelt option
    ["python", "-m", "decoding", "generate", "--method", "lookahead", "--window", "0"],  # out of range
    ["python", "-m", "decoding", "generate", "--method", "beam_search"],  # no such method
    ["python", "-m", "decoding", "generate", "--model", "assets/no_such_model"],  # a repository path that is not
    ["python", "-m", "viz", "reprot", "run.json"],  # no such subcommand
    ["python", "-m", "profiling.project", "run.json", "--dtype", "int3"],
    ["decodescope", "generat", "--prompt", "x"],
    ["decodescope", "app", "--port", "80"],
    ["python", "bench/no_such_bench.py", "--quick"],
    ["python", "app.py", "--share"],  # app.py reads no options
], ids=lambda a: " ".join(a[1:4]))
def test_a_broken_command_fails_the_check(argv, workdir):
    with pytest.raises(AssertionError):
        check_command(argv, workdir)


def test_a_page_with_a_broken_command_is_caught(tmp_path, workdir):
    """The extraction reads continuation lines, comments, && chains and variables the way a shell does, and
    leaves a ```text synopsis alone."""
    page = tmp_path / "page.md"
    page.write_text("x\n\n```bash\n# a comment\nM=assets/target\npip install x && python -m decoding generate \\\n"
                    "    --model $M --windw 3   # typo\n```\n\n```text\npython -m decoding generate [--x]\n```\n")
    [(where, argv)] = our_commands([page])
    assert argv == ["python", "-m", "decoding", "generate", "--model", "assets/target", "--windw", "3"], argv
    assert where.startswith(f"{page}:3 ")
    with pytest.raises(AssertionError, match="--windw"):
        check_command(argv, workdir)


def test_the_readers_own_files_get_stand_ins(workdir):
    """The reader's own text and datastore (notes.txt, ds/) do not exist: stand-ins, made in the test's folder and
    never in the repository, let the parser check the rest of the line."""
    check_command(["python", "-m", "decoding", "train-heads", "--model", "assets/target", "--kind", "eagle",
                   "--data", "notes.txt", "--out", "heads_out"], workdir)
    check_command(["python", "-m", "decoding", "generate", "--method", "retrieval", "--datastore", "ds/"], workdir)
    assert (workdir / "notes.txt").is_file() and (workdir / "ds").is_dir()
    assert not (ROOT / "notes.txt").exists() and not (ROOT / "ds").exists()


# Runs inside the venv of tests/installed_wheel.py, in an empty folder outside the checkout: every command of
# the installed package's CLIs (python -m ..., decodescope) on the pages, checked as above against the install.
# Prints one JSON line: where the package was imported from, and each failure. The test that runs it is in
# tests/test_packaging.py, beside the other installed-wheel tests (one xdist worker builds the wheel and venv).
FROM_THE_WHEEL = r"""
import json, os, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])  # this file's folder: the checks and the pages, never the checkout's packages
import decoding
import test_docs_commands as t
failed = []
for where, argv in t.COMMANDS:
    if t.our_cli(argv).kind not in ("module", "console"):
        continue
    work = Path(tempfile.mkdtemp(dir=os.getcwd()))
    os.chdir(work)
    try:
        t.check_command(argv, work, installed=True)
    except AssertionError as e:
        failed.append(f"{where}: {e}")
print(json.dumps({"decoding": decoding.__file__, "failed": failed}))
"""


def test_a_checkout_path_fails_the_installed_check(tmp_path, monkeypatch):
    """The installed check refuses a path only a checkout has, where the checkout's check accepts it."""
    monkeypatch.chdir(tmp_path)
    argv = ["python", "-m", "decoding", "generate", "--model", "assets/target"]
    with pytest.raises(AssertionError, match="path into the checkout"):
        check_command(argv, tmp_path, installed=True)
    check_command(["python", "-m", "decoding", "generate", "--model", "embedded"], tmp_path, installed=True)


PYTHON = [b for p in PAGES for b in blocks(p) if b.lang in ("python", "py")]


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_every_python_block_compiles(block):
    compile(block.body, block.where, "exec")


def test_the_readme_python_example_runs(workdir, capsys):
    """The README's example, as printed, on the embedded model (DECODESCOPE_NO_FETCH=1 in the test suite)."""
    assert os.environ.get("DECODESCOPE_NO_FETCH") == "1"
    example = next(b for b in blocks(ROOT / "README.md") if b.lang == "python")
    assert len(example.body.strip().splitlines()) <= 12, "the README's example is meant to stay about 10 lines"
    scope: dict = {}
    exec(compile(example.body, example.where, "exec"), scope)
    from decoding import Trace
    saved = Trace.load(workdir / "run.json")
    assert saved.output_ids == scope["trace"].output_ids and saved.method == "lookahead"
    assert scope["sampled"].output_ids and capsys.readouterr().out.strip()


def test_the_readme_keeps_what_ci_and_the_scripts_read():
    """.ci/run executes the line after the test-command marker; the methods table sits between its markers
    (scripts/methods_table.py writes it from the specs) and names every registered method, once."""
    readme = (ROOT / "README.md").read_text()
    assert readme.count("<!-- test-command -->") == 1
    after = readme.split("<!-- test-command -->\n", 1)[1]
    # the whole suite: two workers on what is not marked timing, then the timing tests alone
    assert after.startswith("```bash\npip install -r requirements.txt -r requirements-dev.txt -c constraints.txt"
                            " && python -m pytest -q -n 2 --dist loadfile -m \"not timing\""
                            " && python -m pytest -q -m timing\n```")
    assert readme.count("<!-- methods-table -->") == 1 and readme.count("<!-- /methods-table -->") == 1
    table = readme.split("<!-- methods-table -->", 1)[1].split("<!-- /methods-table -->", 1)[0].strip().splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert len(header) == 5 and header[0] == "method" and header[-1] == "paper", header
    from decoding import METHODS
    names = [re.match(r"\| `(\w+)` \|", row).group(1) for row in table[2:]]
    assert sorted(names) == sorted(METHODS), names
    assert len(readme.splitlines()) < 250


LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def test_relative_links_in_the_pages_resolve():
    broken = [f"{p.relative_to(ROOT)}: {target}" for p in PAGES for target in LINK.findall(p.read_text())
              if "://" not in target and not target.startswith("mailto:") and not (p.parent / target).exists()]
    assert not broken, broken
