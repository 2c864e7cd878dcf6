"""docs/cli.md's console-command list and `generate` synopsis are the parsers' own (scripts/cli_docs.py writes
them): a new method, option or command that the page does not show fails here, as a stale methods table does."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli_docs():
    spec = importlib.util.spec_from_file_location("cli_docs", ROOT / "scripts" / "cli_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_md_shows_what_the_parsers_have():
    docs = cli_docs()
    text = (ROOT / "docs" / "cli.md").read_text()
    assert docs.updated(text) == text, "docs/cli.md is stale: run python scripts/cli_docs.py"
    assert docs.main(["--check"]) == 0


def test_the_blocks_name_every_command_method_and_option():
    from decodescope.cli import COMMANDS
    from decoding.methods.registry import SPECS
    docs = cli_docs()
    b = docs.blocks()
    assert all(f" {c}" in b["commands"] for c in COMMANDS) and "convert" in COMMANDS and "fetch-model" in COMMANDS
    assert "--method " + "|".join(SPECS) in b["generate"].replace(" \\\n    ", " ")
    g = docs.generate_parser()
    for a in g._actions:
        if a.option_strings and a.help != argparse.SUPPRESS and "-h" not in a.option_strings:
            assert a.option_strings[-1] in b["generate"], a.option_strings


def test_a_new_option_makes_the_page_stale():
    """The check can fail: a parser with one more option gives another synopsis than the page holds."""
    docs = cli_docs()
    parser = docs.build_parser()
    docs.generate_parser(parser).add_argument("--planted-option", type=int, help="a planted option")
    assert "--planted-option PLANTED_OPTION" in docs.synopsis(parser)
    assert docs.synopsis(parser) != docs.synopsis()
