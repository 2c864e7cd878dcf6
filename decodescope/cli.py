"""decodescope generate | profile | report | app — one console command over the four CLIs.

    decodescope generate --prompt "def fib(n):" --method lookahead    # = python -m decoding generate ...
    decodescope profile --method lookahead --out runs/prof             # = python -m profiling ...
    decodescope report run.json -o report.html                         # = python -m viz report ...
    decodescope project run.json                                       # = python -m profiling.project ...
    decodescope app                                                    # = python app.py

Each subcommand hands its arguments to that module's own main(), so options, messages and exit
statuses (2 = bad input, one line) are the same whichever way it is called.
"""
from __future__ import annotations

import sys

COMMANDS = {"generate": "decode a prompt and print the text and run statistics",
            "profile": "profile a run: per-step ranges, FLOPs/bytes, roofline, Perfetto trace",
            "report": "write the offline HTML report of a recorded trace",
            "project": "what if on A100 / H100 / H200: a trace's roofline projection from datasheet peaks",
            "app": "start the Gradio app (http://127.0.0.1:7860)"}


def usage() -> str:
    rows = "\n".join(f"  {k:<9} {v}" for k, v in COMMANDS.items())
    return (f"usage: decodescope {{{','.join(COMMANDS)}}} [options]\n\n{rows}\n\n"
            "`decodescope COMMAND --help` lists a command's options.")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv:  # bad input: one line on stderr, like every subcommand's own errors
        print(f"error: give a command: {', '.join(COMMANDS)} (decodescope --help lists them)", file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "generate":
        from decoding.__main__ import main as run
        return run(["generate", *rest])
    if cmd == "profile":
        from profiling.__main__ import main as run
        return run(rest)
    if cmd == "report":
        from viz.__main__ import main as run
        return run(["report", *rest])
    if cmd == "project":
        from profiling.project import main as run
        return run(rest)
    if cmd == "app":
        if rest:
            print("error: decodescope app takes no options (PORT / GRADIO_SERVER_PORT set the port)", file=sys.stderr)
            return 2
        import app
        app.main()
        return 0
    print(f"error: unknown command {cmd!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
