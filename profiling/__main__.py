"""CLI: profile any model and method, write trace JSON, profile JSON and a Perfetto trace, print a summary.

    python -m profiling --method lookahead --window 5 --ngram 4 --guesses 5 \\
        --prompt "def fib(n):" --max-new-tokens 64 --out runs/prof

Method options are generate's own (`python -m decoding generate --help`: --tree, --staged, --auto, --draft,
--trust-remote-code, --dtype, --device, ...), added and resolved by the same code (decoding/cli/method_flags.py), so
the two CLIs never drift.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from decoding.cli.habits import OneLineParser, int_in, nonempty, one_line, output_dir, with_template
from decoding.cli.method_flags import add_generate_arguments, setup
from decoding.methods.registry import BASELINE
from decoding.models import ModelError

from .profiler import profile_run, save_profile, write_step_ranges
from .sweep import format_sweep, latency_sweep


# generate's options that only generate uses: the profiler runs one --prompt and writes its files to --out
# (--chat it shares: a chat model's answer is profiled on the prompt generate --chat would run)
GENERATE_ONLY = ("prompt_file", "stop", "stream", "compare", "json", "check_exact")


def build_parser() -> argparse.ArgumentParser:
    """`generate`'s options (one builder: model, method, W/N/G, draft, --tree, --staged, --auto, dtype,
    device, --trust-remote-code ..., with their range checks) plus the profiler's own."""
    ap = OneLineParser(prog="python -m profiling", description=__doc__.splitlines()[0], conflict_handler="resolve")
    add_generate_arguments(ap)
    ap.set_defaults(method=BASELINE)
    for a in ap._actions:  # still parsed (to refuse them by name, below) but not listed: they never work here
        if a.dest in GENERATE_ONLY:
            a.help = argparse.SUPPRESS
    ap.add_argument("--prompt", default="def fibonacci(n):", type=nonempty,
                    help="text, tokenised exactly as tokenizer(prompt)")
    ap.add_argument("--no-peaks", action="store_true", help="skip the peak FLOP/s and bandwidth calibration")
    ap.add_argument("--sweep", action="store_true", help="also sweep step latency vs query tokens")
    ap.add_argument("--sweep-kv", type=int_in(1, 131072), default=512,
                    help="KV length the sweep runs against, 1..131072 (capped at the model's positions)")
    ap.add_argument("--out", default="runs/profile", type=output_dir, help="output directory")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options; --help and a refused argument raise SystemExit (main() returns its status)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    given = [f"--{k.replace('_', '-')}" for k in GENERATE_ONLY if getattr(args, k, None) not in (None, False)]
    if given:  # accepted by the shared builder, but nothing here would use them
        ap.error(f"{', '.join(given)}: generate's option{'s' if len(given) > 1 else ''}, not the profiler's "
                 "(python -m profiling profiles one --prompt and writes its files to --out)")
    return args


def summary_table(profile: dict) -> str:
    """Per-step rows plus totals, readable in a terminal."""
    peaks = profile.get("peaks")
    head = f"{profile['method']} on {profile['device']} ({profile['dtype']})"
    if peaks:
        src = "measured" if "measured_at" in peaks else "given"
        head += f": peak {peaks['flops'] / 1e9:.1f} GFLOP/s, {peaks['bandwidth'] / 1e9:.1f} GB/s {src}"
    rows = [head, f"{'step':>4} {'kind':<7} {'q':>4} {'kv':>5} {'acc':>3} {'ms':>8} {'MFLOP':>9} "
                  f"{'MB':>8} {'FLOP/B':>7} {'GFLOP/s':>8} {'roof%':>6}"]
    for s in profile["steps"]:
        roof = f"{100 * s['roof_fraction']:.1f}" if "roof_fraction" in s else "-"
        rows.append(f"{s['index']:>4} {s['kind']:<7} {s['n_query']:>4} {s['kv_len']:>5} {s['accepted']:>3} "
                    f"{s['wall_ms']:>8.2f} {s['total_flops'] / 1e6:>9.2f} {s['bytes'] / 1e6:>8.2f} "
                    f"{s['intensity']:>7.2f} {s['achieved_flops'] / 1e9:>8.2f} {roof:>6}")
    t = profile["totals"]
    rows.append(f"{t['steps']} steps, {t['tokens']} tokens, {t['flops'] / 1e9:.3f} GFLOP total, "
                f"mean decode query {t['mean_query']:.1f} tokens, "
                f"peak memory {profile['memory']['peak_bytes'] / 2**20:.0f} MiB ({profile['memory']['kind']})")
    return "\n".join(rows)


def size(path: Path) -> str:
    """A file's size in words: kB below a megabyte, else MB."""
    n = path.stat().st_size
    return f"{n / 1e3:.0f} kB" if n < 1e6 else f"{n / 1e6:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:  # --help (0), or a refused argument (2, its one line already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()  # one clear line from us, not library warnings
    hf_logging.disable_progress_bar()
    try:
        model, tok, drafter, sampling = setup(args)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        prompt = with_template(tok, [args.prompt], args.chat)[0]  # --chat: the template's ids, as generate's
        tr, prof = profile_run(model, tok, prompt, args.method, max_new_tokens=args.max_new_tokens,
                               sampling=sampling, drafter=drafter, perfetto_path=out / f"{args.method}.perfetto.json",
                               measure_peaks=not args.no_peaks,
                               static={"auto": None, "on": True, "off": False}[args.static],
                               draft_model=getattr(drafter, "draft", None))  # the draft's own costs
    except (ValueError, ModelError, OSError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    tr.save(out / f"{args.method}.trace.json")
    if args.sweep:
        prof["sweep"] = latency_sweep(model, kv_len=args.sweep_kv)
    save_profile(prof, out / f"{args.method}.profile.json")
    print(summary_table(prof))
    if args.sweep:
        print(format_sweep(prof["sweep"]))
    full = out / f"{args.method}.perfetto.json"
    small = write_step_ranges(full, args.method, out / f"{args.method}.steps.perfetto.json")
    print(f"wrote {out}/{args.method}.trace.json ({size(out / f'{args.method}.trace.json')}), .profile.json "
          f"({size(out / f'{args.method}.profile.json')}), .perfetto.json ({size(full)}: every operator of every "
          f"step; open in ui.perfetto.dev) and .steps.perfetto.json ({size(small)}: the step ranges only, to share)")
    print(f"text: {tr.text[:200]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
