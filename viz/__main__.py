"""CLI: python -m viz report TRACE.json -o report.html [--profile PROFILE.json] [--title TEXT]
     python -m viz side-by-side A.json B.json [...] -o sbs.html  (runs of one prompt, linked step views)
     python -m viz gif TRACE.json -o run.gif [--steps 3,5,8] [--width 1100] [--ms 1200]
     python -m viz comm-steps TRACE.json [--out comm_steps.html]  (compute vs communication per step)
     python -m viz lp-window TRACE.json [--step K] [--out lp_window.html]  (lookahead-parallel window by rank)

Turns any trace file (Trace.save, `python -m decoding generate --json`, the app's download, older versions)
into the standalone offline HTML report or one of the pictures. Why every command lives here: the picture
modules (viz/steps, viz/summaries, viz/exports) stay library code that never imports the CLI helpers. Bad
input ends with one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    from decoding.cli.habits import OneLineParser, input_file, int_in, nonempty, output_file
    ap = OneLineParser(prog="python -m viz", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="write the offline HTML report of a recorded trace")
    r.add_argument("trace", type=nonempty, help="trace JSON (any DecodeScope trace version)")
    r.add_argument("-o", "--out", default="report.html", type=output_file,
                   help="HTML file to write (default report.html)")
    r.add_argument("--profile", default=None, type=input_file,
                   help="profile JSON from python -m profiling (adds the cost panel)")
    r.add_argument("--title", default=None, type=nonempty)
    s = sub.add_parser("side-by-side", help="write an offline page comparing runs of one prompt step by step")
    s.add_argument("traces", nargs="+", type=nonempty, help="two or more trace JSON files (named by their method)")
    s.add_argument("-o", "--out", default="side_by_side.html", type=output_file)
    s.add_argument("--title", default=None, type=nonempty)
    g = sub.add_parser("gif", help="write an animated GIF of a run's steps (headless Chromium)")
    g.add_argument("trace", type=nonempty, help="trace JSON")
    g.add_argument("-o", "--out", default="run.gif", type=output_file)
    g.add_argument("--steps", type=_steps, default=None, help="step numbers, e.g. 3,5,8 (default: the steps that teach)")
    g.add_argument("--width", type=int, default=1100, choices=range(400, 2401), metavar="400..2400")
    g.add_argument("--ms", type=int, default=1200, choices=range(100, 10001), metavar="100..10000")
    c = sub.add_parser("comm-steps", help="write compute vs communication per step of a multi-process run")
    c.add_argument("trace", type=nonempty)
    c.add_argument("--out", type=output_file, default="comm_steps.html")
    w = sub.add_parser("lp-window", help="write one step's lookahead-parallel window coloured by rank")
    w.add_argument("trace", type=nonempty)
    w.add_argument("--step", type=int_in(0, 10_000), default=1)
    w.add_argument("--out", type=output_file, default="lp_window.html")
    return ap


def _steps(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes step numbers like 3,5,8, got {text!r}") from None


def gif(args: argparse.Namespace) -> int:
    from decoding.cli.habits import load_trace

    from .exports.gif import write_gif
    path = write_gif(load_trace(args.trace), args.out, args.steps, args.width, args.ms)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    return 0


def comm_steps(args: argparse.Namespace) -> int:
    from .common import as_trace
    from .summaries.comm_steps import data, figure, totals
    tr = as_trace(args.trace)
    figure(tr).write_html(args.out, include_plotlyjs=True)  # inline: the page works offline
    for t in totals(data(tr) or {"series": []}):
        print(f"{t['name']}: compute {t['compute_ms']:.1f} ms, communication {t['comm_ms']:.1f} ms "
              f"({100 * t['comm_share']:.0f}%)")
    print(args.out)
    return 0


def lp_window(args: argparse.Namespace) -> int:
    from .common import as_trace
    from .summaries.lp_window import figure
    tr = as_trace(args.trace)
    if args.step >= len(tr.steps):
        raise ValueError(f"--step {args.step}: the trace has {len(tr.steps)} steps")
    figure(tr, args.step).write_html(args.out, include_plotlyjs=True)  # inline: the page works offline
    print(args.out)
    return 0


def side_by_side(args: argparse.Namespace) -> int:
    from decoding.cli.habits import load_trace

    from .summaries.report import write_side_by_side
    if len(args.traces) < 2:
        raise ValueError("side-by-side needs two or more trace files")
    runs, first = {}, None
    for f in args.traces:
        tr = load_trace(f)
        if first is None:
            first = (f, tr)
        elif list(tr.prompt_ids) != list(first[1].prompt_ids):  # step k of one run is not step k of the other
            raise ValueError(f"{Path(f).name} and {Path(first[0]).name} decode different prompts ({len(tr.prompt_ids)} "
                             f"and {len(first[1].prompt_ids)} prompt tokens{'' if len(tr.prompt_ids) != len(first[1].prompt_ids) else ', other ids'}): "
                             "side-by-side lines up the steps of runs of ONE prompt; write a report per run instead")
        name, k = tr.method, 2
        while name in runs:  # two settings of one method: lookahead, lookahead 2, ...
            name, k = f"{tr.method} {k}", k + 1
        runs[name] = tr
    path = write_side_by_side(runs, args.out, args.title)
    print(f"wrote {path} ({', '.join(runs)}; {path.stat().st_size / 1e3:.0f} kB)")
    return 0


def report(args: argparse.Namespace) -> int:
    from decoding.cli.habits import MALFORMED, load_trace, one_line

    from .summaries.report import write_report
    tr = load_trace(args.trace)
    profile = None
    if args.profile:
        from profiling.profiler import load_profile  # viz reads the dict; profiling owns its schema
        try:
            profile = load_profile(args.profile)
        except MALFORMED as e:  # a JSON file that is not an object, nested too deeply, ...
            raise ValueError(f"not a DecodeScope profile: {args.profile}: {type(e).__name__}: {one_line(e, 300)}") \
                from None
    path = write_report(tr, args.out, profile=profile, title=args.title)
    print(f"wrote {path} ({tr.method}, {len(tr.steps)} steps, {path.stat().st_size / 1e3:.0f} kB)")
    return 0


COMMANDS = {"report": report, "side-by-side": side_by_side, "gif": gif, "comm-steps": comm_steps,
            "lp-window": lp_window}


def main(argv: list[str] | None = None) -> int:
    from decoding.cli.habits import MALFORMED, one_line, parse_args
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):  # --help (0), or a refused argument (2, its one line already printed)
        return args
    try:
        return COMMANDS[args.command](args)
    except MALFORMED as e:  # last guard: a trace or profile the loaders let through that the page cannot render
        print(f"error: not a DecodeScope trace or profile the report can render: {type(e).__name__}: "
              f"{one_line(e, 300)}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
