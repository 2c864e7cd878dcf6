"""The engineer's habits for `python -m decoding generate`: prompts from a file or stdin (several per run),
--chat (the tokenizer's chat template), --stop strings, --stream, and the timing lines: time to first token,
time per output token, achieved memory bandwidth (gpt-fast's GB/s) and `--compare greedy` (measured
speed-up against plain greedy on the same prompt). Kept out of __main__.py so its structure stays as is.
"""
from __future__ import annotations

import argparse
import codecs
import contextlib
import json
import math
import re
import sys
import time
from pathlib import Path

from .api import run, vocab_for
from .models import describe
from .trace import Trace

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


def read_text_file(path: str | Path, what: str) -> str:
    """A UTF-8 text file's content; missing, a folder, NUL bytes or not UTF-8 -> ValueError / OSError."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a directory, not a file")
    raw = p.read_bytes()  # a missing file: FileNotFoundError, "No such file or directory"
    try:
        if b"\x00" in raw:
            raise UnicodeDecodeError("utf-8", raw, 0, 1, "NUL byte")
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {p.name!r} is binary, not UTF-8 text") from None


# Errors a malformed document can raise inside a reader or a renderer that does not check it itself.
MALFORMED = (TypeError, AttributeError, KeyError, IndexError, RecursionError, ArithmeticError)


def load_trace(path: str | Path) -> Trace:
    """Trace.load for the CLIs: anything that is not a readable trace is a ValueError (one line) or OSError."""
    try:
        return Trace.load(path)
    except MALFORMED as e:  # last guard: Trace.load validates the document itself
        raise ValueError(not_a_trace(path, e)) from None


def not_a_trace(path: str | Path, e: BaseException) -> str:
    return f"not a DecodeScope trace: {Path(path).name}: {type(e).__name__}: {one_line(e, 300)}"


def add_arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("--prompt-file", default=None, type=nonempty,
                   help="prompts to decode one after another: a text file with one prompt per line, a .json "
                        "list of strings, or a .jsonl file with one JSON string per line (a prompt with line "
                        "breaks needs one of the JSON forms); - reads stdin, split the same way (a JSON list, "
                        "JSON strings one per line, else one prompt per line); each output is labelled "
                        "[i/n] and separated by a line of dashes")
    g.add_argument("--chat", action="store_true",
                   help="wrap each prompt as a user turn in the tokenizer's chat template")
    g.add_argument("--stop", action="append", default=None, type=nonempty,
                   help="stop once the output contains this text (repeatable; kept in the output, like HF "
                        "stop_strings)")
    g.add_argument("--stream", action="store_true", help="print the text as each step accepts tokens")
    g.add_argument("--compare", choices=("greedy",), default=None,
                   help="also run plain greedy on the same prompt and print the measured speed-up")


def read_prompts(args: argparse.Namespace) -> list[str]:
    """--prompt, or --prompt-file (- = stdin): the raw prompts, checked non-empty."""
    if args.prompt_file is None:
        if args.prompt is None:
            raise ValueError("give --prompt TEXT or --prompt-file PATH (- for stdin)")
        return [args.prompt]
    if args.prompt is not None:
        raise ValueError("give either --prompt or --prompt-file, not both")
    if args.prompt_file == "-":
        text, name = sys.stdin.read(), "stdin"
        if "\x00" in text:
            raise ValueError("the prompt on stdin is binary (NUL bytes), not text")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        kind = ("json" if text.strip().startswith("[") else
                "jsonl" if lines and all(line.startswith('"') for line in lines) else "txt")
    else:
        path = Path(args.prompt_file)
        text, name = read_text_file(path, "prompt file"), path.name
        kind = {".json": "json", ".jsonl": "jsonl"}.get(path.suffix, "txt")
    try:
        if kind == "json":
            prompts = json.loads(text)
        elif kind == "jsonl":
            prompts = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            prompts = [line for line in text.splitlines() if line.strip()]
    except RecursionError:
        raise ValueError(f"{name} is nested too deeply: not a list of prompt strings") from None
    except ValueError as e:  # JSONDecodeError, an integer of 100000 digits
        raise ValueError(f"{name} is not valid JSON ({one_line(e, 200)})") from None
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"{name} must hold prompt strings (a JSON list, or one JSON string per line)")
    if any("\x00" in p for p in prompts):
        raise ValueError(f"prompt file {name!r} holds a NUL character: prompts must be text")
    prompts = [p for p in prompts if p.strip()]
    if not prompts:
        raise ValueError("the prompt file has no prompts")
    return prompts


def with_template(tok, prompts: list[str], chat: bool) -> list:
    """Prompts as run() takes them: text, or with --chat the chat template's token ids."""
    if not chat:
        return prompts
    if not getattr(tok, "chat_template", None):
        raise ValueError("--chat: this tokenizer has no chat template; drop --chat or use a chat model")
    return [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]) for p in prompts]


class _Stopped(Exception):
    pass


def decode(model, tok, prompt, args: argparse.Namespace, drafter, sampling, static) -> Trace:
    """run() with streaming and stop strings (a stop ends the run after the step that produced it)."""
    printed = [""]

    def show(new: list[int], out: list[int]) -> None:
        text = tok.decode(out)
        sys.stdout.write(text[len(printed[0]):] if text.startswith(printed[0]) else "\n" + text)
        sys.stdout.flush()
        printed[0] = text

    tr = decode_until(model, tok, prompt, args.method, max_new_tokens=args.max_new_tokens, sampling=sampling,
                      drafter=drafter, static=static, stops=args.stop or [], on_tokens=show if args.stream else None)
    if args.stream:
        sys.stdout.write("\n")
    return tr


def decode_until(model, tok, prompt, method: str, *, max_new_tokens: int, sampling, drafter, static=None,
                 stops: list[str] = (), on_tokens=None) -> Trace:
    """run() that ends once the output text contains a stop string (the output keeps it, cut after the token
    that completes it, as transformers' stop_strings do) and hands on_tokens(new_ids, output_ids) exactly
    the tokens that stay in the output, step by step (streamers)."""
    stops, steps, sent, t0 = list(stops or []), [], [0], time.perf_counter()

    def on_step(step, out):
        steps.append(step)
        keep = out
        if stops and any(s in tok.decode(out) for s in stops):
            keep = cut_at_stop(tok, list(out), stops)
        if on_tokens is not None and len(keep) > sent[0]:
            on_tokens(list(keep[sent[0]:]), list(keep))
            sent[0] = len(keep)
        if keep is not out:
            raise _Stopped

    hook = on_step if (stops or on_tokens) else None
    try:
        tr = run(model, tok, prompt, method, max_new_tokens=max_new_tokens, sampling=sampling,
                 drafter=drafter, static=static, on_step=hook)
    except _Stopped:
        ids = list(prompt) if isinstance(prompt, list) else tok(prompt)["input_ids"]
        tr = Trace(drafter.name, {**drafter.config(), "max_new_tokens": max_new_tokens,
                                  "sampling": sampling.to_dict(), "static": static}, ids, steps=steps)
        tr.wall_s = time.perf_counter() - t0
        tr.output_ids = cut_at_stop(tok, [t for s in steps for t in s.accepted], stops)
        extra = sum(len(s.accepted) for s in steps) - len(tr.output_ids)
        last = steps[-1]
        keep = len(last.accepted) - extra
        last.accepted, last.origins = last.accepted[:keep], last.origins[:keep]
        tr.stop_reason, tr.model, tr.text = "stop", describe(model), tok.decode(tr.output_ids)
        tr.vocab = vocab_for(tr, tok)
    return tr


def cut_at_stop(tok, ids: list[int], stops: list[str]) -> list[int]:
    """The shortest prefix whose text contains a stop string (HF stop_strings keep it in the output)."""
    for k in range(1, len(ids) + 1):
        if any(s in tok.decode(ids[:k]) for s in stops):
            return ids[:k]
    return ids


def timing_line(tr: Trace, model) -> str:
    """TTFT (the prefill step), time per output token after it, and gpt-fast's achieved bandwidth: the
    target's weight bytes read once per forward pass, over the wall time (KV reads not counted)."""
    n, wall_ms = len(tr.output_ids), tr.wall_s * 1e3
    ttft = tr.steps[0].wall_ms if tr.steps else 0.0
    tpot = (wall_ms - ttft) / (n - 1) if n > 1 else 0.0
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    gbs = weights * len(tr.steps) / tr.wall_s / 1e9 if tr.wall_s > 0 else 0.0
    return (f"[timing] time to first token {ttft:.1f} ms, {tpot:.2f} ms per output token after it, "
            f"achieved bandwidth {gbs:.2f} GB/s ({weights / 1e6:.1f} MB of weights x {len(tr.steps)} forward passes "
            f"/ {tr.wall_s:.3f} s, as gpt-fast counts it)")


def compare_line(model, tok, prompt, tr: Trace, sampling, static) -> str:
    """Plain greedy on the same prompt, timed after the method's run (both warm): the measured speed-up."""
    g = run(model, tok, prompt, "greedy", max_new_tokens=tr.config["max_new_tokens"], sampling=sampling,
            trace=False, static=static)
    g_tps = len(g.output_ids) / g.wall_s if g.wall_s > 0 else 0.0
    m_tps = len(tr.output_ids) / tr.wall_s if tr.wall_s > 0 else 0.0
    same = ""
    if sampling.greedy:
        n = len(tr.output_ids)
        same = "; output identical to greedy" if g.output_ids[:n] == tr.output_ids else "; output DIFFERS from greedy"
    return (f"[compare] greedy {g_tps:.1f} tokens/s, {tr.method} {m_tps:.1f} tokens/s: speed-up "
            f"{m_tps / g_tps if g_tps else 0.0:.2f}x (one run each, same prompt, measured here){same}")


LABEL_CHARS = 40  # characters of a prompt repeated in its output's label
SEPARATOR = "-" * 40


def prompt_label(index: int, count: int, prompt) -> str:
    """`[2/3] def fibonacci(n):` : which prompt an output belongs to (its first 40 characters, one line)."""
    text = one_line(prompt if isinstance(prompt, str) else "", 10_000)
    if len(text) > LABEL_CHARS:
        text = text[:LABEL_CHARS] + "\u2026"
    return f"[{index + 1}/{count}] {text}"


def check_writable(path: str) -> None:
    """Fail before the run when the trace cannot be written there (its folder is created, as saving would)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        existed = p.exists()
        with open(p, "a"):
            pass
        if not existed:
            p.unlink()
    except OSError as e:
        raise ValueError(f"cannot write --json {path}: {e.strerror or type(e).__name__}") from None


def json_path(out: str, index: int, count: int) -> str:
    """OUT for one prompt; OUT-1.json, OUT-2.json ... for several (one trace document each)."""
    if count == 1:
        return out
    p = Path(out)
    return str(p.with_name(f"{p.stem}-{index + 1}{p.suffix or '.json'}"))
