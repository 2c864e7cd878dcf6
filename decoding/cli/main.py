"""CLI: python -m decoding generate --model M --method lookahead --prompt TEXT --max-new-tokens K ...

Bad input ends with one line on stderr and exit status 2, never a traceback. Greedy output equals HF
greedy in fp32 (by construction); in bf16/fp16 the CLI measures it against HF generate and says so.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..api import eos_of, run
from .habits import (REPEATS, SEPARATOR, THREADS, OneLineParser, add_compare_arguments, check_writable,
                      compare_lines, cut_at_stop, decode, display_text, float_in, input_dir, int_in, json_path,
                      nonempty, one_line, output_dir, parse_args, prompt_label, read_prompts, text_path, timing_line,
                      with_template)
from .args import stage
from .method_flags import add_generate_arguments, setup, target_name
from ..models import ModelError, load
from ..exactness import measure
from decoding.methods.resources import HEADS_KINDS as KINDS
from ..methods.registry import BASELINE, SPECS, needing

MEDUSA, EAGLE = KINDS  # train-heads' kinds of heads (decoding/methods/self_draft/heads.py)
ADAPTER = needing("adapter")[0]  # train-heads' kind for the self-speculative adapter: the method that needs one
TRAIN = {"n_heads": (1, 16), "max_tokens": (1, 1_000_000_000), "seq": (2, 65536), "batch": (1, 4096),
         "distill": (0, 65535), "unroll": (1, 16), "epochs": (0, 1000), "lr": (0, 1)}  # train-heads' ranges


def build_parser() -> argparse.ArgumentParser:
    """Every option that takes a value has a type that checks it (decoding/cli/habits.py) or choices: bad input
    is refused here, with one line, before a model loads."""
    ap = OneLineParser(prog="python -m decoding", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode a prompt and print the text and run statistics")
    add_generate_arguments(g)  # the method flags are generated from the specs (decoding/cli/method_flags.py)
    add_compare_arguments(g)  # --repeats (decoding/cli/habits.py)
    t = sub.add_parser("train-heads", help="train Medusa or EAGLE heads for a model on your text")
    r = {k: f"{lo}..{hi}" for k, (lo, hi) in TRAIN.items()}
    t.add_argument("--model", default=None, type=nonempty,
                   help="hub id or local directory (default: SmolLM2-135M-Instruct, fetched once; the embedded model when it cannot be)")
    t.add_argument("--kind", required=True, type=nonempty, help="medusa, eagle or self_speculative")
    t.add_argument("--exit-layer", type=int_in(1, 1024), default=None, metavar="K",
                   help="self_speculative: the draft is the model's first K layers + a trained adapter layer")
    t.add_argument("--data", required=True, nargs="+", type=text_path, help="text files and/or folders of text files")
    t.add_argument("--out", required=True, type=output_dir,
                   help="folder for heads.safetensors + heads.json (and resume state)")
    t.add_argument("--n-heads", type=int_in(*TRAIN["n_heads"]), default=4,
                   help=f"medusa: heads (head k guesses k tokens after x0), {r['n_heads']}")
    t.add_argument("--epochs", type=float_in(*TRAIN["epochs"], open_lo=True), default=1.0,
                   help="passes over the training rows, > 0 (fractions allowed), at most 1000")
    t.add_argument("--max-tokens", type=int_in(*TRAIN["max_tokens"]), default=300_000,
                   help="training tokens read from --data (at least two rows of --seq)")
    t.add_argument("--seq", type=int_in(*TRAIN["seq"]), default=256,
                   help=f"tokens per training row, {r['seq']} (and within the model's positions)")
    t.add_argument("--batch", type=int_in(*TRAIN["batch"]), default=4, help=f"rows per step, {r['batch']}")
    t.add_argument("--lr", type=float_in(*TRAIN["lr"], open_lo=True), default=1e-3, help="learning rate, in (0, 1]")
    t.add_argument("--distill", type=int_in(*TRAIN["distill"]), default=0, metavar="P",
                   help="self-distillation: keep each row's first P tokens, train on the model's own greedy "
                        "continuation (what greedy verification accepts); 0 = train on your text as is")
    t.add_argument("--unroll", type=int_in(*TRAIN["unroll"]), default=1, metavar="J",
                   help="eagle: also train drafting levels 2..J on the head's own predicted features, as it drafts "
                        "(EAGLE-3's training-time test; each level costs about one more pass)")
    t.add_argument("--init", default=None, metavar="DIR", type=input_dir,
                   help="start from these heads (same kind and model): fine-tune")
    t.add_argument("--cache", default=None, type=output_dir, help="feature cache folder (default OUT/features)")
    t.add_argument("--device", default=None, type=nonempty, help="cpu, cuda ... (CUDA trains under bf16 autocast)")
    t.add_argument("--threads", type=int_in(*THREADS), default=None, help=f"CPU threads, {THREADS[0]}..{THREADS[1]}")
    t.add_argument("--trust-remote-code", action="store_true")
    b = sub.add_parser("build-datastore", help="tokenise text files into a REST datastore (suffix array) for "
                                                "--method retrieval --datastore")
    b.add_argument("--model", default=None, type=nonempty, help="hub id or local directory whose tokenizer is used")
    b.add_argument("--from", dest="sources", required=True, nargs="+", type=text_path,
                   help="text files and/or folders of text files")
    b.add_argument("--out", required=True, type=output_dir, help="the datastore folder to write")
    b.add_argument("--trust-remote-code", action="store_true")
    c = sub.add_parser("convert", help="convert a GGUF file into a transformers folder in the cache (what "
                                       "--model FILE.gguf does on first use)")
    c.add_argument("gguf", type=nonempty, help="a .gguf file, or a folder holding exactly one")
    c.add_argument("--cache", type=output_dir, default=None,
                   help="cache folder (default: $DECODESCOPE_CACHE, else ~/.cache/decodescope)")
    c.add_argument("--force", action="store_true", help="convert again even when the cache holds it")
    return ap



def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):  # --help (0), or a refused argument (2, its one line already printed)
        return args
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()  # one clear line from us, not library warnings
    hf_logging.disable_progress_bar()
    try:
        if args.command == "build-datastore":
            return build_datastore(args)
        if args.command == "convert":
            return convert(args)
        return train_heads(args) if args.command == "train-heads" else generate(args)
    except (ValueError, ModelError, OSError) as e:
        from ..parallel.cli import say_refusal
        say_refusal(f"error: {one_line(e)}")
        return 2


def generate(args: argparse.Namespace) -> int:
    if args.tp_plan or args.lp or args.lp_debug:  # under torchrun: checked first; only rank 0 prints and writes
        from ..parallel.cli import prepare
        prepare(args)
    if args.repeats is not None and not args.compare:
        raise ValueError("--repeats sets how many rounds --compare greedy times: add --compare greedy")
    raw = read_prompts(args)
    if args.json:  # an unwritable --json fails now, not after the run
        for i in range(len(raw)):
            check_writable(json_path(args.json, i, len(raw)))
    args.prompt = raw[0]  # setup validates it and --auto tunes on it
    model, tok, drafter, sampling = setup(args)
    static = {"auto": None, "on": True, "off": False}[args.static]
    prompts = with_template(tok, raw, args.chat)
    if args.compare:  # warm up first, so neither timed run pays for the first forwards
        with stage("[compare] warming up (a 2-token greedy run) before the timed runs",
                   getattr(model, "weights_mb_", None)):
            run(model, tok, prompts[0], BASELINE, max_new_tokens=2, trace=False, static=static)
    for i, prompt in enumerate(prompts):
        if len(prompts) > 1:  # which output is whose: a label, and a separator between outputs
            print(("" if i == 0 else SEPARATOR + "\n") + prompt_label(i, len(prompts), raw[i]), flush=True)
        # what setup chose ([threads], [preset], [draft] ...), said as the first run starts: once it has passed
        # its checks (a refusal stays one line), not after the whole run
        notes = getattr(args, "notes", []) if i == 0 else []
        tr = decode(model, tok, prompt, args, drafter, sampling, static,  # drafters reset in start()
                    on_start=(lambda: print("\n".join(notes), file=sys.stderr, flush=True)) if notes else None)
        show(args, model, tok, tr, sampling, json_path(args.json, i, len(prompts)) if args.json else None)
        print(timing_line(tr, model), file=sys.stderr)
        if args.compare:
            for line in compare_lines(model, tok, prompt, tr, sampling, static, drafter, args.repeats or REPEATS):
                print(line, file=sys.stderr, flush=True)
    return 0


def show(args: argparse.Namespace, model, tok, tr, sampling, out: str | None) -> None:
    """Print the text and the run's lines; write the trace document to `out`."""
    exactness(model, tok, tr, sampling, args.check_exact, args.stop)
    st = tr.stats()
    if not args.stream:  # streamed text is already on stdout
        print(display_text(tok, tr.output_ids, args))
    print(f"[{tr.method}] {st['new_tokens']} tokens in {st['steps']} steps (compression {st['compression']:.2f} "
          f"tokens per target forward), {st['tokens_per_s']:.1f} tokens/s, stop: {tr.stop_reason}", file=sys.stderr)
    from ..fast.graphs import capture_warning
    if capture_warning(tr.config):  # one line: the run was exact but its failed buckets ran eagerly
        print(f"[graphs] {capture_warning(tr.config)}", file=sys.stderr)
    hint = acceptance_hint(tr)  # drafts (almost) never accepted: why, and what to try
    for line in metric_lines(tr) + ([hint] if hint else []):
        print(line, file=sys.stderr)
    copied = sum(o == "reference" for s in tr.steps for o in s.origins)
    if args.reference:
        print(f"[reference] {copied} of {st['new_tokens']} tokens copied from {len(args.reference)} reference "
              f"text(s)", file=sys.stderr)
    if out:  # the one trace document (docs/trace.md), as Trace.save and the app's download write it
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        tr.save(out)


def metric_lines(tr) -> list[str]:
    """The drafting figures under the serving engines' names (decoding/trace/stats.py, one definition each;
    docs/trace.md "Speculative metrics"): a DecodeScope run reads like a vLLM / SGLang / TensorRT-LLM log."""
    from ..trace.stats import spec_decode_stats, speculative_stats
    sd = spec_decode_stats(tr)
    if not sd:
        return []
    m = tr.method
    if sd["num_drafts"] is None:  # untraced lookahead steps: which query tokens were drafts is not recorded
        return [f"[{m}] spec_accept_length {sd['spec_accept_length']:.2f} tokens per decode step (SGLang); "
                "drafts were not traced"]
    rate = "n/a" if sd["draft_acceptance_rate"] is None else f"{sd['draft_acceptance_rate']:.2f}"
    pos = " ".join(f"{r:.2f}" for r in sd["acceptance_rate_per_pos"]) or "-"
    lines = [f"[{m}] mean acceptance length {sd['mean_acceptance_length']:.2f} = 1 + {sd['num_accepted_tokens']} "
             f"accepted / {sd['num_drafts']} drafts (vLLM mean_acceptance_length, TensorRT-LLM acceptance_length); "
             f"draft acceptance rate {rate} = accepted / {sd['num_draft_tokens']} draft tokens; "
             f"per position {pos}; spec_accept_length {sd['spec_accept_length']:.2f} tokens per decode step (SGLang)"
             + (f"; draft_overhead {sd['draft_overhead']:.2f} of the drafting steps' time (TensorRT-LLM)"
                if sd["draft_overhead"] is not None else "")]
    needs = SPECS[m].needs if m in SPECS else ()  # drafted by a model of its own: a draft, heads, an adapter
    tree = speculative_stats(tr) if needs else {}
    if tree:
        depth = " ".join(f"{d}:{r:.2f}" for d, r in tree["acceptance_rate_per_depth"].items())
        forwards = (f", draft forwards {sd['draft_forwards']}" if sd["draft_forwards"] is not None else
                    ", no draft forwards (the heads read the target's own features)" if "heads" in needs else "")
        lines.append(f"[{m}] tree: acceptance per depth (reached / tried) {depth}{forwards}, origins {tree['origins']}")
    return lines


HINT_STEPS = 8  # drafting steps a run needs before "almost never accepted" is said


def acceptance_hint(tr) -> str | None:
    """One line when the target accepted (almost) none of a run's drafts, under one token per 20 drafting
    steps: every step then paid for drafts for nothing (slower than greedy). Why, and what to try, is the
    method's own (MethodSpec.no_acceptance)."""
    from ..trace.stats import spec_decode_stats
    sd = spec_decode_stats(tr)
    if not sd or not sd.get("num_drafts") or sd["num_drafts"] < HINT_STEPS:
        return None
    if sd["num_accepted_tokens"] * 20 >= sd["num_drafts"]:
        return None
    spec = SPECS.get(tr.method)
    why = (spec.no_acceptance if spec is not None and spec.no_acceptance else
           "its drafts keep missing this model's tokens; --compare greedy measures what that costs, and "
           "docs/methods.md says which method fits which text")
    return (f"[hint] {tr.method} accepted {sd['num_accepted_tokens']} of {sd['num_draft_tokens']} draft tokens in "
            f"{sd['num_drafts']} drafting steps, so each step cost more than greedy's: {why}")


def convert(args: argparse.Namespace) -> int:
    """python -m decoding convert FILE.gguf: prints the converted folder (what --model accepts too); a file
    that is not a GGUF, or one transformers cannot map, is one line and exit status 2."""
    from ..models.fetch import FetchError
    from ..models.gguf import convert_with_bar, gguf_path
    try:
        if gguf_path(args.gguf) is None:
            raise ValueError(f"{args.gguf} is neither a .gguf file nor a folder holding one")
        print(convert_with_bar(args.gguf, args.cache, args.force))
    except FetchError as e:
        raise ValueError(str(e)) from None
    return 0


def build_datastore(args: argparse.Namespace) -> int:
    """python -m decoding build-datastore: only the tokenizer is loaded; a tqdm bar counts files and tokens."""
    from tqdm import tqdm
    from transformers import AutoTokenizer
    from decoding.methods.resources import build_datastore as build, source_files
    files = source_files(args.sources)  # a missing or empty source fails before the tokenizer loads
    tok = AutoTokenizer.from_pretrained(target_name(args.model), trust_remote_code=args.trust_remote_code)
    bar = tqdm(total=len(files), desc="build-datastore", unit="file", file=sys.stderr)

    def progress(done: int, total: int, tokens: int) -> None:
        bar.n = done
        bar.set_postfix(tokens=f"{tokens:,}", refresh=False)
        bar.refresh()

    meta = build(tok, args.sources, args.out, progress)
    bar.close()
    print(f"datastore {args.out}: {meta['tokens']:,} tokens from {len(meta['files'])} files in {meta['total_s']:.1f} s "
          f"(tokenise {meta['tokenize_s']:.1f} s, suffix array {meta['suffix_array_s']:.1f} s)")
    return 0


def train_heads(args: argparse.Namespace) -> int:
    """python -m decoding train-heads: bad input (unknown kind, no text, missing data) fails before the
    model loads."""
    from decoding.training.train_heads import read_texts, stderr_log, train
    if args.kind not in KINDS + (ADAPTER,):
        raise ValueError(f"unknown --kind {args.kind!r}; choose one of {', '.join(KINDS)}, {ADAPTER}")
    if (args.kind == ADAPTER) != (args.exit_layer is not None):
        raise ValueError(f"--exit-layer K goes with --kind {ADAPTER}, and that kind needs it")
    if args.kind == ADAPTER and (args.distill or args.init):
        raise ValueError(f"--distill and --init are for medusa / eagle heads, not --kind {ADAPTER}")
    if args.unroll < 1 or (args.unroll > 1 and args.kind != EAGLE):
        raise ValueError("--unroll takes a whole number >= 1, and levels above 1 only for --kind eagle")
    check_train_shape(args)
    texts = read_texts(args.data)
    if not texts:
        raise ValueError(f"no training text in {' '.join(args.data)}: no readable, non-empty text file")
    args.model = target_name(args.model)
    model, tok = load(args.model, device=args.device, trust_remote_code=args.trust_remote_code,
                      threads=args.threads, layout="stock", stage=stage)
    from ..models import max_positions
    positions = max_positions(model.config)
    if positions is not None and args.seq > positions:
        raise ValueError(f"--seq {args.seq} is longer than the model's {positions} positions")
    if args.kind == ADAPTER:  # Kangaroo's adapter after exit layer K (training/self_spec_train.py)
        from decoding.training.self_spec_train import train_adapter
        best = train_adapter(model, tok, texts, args.out, exit_layer=args.exit_layer, seq=args.seq,
                             max_tokens=args.max_tokens, epochs=args.epochs, batch=args.batch, lr=args.lr,
                             cache=args.cache, log=stderr_log)
    else:
        best = train(model, tok, args.kind, texts, args.out, n_heads=args.n_heads, seq=args.seq,
                     max_tokens=args.max_tokens, epochs=args.epochs, batch=args.batch, lr=args.lr, cache=args.cache,
                     distill=args.distill, unroll=args.unroll, init=args.init, log=stderr_log)
    print(f"{args.kind} heads in {args.out}: best validation top-1 "
          + " ".join(f"{a:.3f}" for a in best["acc"]) + f" (step {best['step']})")
    return 0


def check_train_shape(args: argparse.Namespace) -> None:
    """Options of train-heads that only make sense together (each alone is range-checked by the parser)."""
    need = (args.n_heads if args.kind == MEDUSA else args.unroll) + 2  # the last guess needs a label in the row
    if args.seq < need:
        what = f"--n-heads {args.n_heads}" if args.kind == MEDUSA else f"--unroll {args.unroll}"
        raise ValueError(f"--seq {args.seq} is too short for {what}: a row needs at least {need} tokens")
    if args.distill >= args.seq:
        raise ValueError(f"--distill {args.distill} keeps that many tokens of each row: it must be below --seq "
                         f"{args.seq}")
    if args.max_tokens < 2 * args.seq:
        raise ValueError(f"--max-tokens {args.max_tokens} is less than two rows of --seq {args.seq} "
                         f"({2 * args.seq} tokens)")


def exactness(model, tok, tr, sampling, force: bool, stops: list[str] | None = None) -> None:
    """Say how the greedy output relates to HF greedy: fp32 is identical by construction; bf16/fp16 (or
    --check-exact) runs HF generate on the same model and record the measured agreement in the trace."""
    if not sampling.greedy:
        return
    dtype = next(model.parameters()).dtype
    from ..fast.cpu_gemm import model_kernel
    int8 = model_kernel(model) == "int8"
    if int8 and not force:
        print("[exactness] int8 kernel: every method returns exactly this mode's own greedy tokens (bitwise, any "
              "row count); its greedy may differ from HF's float32 greedy (--check-exact measures it)", file=sys.stderr)
        return
    if dtype == torch.float32 and not force:
        print("[exactness] float32 greedy: identical to HF greedy by construction (--check-exact measures it)",
              file=sys.stderr)
        return
    cut = (lambda ids: cut_at_stop(tok, ids, stops)) if stops else None  # HF greedy stopped where --stop stops
    # HF generate on the int8-packed model would run the int8 kernel too: its reference is transformers' float32
    # model as loaded (stock layout)
    ref = load(model.name_or_path_, device="cpu", layout="stock", stage=stage)[0] if int8 else model
    tr.agreement = measure(ref, tr.prompt_ids, tr.output_ids, tr.config["max_new_tokens"], eos_of(model, tok), cut)
    note = " (int8 activations: near-tied logits can flip)" if int8 else \
        "" if dtype == torch.float32 else " (reduced precision: near-tied logits can flip)"
    print(f"[exactness] {tr.agreement['dtype']} vs HF greedy: {tr.agreement['text']}{note}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
