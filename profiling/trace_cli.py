"""The command lines that read one recorded trace and print a table (python -m profiling.operators,
python -m profiling.project): the same positional trace argument and the same rule for bad input, so the
two cannot drift apart in what they refuse or how they say it."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable


def trace_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A one-line-error parser whose first argument is the trace file; the caller adds its own options."""
    from decoding.cli.habits import OneLineParser, nonempty
    ap = OneLineParser(prog=prog, description=description)
    ap.add_argument("trace", type=nonempty, help="a trace JSON (any DecodeScope trace version)")
    return ap


def run_on_trace(parser: argparse.ArgumentParser, argv: list[str] | None,
                 table: Callable[[argparse.Namespace, Any], str]) -> int:
    """Parse argv, load the trace, print table(args, trace); exit 0. Bad input (a missing or malformed trace,
    a value the table refuses: a step not in it, an unknown device) is one line on stderr, exit 2."""
    from decoding.cli.habits import MALFORMED, load_trace, not_a_trace, one_line, parse_args
    args = parse_args(parser, argv)
    if isinstance(args, int):  # --help (0), or a refused argument (2, its one line already printed)
        return args
    try:
        text = table(args, load_trace(args.trace))
    except MALFORMED as e:  # last guard: a trace the loader let through that the table cannot read
        print(f"error: {not_a_trace(args.trace, e)}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(text)
    return 0
