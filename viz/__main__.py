"""CLI: python -m viz report TRACE.json -o report.html [--profile PROFILE.json] [--title TEXT]
     python -m viz side-by-side A.json B.json [...] -o sbs.html  (runs of one prompt, linked step views)

Turns any trace file (Trace.save, `python -m decoding generate --json`, the app's download, older versions)
into the standalone offline HTML report. Bad input ends with one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m viz", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="write the offline HTML report of a recorded trace")
    r.add_argument("trace", help="trace JSON (any DecodeScope trace version)")
    r.add_argument("-o", "--out", default="report.html", help="HTML file to write (default report.html)")
    r.add_argument("--profile", default=None, help="profile JSON from python -m profiling (adds the cost panel)")
    r.add_argument("--title", default=None)
    s = sub.add_parser("side-by-side", help="write an offline page comparing runs of one prompt step by step")
    s.add_argument("traces", nargs="+", help="two or more trace JSON files (named by their method)")
    s.add_argument("-o", "--out", default="side_by_side.html")
    s.add_argument("--title", default=None)
    return ap


def side_by_side(args: argparse.Namespace) -> int:
    from decoding.trace import Trace

    from .report import write_side_by_side
    if len(args.traces) < 2:
        raise ValueError("side-by-side needs two or more trace files")
    runs = {}
    for f in args.traces:
        tr = Trace.load(f)
        name, k = tr.method, 2
        while name in runs:  # two settings of one method: lookahead, lookahead 2, ...
            name, k = f"{tr.method} {k}", k + 1
        runs[name] = tr
    path = write_side_by_side(runs, args.out, args.title)
    print(f"wrote {path} ({', '.join(runs)}; {path.stat().st_size / 1e3:.0f} kB)")
    return 0


def report(args: argparse.Namespace) -> int:
    from decoding.trace import Trace

    from .report import write_report
    tr = Trace.load(args.trace)
    profile = None
    if args.profile:
        from profiling.profiler import load_profile  # viz reads the dict; profiling owns its schema
        profile = load_profile(args.profile)
    path = write_report(tr, args.out, profile=profile, title=args.title)
    print(f"wrote {path} ({tr.method}, {len(tr.steps)} steps, {path.stat().st_size / 1e3:.0f} kB)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return side_by_side(args) if args.command == "side-by-side" else report(args)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
