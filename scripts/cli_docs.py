"""Write docs/cli.md's console-command list and `generate` synopsis from the parsers themselves.

Why generated: the hand-written synopsis listed 9 methods after a tenth was registered, and the command list
lacked two commands the console command had. Here the command list is decodescope/cli.py's COMMANDS and the
synopsis is every option of `python -m decoding generate`'s parser (decoding/cli/main.py), so a new method,
option or command shows up the moment it exists. `--check` exits 1 when docs/cli.md is stale
(tests/test_cli_docs.py runs it).

    python scripts/cli_docs.py          # rewrite the marked blocks of docs/cli.md
    python scripts/cli_docs.py --check  # exit 1 if they are stale
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from decodescope.cli import COMMANDS  # noqa: E402
from decoding.cli.main import build_parser  # noqa: E402
from decoding.cli.method_flags import method_flags  # noqa: E402

DOC = ROOT / "docs" / "cli.md"
MARKS = {"commands": ("<!-- cli-commands -->", "<!-- /cli-commands -->"),
         "generate": ("<!-- generate-synopsis -->", "<!-- /generate-synopsis -->")}
# what an option's value is called in the synopsis (any other option shows its dest, upper-cased)
METAVAR = {"model": "PATH_OR_HUB_ID", "prompt": "TEXT", "max_new_tokens": "K", "temperature": "T", "top_k": "K",
           "top_p": "P", "seed": "S", "dtype": "fp32|bf16|fp16", "device": "cpu|cuda[:I]", "threads": "T",
           "json": "OUT", "prompt_file": "F|-", "stop": "TEXT"}
WIDTH = 116  # characters a synopsis line is wrapped at (continued with a backslash)
PROG = "python -m decoding generate"


def commands_line(commands: dict[str, str] = COMMANDS) -> str:
    """`decodescope generate | ... | app [--port N]`: every console command, in decodescope/cli.py's order."""
    return "`decodescope " + " | ".join(f"{c} [--port N]" if c == "app" else c for c in commands) + "`"


def generate_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The `generate` subcommand's own parser."""
    parser = parser or build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["generate"]


def option(a: argparse.Action) -> str:
    """One option as the synopsis shows it: `--flag`, `--flag VALUE` or `--flag a|b|c`."""
    flag = a.option_strings[-1]
    if a.nargs == 0:
        return flag
    value = "|".join(map(str, a.choices)) if a.choices else METAVAR.get(a.dest, a.dest.upper())
    return f"{flag} {value}"


def synopsis(parser: argparse.ArgumentParser | None = None) -> str:
    """Every option of `generate`, in the parser's order: the method's own flags named in one bracket (their
    ranges are in docs/methods.md), the others each with its value or choices."""
    g = generate_parser(parser)
    per_method = {f.dest for f in method_flags().values()}
    opts = [a for a in g._actions if a.option_strings and a.help != argparse.SUPPRESS and "-h" not in a.option_strings]
    words, methods_at = [], None
    for a in opts:
        if a.dest in per_method:
            methods_at = len(words) if methods_at is None else methods_at
            continue
        words.append(option(a) if a.dest in ("method", "prompt") else f"[{option(a)}]")
    flags = [a.option_strings[-1] for a in opts if a.dest in per_method]
    if methods_at is not None:  # one bracket, wrapped like the rest
        flags[0], flags[-1] = f"[method options (methods.md): {flags[0]}", f"{flags[-1]}]"
        words[methods_at:methods_at] = flags
    lines, line = [], PROG
    for w in words:
        if len(line) + 1 + len(w) > WIDTH:
            lines.append(line + " \\")
            line = "    " + w
        else:
            line += " " + w
    return "\n".join(lines + [line])


def blocks() -> dict[str, str]:
    """marker name -> the text between its markers."""
    return {"commands": commands_line(), "generate": f"```text\n{synopsis()}\n```"}


def updated(text: str) -> str:
    """docs/cli.md's text with every marked block rewritten; a ValueError names a missing marker."""
    for name, body in blocks().items():
        start, end = MARKS[name]
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"docs/cli.md lacks the markers {start} ... {end}")
        text = text[:i + len(start)] + "\n" + body + "\n" + text[j:]
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md's generated blocks are stale")
    a = ap.parse_args(argv)
    text = DOC.read_text()
    new = updated(text)
    if a.check:
        if new != text:
            print("docs/cli.md is stale: run python scripts/cli_docs.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        DOC.write_text(new)
        print("rewrote docs/cli.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
