"""CLI: python -m decoding generate --model M --method lookahead --prompt TEXT --max-new-tokens K ...

Bad input ends with one line on stderr and exit status 2, never a traceback. Greedy output equals HF
greedy in fp32 (by construction); in bf16/fp16 the CLI measures it against HF generate and says so.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .api import HEADS_METHODS, METHODS, default_heads, eos_of, heads_folder, make_drafter, make_sampling, run
from .cli_run import (SEPARATOR, THREADS, OneLineParser, add_arguments, check_writable, compare_line, cut_at_stop,
                      decode, display_text, float_in, input_dir, input_file, int_in, json_path, nonempty, one_line, output_dir,
                      output_file, parse_args, prompt_label, read_prompts, text_path, timing_line, with_template)
from .models import ModelError, load
from .exactness import measure
from .methods.draft_tree import make_shape
from .params import LIMITS, MAX_TREE_NODES
from .methods.reference_text import check_references, read_reference, tokenize_references


def limit(name: str):
    """argparse type: an integer in LIMITS[name] (decoding/params.py), refused at parse time."""
    return int_in(*LIMITS[name])


SEED_MAX = 2**63 - 1  # torch.Generator.manual_seed takes 64 bits
TRAIN = {"n_heads": (1, 16), "max_tokens": (1, 1_000_000_000), "seq": (2, 65536), "batch": (1, 4096),
         "distill": (0, 65535), "unroll": (1, 16), "epochs": (0, 1000), "lr": (0, 1)}  # train-heads' ranges


def build_parser() -> argparse.ArgumentParser:
    """Every option that takes a value has a type that checks it (decoding/cli_run.py) or choices: bad input
    is refused here, with one line, before a model loads."""
    ap = OneLineParser(prog="python -m decoding", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode a prompt and print the text and run statistics")
    g.add_argument("--model", default=None, type=nonempty,
                   help="hub id or local directory (default: SmolLM2-135M-Instruct, fetched once; the embedded model when it cannot be)")
    g.add_argument("--method", default="lookahead", choices=METHODS)
    g.add_argument("--prompt", default=None, type=nonempty,
                   help="text, tokenised exactly as tokenizer(prompt) (or --prompt-file)")
    g.add_argument("--max-new-tokens", type=limit("max_new_tokens"), default=64,
                   help=f"new tokens to generate, {LIMITS['max_new_tokens'][0]}..{LIMITS['max_new_tokens'][1]}")
    g.add_argument("--window", type=limit("window"), default=None,
                   help="lookahead W (default: the preset for this model and device, else 5)")
    g.add_argument("--ngram", type=limit("ngram"), default=None, help="lookahead N (default: the preset, else 4)")
    g.add_argument("--guesses", type=limit("guesses"), default=None, help="lookahead G (default: the preset, else 5)")
    g.add_argument("--auto", action="store_true",
                   help="lookahead: pick W/N/G from this device's latency curve and pilot runs on the prompt; "
                        "speculative: pick K / tree / staged by timing pilot runs; jacobi / medusa / eagle: "
                        "pick the block / tree budget by timing pilot runs")
    g.add_argument("--text-span", type=limit("text_span"), default=None,
                   help="lookahead: tokens offered after a prompt/output n-gram match "
                        "(default 7; at least N-1, the paper's pool)")
    g.add_argument("--no-prompt-ngrams", action="store_true", help="lookahead: do not seed the pool with the prompt")
    g.add_argument("--num-tokens", type=limit("num_tokens"), default=None,
                   help="prompt lookup: tokens proposed (default 10)")
    g.add_argument("--max-ngram", type=limit("max_ngram"), default=None,
                   help="prompt lookup: longest n-gram matched (default 3)")
    g.add_argument("--candidates", type=limit("candidates"), default=None,
                   help="prompt lookup: continuations verified per step")
    g.add_argument("--reference", action="append", default=None, metavar="FILE", type=nonempty,
                   help="prompt lookup: also copy from this UTF-8 text file (repeatable; reference lookup, LLMA; "
                        "the input of an edit makes it aggressive decoding)")
    g.add_argument("--reference-tokens", type=limit("reference_tokens"), default=None,
                   help="prompt lookup: tokens copied from a reference per step (default 24)")
    g.add_argument("--block", type=limit("block"), default=None, help="jacobi: guesses refined per step, K (default 8)")
    g.add_argument("--draft", default=None, type=nonempty,
                   help="speculative: draft model (default: the embedded draft)")
    g.add_argument("--draft-tokens", type=limit("draft_tokens"), default=None,
                   help="speculative: chain length K (default 4); self_speculative: draft depth (default 6)")
    g.add_argument("--tree", default=None, type=nonempty, help="speculative: token tree widths per depth, e.g. 3,2,1")
    g.add_argument("--tree-budget", type=limit("tree_budget"), default=None,
                   help="speculative: dynamic tree of the B best nodes by draft probability")
    g.add_argument("--staged", action="store_true", help="speculative: an n-gram stage 2 drafts for the draft")
    g.add_argument("--draft-confidence", type=float_in(0, 1), default=None,
                   help="speculative: do not extend a draft token below this draft probability (default 0.4); "
                        "medusa / eagle: do not verify (or expand) a node whose path's draft probability is below it "
                        "(default 0); self_speculative: Kangaroo's early stop, do not expand a draft token below "
                        "it (default 0.8, below 1)")
    g.add_argument("--adaptive", action="store_true",
                   help="speculative: skip drafting while plain target steps are faster (measured online); "
                        "eagle / retrieval: size each step's tree from the draft's confidence (retrieval: the "
                        "continuations' shares) and this device's row-cost curve (--budget is then the most nodes)")
    g.add_argument("--ngram-table", default=None, type=input_file,
                   help="staged: JSON n-gram table (decoding.methods.stage2.save_table)")
    g.add_argument("--heads", default=None, type=nonempty,
                   help="medusa / eagle: heads folder (python -m decoding train-heads), or its parent holding "
                        "medusa/ and eagle/ (default: the shipped assets/heads/<method> when the model is the one "
                        "they were trained for)")
    g.add_argument("--adapter", default=None, type=nonempty,
                   help="self_speculative: adapter folder (train-heads --kind self_speculative); default: the "
                        "shipped assets/heads/smollm2-self_speculative for SmolLM2-135M-Instruct")
    g.add_argument("--datastore", default=None, type=input_dir,
                   help="retrieval: a REST datastore folder (python -m decoding build-datastore; shipped for the "
                        "default model: assets/datastore/smollm2); without it retrieval drafts from the suffix "
                        "cache (SuffixDecoding: prompt, output so far, earlier runs)")
    g.add_argument("--budget", type=int_in(1, MAX_TREE_NODES), default=None,
                   help=f"medusa / eagle / retrieval / self_speculative: tree nodes verified per step (default 12 medusa, 16 eagle, 64 retrieval; at most "
                        f"{MAX_TREE_NODES})")
    g.add_argument("--draft-vocab", type=limit("draft_vocab"), default=None,
                   help="medusa / eagle / self_speculative: draft only the N tokens the target chose most often in the "
                        "heads' or adapter's training (FR-Spec; verification still uses the whole vocabulary; 0 = all)")
    g.add_argument("--acceptance", choices=("exact", "typical"), default=None,
                   help="medusa / eagle with --temperature > 0: typical = Medusa's typical acceptance, longer "
                        "accepted paths but NOT exact (the output no longer follows the target's distribution); "
                        "default exact")
    g.add_argument("--temperature", type=float_in(0, 100), default=0.0, help="0 = greedy (default), at most 100")
    g.add_argument("--top-k", type=limit("top_k"), default=0, help="0 = off")
    g.add_argument("--top-p", type=float_in(0, 1, open_lo=True), default=1.0, help="in (0, 1]; 1 = off")
    g.add_argument("--seed", type=int_in(0, SEED_MAX), default=0)
    g.add_argument("--dtype", default=None, type=nonempty,
                   help="fp32 (CPU default; greedy output identical to HF greedy), bf16 / fp16 (faster on GPUs; "
                        "greedy output is compared with HF greedy and may diverge at near-tied logits)")
    g.add_argument("--device", default=None, type=nonempty, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    g.add_argument("--threads", type=int_in(*THREADS), default=None,
                   help=f"CPU threads, {THREADS[0]}..{THREADS[1]} (default: 1 for models < 100M params on <= 2 cores)")
    g.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"), help="transformers attention kernel")
    g.add_argument("--layout", default="auto", choices=("auto", "stock", "column", "packed"),
                   help="weight storage on CPU fp32: auto = packed where its kernel builds (decoding/fast/cpu_gemm.py), else column-major; stock = as loaded")
    g.add_argument("--static", default="auto", choices=("auto", "on", "off"),
                   help="static-shape path (preallocated KV cache, bucketed query sizes, CUDA graphs): "
                        "auto = on for CUDA, off on CPU where it measured no faster")
    g.add_argument("--tp-plan", default=None, choices=("auto",),
                   help="tensor parallelism under torchrun --nproc-per-node P: transformers shards the model "
                        "(from_pretrained tp_plan=auto; gloo on CPU, NCCL on GPUs); docs/distributed.md")
    g.add_argument("--lp", action="store_true",
                   help="lookahead parallelism under torchrun: every process holds the model, the lookahead "
                        "window and candidates are split across them (--method lookahead); docs/distributed.md")
    g.add_argument("--lp-debug", action="store_true",
                   help="with --lp: check that every rank's KV cache, window and pool hash alike after each step")
    g.add_argument("--trust-remote-code", action="store_true", help="run the model repo's own code (off by default)")
    g.add_argument("--check-exact", action="store_true",
                   help="greedy: compare the output with HF generate(do_sample=False) in any dtype (bf16/fp16 "
                        "always compare; fp32 is identical by construction)")
    g.add_argument("--json", default=None, type=output_file,
                   help="write output_ids, text, stats and the full trace here")
    add_arguments(g)  # --prompt-file, --chat, --stop, --stream, --compare (decoding/cli_run.py)
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
    return ap



def target_name(name: str | None) -> str:
    """--model, or (left out) the default model's folder: fetched now with a progress bar on first use, or the
    embedded target with one line on stderr saying why and how to fetch it later."""
    if name is not None:
        return name
    from .fetch_model import progress_bar
    from .models import resolve
    shown: list = []  # the bar appears with the first stage: only when a fetch really starts

    def progress(stage: str, fraction: float, message: str) -> None:
        if not shown:
            shown.extend(progress_bar())
        shown[1](stage, fraction, message)
    path, why = resolve(None, progress)
    if shown:
        shown[0].close()
    if why:
        print(f"[model] using the embedded model: {why}", file=sys.stderr)
    return path

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
        return train_heads(args) if args.command == "train-heads" else generate(args)
    except (ValueError, ModelError, OSError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2


def setup(args: argparse.Namespace):
    """Validate the options, load the model(s) and build the drafter: (model, tok, drafter, sampling).
    Shared with `python -m profiling`, so both CLIs take the same method options."""
    if not args.prompt.strip():
        raise ValueError("the prompt is empty")
    sampling = make_sampling(args.temperature, args.top_k, args.top_p, args.seed)
    if args.check_exact and not sampling.greedy:
        raise ValueError("--check-exact compares greedy output with HF greedy: drop --temperature")
    params = dict(window=args.window, ngram=args.ngram, guesses=args.guesses, num_tokens=args.num_tokens,
                  max_ngram=args.max_ngram, candidates=args.candidates, text_span=args.text_span,
                  prompt_ngrams=False if args.no_prompt_ngrams else None, block=args.block,
                  reference_tokens=args.reference_tokens,
                  heads=args.heads, budget=args.budget, draft_vocab=args.draft_vocab, acceptance=args.acceptance,
                  confidence=args.draft_confidence if args.method in HEADS_METHODS else None,
                  adapter=args.adapter, datastore=args.datastore,
                  adaptive=1 if args.adaptive and args.method in ("eagle", "retrieval") else None)
    if args.method == "self_speculative":  # its chain length and Kangaroo's early stop share the speculative names
        params.update(depth=args.draft_tokens, stop=args.draft_confidence)
    if args.adapter and args.method != "self_speculative":
        raise ValueError("--adapter needs --method self_speculative")
    references = [read_reference(f) for f in args.reference or []]
    check_references(references)
    if references and args.method != "prompt_lookup":
        raise ValueError("--reference needs --method prompt_lookup (reference lookup)")
    if args.block is not None and args.method != "jacobi":
        raise ValueError("--block needs --method jacobi")
    if args.datastore and args.method != "retrieval":
        raise ValueError("--datastore needs --method retrieval")
    if (args.heads or args.acceptance) and args.method not in HEADS_METHODS:
        raise ValueError("--heads and --acceptance need --method medusa or eagle")
    if args.budget is not None and args.method not in HEADS_METHODS + ("retrieval", "self_speculative"):
        raise ValueError("--budget needs --method medusa, eagle, retrieval or self_speculative")
    if args.draft_vocab is not None and args.method not in HEADS_METHODS + ("self_speculative",):
        raise ValueError("--draft-vocab needs --method medusa, eagle or self_speculative")
    if args.acceptance:
        from .methods.medusa import check_acceptance
        check_acceptance(args.acceptance, sampling)
    if args.method == "speculative":  # validate before the (slow) model loads
        make_shape(args.draft_tokens, args.tree, args.tree_budget, args.staged, args.draft_confidence)
    elif any(v not in (None, False) for v in (args.draft, args.tree, args.tree_budget,
                                               args.staged or None, args.ngram_table,
                                               None if args.method in ("eagle", "retrieval") else args.adaptive or None,
                                               None if args.method == "self_speculative" else args.draft_tokens,
                                               None if args.method in HEADS_METHODS + ("self_speculative",)
                                               else args.draft_confidence)):
        raise ValueError("--draft, --draft-tokens, --tree, --tree-budget, --staged need --method speculative "
                         "(--draft-tokens: also self_speculative; --draft-confidence: speculative, medusa, eagle "
                         "or self_speculative)")
    else:  # validate before the (slow) model load; heads default to the shipped ones once the model is known
        drafter = make_drafter(args.method, **(dict(params, heads=params["heads"] or "(shipped)")
                                               if args.method in HEADS_METHODS else
                                               dict(params, adapter=args.adapter or "(shipped)")
                                               if args.method == "self_speculative" else params))
    if args.auto and args.method == "jacobi" and args.block is not None:
        raise ValueError("--auto chooses the jacobi block itself: drop --block")
    if args.auto and args.method in HEADS_METHODS and args.budget is not None:
        raise ValueError(f"--auto chooses the {args.method} tree budget itself: drop --budget")
    if args.auto and args.method not in ("jacobi", "medusa", "eagle") and (args.method not in ("lookahead", "speculative")
                      or any(v is not None for v in (args.window, args.ngram, args.guesses, args.draft_tokens,
                                                     args.tree, args.tree_budget)) or args.staged):
        raise ValueError("--auto chooses the shape itself: use it with --method lookahead (without --window/--ngram/"
                         "--guesses), --method speculative (without --draft-tokens/--tree/--tree-budget/--staged), "
                         "--method jacobi (without --block) or --method medusa / eagle (without --budget)")
    if args.method in HEADS_METHODS and args.heads:  # a folder without heads is refused before a model loads
        from .methods.heads import check_heads_files
        args.heads = heads_folder(args.heads, args.method)
        check_heads_files(args.heads)
    args.model = target_name(args.model)
    model, tok = load(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                      threads=args.threads, layout=args.layout, attn=args.attn, tp_plan=getattr(args, "tp_plan", None))
    if args.method in HEADS_METHODS:  # --heads DIR (or its parent holding medusa/ and eagle/), else the shipped
        if not args.heads:
            args.heads = default_heads(model, args.method)
            note(args, f"[heads] {args.heads} (shipped for this model)")
        params["heads"] = args.heads
        drafter = make_drafter(args.method, **params)
    if args.method == "self_speculative":  # --adapter DIR, else the one shipped for the default model
        from .methods.self_spec_adapter import default_adapter
        params["adapter"] = args.adapter or default_adapter(model)
        drafter = make_drafter(args.method, **params)
    if args.method == "speculative":
        from .methods.stage2 import load_table
        try:
            table = load_table(args.ngram_table) if args.ngram_table else None
        except (TypeError, RecursionError) as e:  # load_table catches the rest: one line either way
            raise ValueError(f"cannot read n-gram table {args.ngram_table}: {type(e).__name__}: {one_line(e, 200)}") \
                from None
        from .api import load_draft
        from .methods.shipped_draft import CARD
        if args.draft is None or (Path(args.draft).expanduser() / CARD).is_file():
            # the draft shipped for this target (the default model's distilled layers, the embedded pair), or
            # a layers-only draft folder: built on the target, sharing its embedding, head and tokenizer
            try:
                draft, dtok = load_draft(model, args.draft)
            except ValueError as e:
                raise ValueError(f"--method speculative: {one_line(e, 300)}") from None
            dtok = dtok or tok
            if args.draft is None:
                note(args, f"[draft] {getattr(draft, 'name_or_path_', None) or 'assets/drafts/smollm2'} (shipped "
                     "for this model)")
        else:
            draft, dtok = load(args.draft, device=args.device, dtype=args.dtype,
                               trust_remote_code=args.trust_remote_code, layout=args.layout, attn=args.attn)
        shape = dict(draft_tokens=args.draft_tokens, tree=args.tree, tree_budget=args.tree_budget,
                     staged=args.staged)
        if args.auto:
            from .methods.speculative import check_compatible
            from .tune import tune
            check_compatible(model, draft, tok, dtok)  # before piloting: a clear error, not a crash mid-tune
            tuned = tune("speculative", model, tok, args.prompt, pilot_tokens=min(32, args.max_new_tokens), draft=draft)
            shape = tuned["params"]
            print(f"[auto] {tuned['label']}", file=sys.stderr)
        drafter = make_drafter("speculative", draft_model=draft, **shape, ngram_table=table,
                               confidence=args.draft_confidence, adaptive=args.adaptive, target_model=model,
                               tokenizer=tok, draft_tokenizer=dtok)
    elif args.auto:  # one tuner per method (decoding/tune.py), the same the app's Tune button runs
        from .tune import heads_label, tune
        fixed = {"cuts": (params["confidence"],)} if args.method in HEADS_METHODS and \
            params["confidence"] is not None else {}
        tuned = tune(args.method, model, tok, args.prompt, pilot_tokens=min(32, args.max_new_tokens),
                     heads=args.heads, **fixed)
        extra = ""
        if args.method in HEADS_METHODS:
            extra = " (" + ", ".join(f"{heads_label(r)}: {r['tokens_per_s']:.1f} tokens/s"
                                     for r in tuned["result"]["ranking"]) + ")"
        print(f"[auto] {tuned['label']}{extra}", file=sys.stderr)
        if args.method == "lookahead":
            drafter = make_drafter("lookahead", **tuned["params"], prompt_ngrams=params["prompt_ngrams"],
                                   text_span=args.text_span)
        elif args.method == "jacobi":
            drafter = make_drafter("jacobi", **tuned["params"])
        else:
            drafter = make_drafter(args.method, heads=args.heads, draft_vocab=args.draft_vocab,
                                   acceptance=args.acceptance, **tuned["params"])
    elif args.method == "lookahead" and not getattr(args, "lp", False) and \
            (args.window, args.ngram, args.guesses) == (None, None, None):
        drafter = preset_lookahead(args, model, params) or drafter
    if args.method == "retrieval" and args.datastore:  # the tokenizer is loaded now: a datastore for another
        drafter = make_drafter("retrieval", **params, tokenizer=tok)  # tokenizer is refused with one line
    if references:  # the tokenizer is loaded now: the drafter gets the references' token ids
        drafter = make_drafter("prompt_lookup", **params, reference_ids=tokenize_references(tok, references))
    return model, tok, drafter, sampling


def note(args: argparse.Namespace, line: str) -> None:
    """A line about what setup chose (the shipped heads, draft or preset): printed once the first run has passed
    its checks, so bad input still answers with one line."""
    args.notes = [*getattr(args, "notes", []), line]


def preset_lookahead(args: argparse.Namespace, model, params: dict):
    """Lookahead without --window/--ngram/--guesses: the preset tuned on this device or shipped for this model
    (decoding/presets.py, the app's), else the paper's W5 N4 G5; one line says which. The paper's GPU shape
    ran at 0.28x greedy on a CPU, where no window pays."""
    from .presets import lookup
    found = lookup(args.model, model, "lookahead")
    if found is None:
        note(args, "[preset] lookahead W5 N4 G5: the paper's defaults (no preset for this model on this device; "
             "--auto tunes one)")
        return None
    w = found["params"]
    note(args, f"[preset] lookahead W{w['window']} N{w['ngram']} G{w['guesses']}: {found['source']} "
               "(--window/--ngram/--guesses or --auto choose another)")
    return make_drafter("lookahead", **{**params, "window": w["window"], "ngram": w["ngram"], "guesses": w["guesses"]})


def generate(args: argparse.Namespace) -> int:
    if args.tp_plan or args.lp or args.lp_debug:  # under torchrun: checked first; only rank 0 prints and writes
        from .parallel.cli import prepare
        prepare(args)
    raw = read_prompts(args)
    if args.json:  # an unwritable --json fails now, not after the run
        for i in range(len(raw)):
            check_writable(json_path(args.json, i, len(raw)))
    args.prompt = raw[0]  # setup validates it and --auto tunes on it
    model, tok, drafter, sampling = setup(args)
    static = {"auto": None, "on": True, "off": False}[args.static]
    prompts = with_template(tok, raw, args.chat)
    if args.compare:  # warm up first, so neither timed run pays for the first forwards
        run(model, tok, prompts[0], "greedy", max_new_tokens=2, trace=False, static=static)
    for i, prompt in enumerate(prompts):
        if len(prompts) > 1:  # which output is whose: a label, and a separator between outputs
            print(("" if i == 0 else SEPARATOR + "\n") + prompt_label(i, len(prompts), raw[i]), flush=True)
        tr = decode(model, tok, prompt, args, drafter, sampling, static)  # drafters reset in start()
        for line in getattr(args, "notes", []) if i == 0 else ():
            print(line, file=sys.stderr)
        show(args, model, tok, tr, sampling, json_path(args.json, i, len(prompts)) if args.json else None)
        print(timing_line(tr, model), file=sys.stderr)
        if args.compare:
            print(compare_line(model, tok, prompt, tr, sampling, static), file=sys.stderr)
    return 0


def show(args: argparse.Namespace, model, tok, tr, sampling, out: str | None) -> None:
    """Print the text and the run's lines; write the trace document to `out`."""
    exactness(model, tok, tr, sampling, args.check_exact, args.stop)
    st = tr.stats()
    if not args.stream:  # streamed text is already on stdout
        print(display_text(tok, tr.output_ids, args))
    print(f"[{tr.method}] {st['new_tokens']} tokens in {st['steps']} steps (compression {st['compression']:.2f} "
          f"tokens per target forward), {st['tokens_per_s']:.1f} tokens/s, stop: {tr.stop_reason}", file=sys.stderr)
    from .fast.graphs import capture_warning
    if capture_warning(tr.config):  # one line: the run was exact but its failed buckets ran eagerly
        print(f"[graphs] {capture_warning(tr.config)}", file=sys.stderr)
    for line in metric_lines(tr):
        print(line, file=sys.stderr)
    copied = sum(o == "reference" for s in tr.steps for o in s.origins)
    if args.reference:
        print(f"[reference] {copied} of {st['new_tokens']} tokens copied from {len(args.reference)} reference "
              f"text(s)", file=sys.stderr)
    if out:  # the one trace document (docs/trace.md), as Trace.save and the app's download write it
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        tr.save(out)


def metric_lines(tr) -> list[str]:
    """The drafting figures under the serving engines' names (decoding/stats.py, one definition each;
    docs/trace.md "Speculative metrics"): a DecodeScope run reads like a vLLM / SGLang / TensorRT-LLM log."""
    from .stats import spec_decode_stats, speculative_stats
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
    spec = speculative_stats(tr) if m in ("speculative", "medusa", "eagle", "self_speculative") else {}
    if spec:
        depth = " ".join(f"{d}:{r:.2f}" for d, r in spec["acceptance_rate_per_depth"].items())
        forwards = (f", draft forwards {sd['draft_forwards']}" if sd["draft_forwards"] is not None else
                    ", no draft forwards (the heads read the target's own features)" if m == "medusa" else "")
        lines.append(f"[{m}] tree: acceptance per depth (reached / tried) {depth}{forwards}, origins {spec['origins']}")
    return lines


def build_datastore(args: argparse.Namespace) -> int:
    """python -m decoding build-datastore: only the tokenizer is loaded; a tqdm bar counts files and tokens."""
    from tqdm import tqdm
    from transformers import AutoTokenizer
    from .methods.datastore import build, source_files
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
    from .methods.heads import KINDS
    from .methods.train_heads import read_texts, stderr_log, train
    if args.kind not in KINDS + ("self_speculative",):
        raise ValueError(f"unknown --kind {args.kind!r}; choose one of {', '.join(KINDS)}, self_speculative")
    if (args.kind == "self_speculative") != (args.exit_layer is not None):
        raise ValueError("--exit-layer K goes with --kind self_speculative, and that kind needs it")
    if args.kind == "self_speculative" and (args.distill or args.init):
        raise ValueError("--distill and --init are for medusa / eagle heads, not --kind self_speculative")
    if args.unroll < 1 or (args.unroll > 1 and args.kind != "eagle"):
        raise ValueError("--unroll takes a whole number >= 1, and levels above 1 only for --kind eagle")
    check_train_shape(args)
    texts = read_texts(args.data)
    if not texts:
        raise ValueError(f"no training text in {' '.join(args.data)}: no readable, non-empty text file")
    args.model = target_name(args.model)
    model, tok = load(args.model, device=args.device, trust_remote_code=args.trust_remote_code,
                      threads=args.threads, layout="stock")
    from .models import max_positions
    positions = max_positions(model.config)
    if positions is not None and args.seq > positions:
        raise ValueError(f"--seq {args.seq} is longer than the model's {positions} positions")
    if args.kind == "self_speculative":  # Kangaroo's adapter after exit layer K (methods/self_spec_train.py)
        from .methods.self_spec_train import train_adapter
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
    need = (args.n_heads if args.kind == "medusa" else args.unroll) + 2  # the last guess needs a label in the row
    if args.seq < need:
        what = f"--n-heads {args.n_heads}" if args.kind == "medusa" else f"--unroll {args.unroll}"
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
    if dtype == torch.float32 and not force:
        print("[exactness] float32 greedy: identical to HF greedy by construction (--check-exact measures it)",
              file=sys.stderr)
        return
    cut = (lambda ids: cut_at_stop(tok, ids, stops)) if stops else None  # HF greedy stopped where --stop stops
    tr.agreement = measure(model, tr.prompt_ids, tr.output_ids, tr.config["max_new_tokens"], eos_of(model, tok), cut)
    note = "" if dtype == torch.float32 else " (reduced precision: near-tied logits can flip)"
    print(f"[exactness] {tr.agreement['dtype']} vs HF greedy: {tr.agreement['text']}{note}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
