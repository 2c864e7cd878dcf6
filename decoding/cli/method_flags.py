"""The generate CLI's method side, read from the method specs (decoding/methods/registry.py): the method
flags, the refusal of a flag the chosen method does not take, the model-free checks before the slow load,
the resources the CLI resolves with its own load options, --auto and the device preset, then the one
builder (decoding/build.py).

Why generated: a method's parameters are declared once, in its spec (knob(cli="--flag", lo=, hi=, help=));
the CLI used to repeat each flag, its range, its help and its "needs --method" sentence by hand, and
drifted. Shared by `python -m decoding generate` and `python -m profiling` (a library module, so the
profiler imports no __main__), so both CLIs take the same method options.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..api import make_sampling
from ..build import build, checked
from .args import (THREADS, _checked, float_in, input_dir, input_file, int_in, nonempty, one_line, output_file,
                   stage)
from .habits import add_arguments, check_chat_template
from ..methods import registry
from ..methods.registry import MethodSpec
from ..methods.spec import Knob
from ..models import ModelError, load
from ..params import LIMITS

SEED_MAX = 2**63 - 1  # torch.Generator.manual_seed takes 64 bits
DEFAULT_METHOD = "lookahead"  # generate's --method when none is given (the registry's first method otherwise)


def _specs(specs: dict[str, MethodSpec] | None) -> dict[str, MethodSpec]:
    """The given specs, else the registry's (read at call time, so a registry loaded with another method list,
    registry.load_specs, is what the parser shows)."""
    return registry.SPECS if specs is None else specs


def limit(name: str):
    """argparse type: an integer in LIMITS[name] (decoding/params.py), refused at parse time."""
    return int_in(*LIMITS[name])


# ---- the method flags, generated from the specs' knobs ----

@dataclass(frozen=True)
class Flag:
    """One generated option: its flag, its argparse dest, and the knob it sets in each method taking it
    (several methods may share a flag: --budget is medusa's, eagle's, retrieval's and self_speculative's)."""
    flag: str
    dest: str
    knobs: dict[str, Knob]

    def owners(self) -> tuple[str, ...]:
        return tuple(self.knobs)


def method_flags(specs: dict[str, MethodSpec] | None = None) -> dict[str, Flag]:
    """flag -> Flag, in registry order, then declaration order; a flag shared by knobs of different kinds
    is a bug in a spec."""
    out: dict[str, Flag] = {}
    for name, spec in _specs(specs).items():
        for k in spec.knobs():
            if k.cli is None:
                continue
            f = out.get(k.cli)
            if f is not None:
                first = next(iter(f.knobs.values()))
                if (first.kind, first.negate, isinstance(first.default, bool), first.choices) != \
                        (k.kind, k.negate, isinstance(k.default, bool), k.choices):
                    raise TypeError(f"{k.cli} is declared differently by {', '.join(f.owners())} and {name}")
            out[k.cli] = Flag(k.cli, k.cli.lstrip("-").replace("-", "_"), {**(f.knobs if f else {}), name: k})
    return out


def _or(names) -> str:
    """'a', 'a or b', 'a, b or c'."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _and(flags: list[str]) -> str:
    """'--a', '--a and --b', '--a, --b, --c'."""
    return " and ".join(flags) if len(flags) <= 2 else ", ".join(flags)


def _flag_help(f: Flag, specs: dict[str, MethodSpec]) -> str:
    """One method's help as declared; several: each method's (or group's with the same words) after its name."""
    if len(f.knobs) == 1:
        return next(iter(f.knobs.values())).help
    groups: dict[str, list[str]] = {}
    for name, k in f.knobs.items():
        text = k.help
        head, sep, rest = text.partition(": ")
        if sep and all(w.strip() in specs for w in head.replace(",", "/").split("/")):
            text = rest  # "medusa / eagle: ..." -> the names are added back below, once per group
        groups.setdefault(text, []).append(name)
    return "; ".join(f"{' / '.join(names)}: {text}" for text, names in groups.items())


def _option(f: Flag) -> dict:
    """argparse keywords for a flag: the knob's kind, choices or range decide its check."""
    ks = list(f.knobs.values())
    k = ks[0]
    if k.negate or (k.kind is None and isinstance(k.default, bool)):
        return {"action": "store_true"}
    if k.kind == "texts":
        return {"action": "append", "default": None, "metavar": "FILE", "type": nonempty}
    if k.kind == "file":
        return {"default": None, "type": input_file}
    if k.kind == "folder":  # a shipped folder's name (--datastore smollm2) reads as its path
        from ..models import shipped_folder
        def folder(text: str) -> str:
            return input_dir(shipped_folder(k.name, text))
        return {"default": None, "type": _checked(folder, "input_dir")}
    if k.choices is not None:
        return {"default": None, "choices": k.choices}
    if k.kind is None and all(x.lo is not None and x.hi is not None for x in ks):
        lo, hi = min(x.lo for x in ks), max(x.hi for x in ks)
        if all(isinstance(x.lo, int) and isinstance(x.hi, int) for x in ks):
            return {"default": None, "type": int_in(lo, hi)}
        whole = (lambda v: int(v) if float(v).is_integer() else v)  # "[0, 1]", as the flag always said
        return {"default": None, "type": float_in(whole(lo), whole(hi))}
    return {"default": None, "type": nonempty}  # "path", "widths", "model": text read later


def add_method_arguments(g: argparse.ArgumentParser, specs: dict[str, MethodSpec] | None = None) -> None:
    """Every knob with a cli= flag, one option per flag."""
    specs = _specs(specs)
    for f in method_flags(specs).values():
        g.add_argument(f.flag, dest=f.dest, help=_flag_help(f, specs).replace("%", "%%"), **_option(f))


def refusal(f: Flag, specs: dict[str, MethodSpec] | None = None) -> str:
    """'--heads and --acceptance need --method medusa or eagle': the flags taken by exactly the methods
    taking `f`, named together."""
    same = [g.flag for g in method_flags(_specs(specs)).values() if g.owners() == f.owners()]
    return f"{_and(same)} {'needs' if len(same) == 1 else 'need'} --method {_or(f.owners())}"


def auto_usage(specs: dict[str, MethodSpec] | None = None) -> str:
    """'--method lookahead (without --window/--ngram/--guesses), ... or --method medusa / eagle (without
    --budget)': the tuned methods, grouped by tuner and the flags it chooses."""
    groups: dict[tuple, list[str]] = {}
    for name, spec in _specs(specs).items():
        if spec.tuner is None:
            continue
        flags = tuple(k.cli for k in spec.knobs() if k.name in spec.tuner.chooses and k.cli)
        groups.setdefault((id(spec.tuner), flags), []).append(name)
    return _or(f"--method {' / '.join(names)} (without {'/'.join(flags)})" for (_, flags), names in groups.items())


def add_generate_arguments(g: argparse.ArgumentParser, specs: dict[str, MethodSpec] | None = None) -> None:
    """generate's options (the profiler takes them too). Every option that takes a value has a type that
    checks it (decoding/cli/args.py) or choices: bad input is refused here, with one line, before a model
    loads."""
    specs = _specs(specs)
    g.add_argument("--model", default=None, type=nonempty,
                   help="hub id or local directory (default: SmolLM2-135M-Instruct, fetched once; the embedded model when it cannot be)")
    g.add_argument("--method", default=DEFAULT_METHOD if DEFAULT_METHOD in specs else next(iter(specs)),
                   choices=tuple(specs))
    g.add_argument("--prompt", default=None, type=nonempty,
                   help="text, tokenised exactly as tokenizer(prompt) (or --prompt-file)")
    g.add_argument("--max-new-tokens", type=limit("max_new_tokens"), default=64,
                   help=f"new tokens to generate, {LIMITS['max_new_tokens'][0]}..{LIMITS['max_new_tokens'][1]}")
    add_method_arguments(g, specs)
    g.add_argument("--auto", action="store_true",
                   help="choose the method's shape by pilot runs on the prompt on this device (lookahead prices "
                        "steps from the latency curve, the others are timed): use it with "
                        + auto_usage(specs).replace("%", "%%"))
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
    g.add_argument("--kernel", default=None, choices=("fp32", "int8"),
                   help="what the packed layout's block weights run (default fp32, or DECODESCOPE_CPU_KERNEL): fp32 = "
                        "every method returns HF's float32 greedy; int8 = int8 activations, faster verified rows, every "
                        "method returns exactly this mode's own greedy, which may differ from HF's (docs/cpu-kernel.md)")
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
    add_arguments(g)  # --prompt-file, --chat, --stop, --stream, --compare (decoding/cli/habits.py)


# ---- parsed flags -> the chosen method's parameters ----

def method_params(args: argparse.Namespace, spec: MethodSpec, specs: dict[str, MethodSpec] | None = None) -> dict:
    """The values the user gave for `spec`'s knobs (left-out flags are absent); a flag the method does not
    take is refused with one line naming the methods that do. Reference texts are read here (one line for
    a missing, binary or oversize file)."""
    from decoding.methods.resources import check_references, read_reference
    specs = _specs(specs)
    p: dict = {}
    for f in method_flags(specs).values():
        v = getattr(args, f.dest, None)
        if v is None or v is False:
            continue
        k = f.knobs.get(spec.name)
        if k is None:
            if isinstance(v, list) and next(iter(f.knobs.values())).kind == "texts":
                check_references([read_reference(x) for x in v])  # a bad file is named before the method
            raise ValueError(refusal(f, specs))
        if k.negate:
            v = not k.default
        elif k.kind == "texts":
            v = check_references([read_reference(x) for x in v])
        p[k.name] = v
    return p


def note(args: argparse.Namespace, line: str) -> None:
    """A line about what setup chose (the shipped heads, draft or preset): printed once the first run has passed
    its checks, so bad input still answers with one line."""
    args.notes = [*getattr(args, "notes", []), line]


def target_name(name: str | None) -> str:
    """--model (a GGUF file: its converted folder), or (left out) the default model's folder: fetched now with
    a progress bar on first use, or the embedded target with one line on stderr saying why and how to fetch
    it later."""
    if name is not None:  # a GGUF file converts once into the cache, with a progress bar the first time
        from ..models.fetch import FetchError
        from ..models.gguf import convert_with_bar
        try:
            return convert_with_bar(name)
        except FetchError as e:
            raise ValueError(f"--model: {e}") from None
    from ..models.fetch import progress_bar
    from ..models import resolve
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


def check_auto(spec: MethodSpec, p: dict, specs: dict[str, MethodSpec] | None = None) -> None:
    """--auto needs a tuner, and none of the parameters it chooses given."""
    t = spec.tuner
    given = [k for k in spec.knobs() if t is not None and k.name in t.chooses and k.name in p]
    if t is not None and not given:
        return
    if t is not None and len(t.chooses) == 1:
        raise ValueError(f"--auto chooses the {spec.name} {t.what} itself: drop {given[0].cli}")
    raise ValueError(f"--auto chooses the shape itself: use it with {auto_usage(specs)}")


# ---- resources the CLI resolves itself after the model loads (the builder's prepare step does the rest) ----

def kernel_arg(args: argparse.Namespace) -> str | None:
    """--kernel, where this command has it (None: DECODESCOPE_CPU_KERNEL, default fp32)."""
    return getattr(args, "kernel", None)


def _resolve_draft(args: argparse.Namespace, spec: MethodSpec, p: dict, model, tok) -> dict:
    """The draft (a "model" knob): the one shipped for the target or a draft folder (layers only, sharing the
    target's embedding, head and tokenizer), else loaded with the CLI's own options (device, dtype, remote
    code, layout, attention). Loaded before --auto, which pilots with it."""
    from ..api import load_draft
    from decoding.methods.resources import CARD
    value = p.get("draft_model")
    if value is None or (Path(value).expanduser() / CARD).is_file():
        try:
            draft, dtok = load_draft(model, value)
        except ValueError as e:
            raise ValueError(f"--method {spec.name}: {one_line(e, 300)}") from None
        dtok = dtok or tok
        if value is None:
            note(args, f"[draft] {getattr(draft, 'name_or_path_', None) or 'assets/drafts/smollm2'} (shipped "
                       "for this model)")
    else:
        draft, dtok = load(value, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                           layout=args.layout, attn=args.attn, kernel=kernel_arg(args), stage=stage)
    tokenizer = {"draft_tokenizer": dtok} if "draft_tokenizer" in spec.param_names() else {}
    return {**p, "draft_model": draft, **tokenizer}


def _resolve_heads(args: argparse.Namespace, spec: MethodSpec, p: dict, model, tok) -> dict:
    """--heads DIR (resolved before the load), else the heads shipped for this model, with a note."""
    if p.get("heads"):
        return p
    from ..api import default_heads
    heads = default_heads(model, spec.name)
    note(args, f"[heads] {heads} (shipped for this model)")
    return {**p, "heads": heads}


def check_draft_name(draft: str) -> None:
    """--draft, checked before the target loads (on Gemma the load took 20-30 s before the refusal): a name
    (embedded-draft) or an existing path passes; a path that is not there (./x, /x, ~/x, a/b/c, or one under a
    folder that exists here) is one line; anything else is a Hub id, refused at once when it is not cached
    and cannot be downloaded (models.check_hub)."""
    from ..models import NAMED, check_hub
    p = Path(draft).expanduser()
    if draft in NAMED or p.exists():
        return
    parts = Path(draft).parts
    if draft.startswith((".", "/", "~")) or len(parts) > 2 or (len(parts) == 2 and Path(parts[0]).is_dir()):
        raise ValueError(f"--draft {draft}: no such file or folder")
    try:
        check_hub(draft)
    except ModelError as e:
        raise ValueError(f"--draft: {e}") from None


RESOLVE = {"draft_model": _resolve_draft, "heads": _resolve_heads}  # by resource (spec.needs)


def preset_knobs(spec: MethodSpec) -> list[Knob]:
    """The knobs a preset of `spec` sets (lookahead: window, ngram, guesses)."""
    return [k for k in spec.knobs() if any(k.name in shape for shape in spec.presets.values())]


def preset_words(spec: MethodSpec, values: dict) -> str:
    """A preset's shape in the [preset] line's words: "W1 N3 G2"."""
    return " ".join(f"{k.label.split()[0]}{values[k.name]}" for k in preset_knobs(spec) if k.name in values)


def preset_params(args: argparse.Namespace, spec: MethodSpec, model) -> dict:
    """A cli_preset method without any of its preset's parameters: the preset tuned on this device or shipped
    for this model (decoding/tuning/device_presets.py, the app's), else the method's defaults; one line says which. Why:
    lookahead's paper shape (GPU) ran at 0.28x greedy on a CPU, where no window pays."""
    from ..tuning.device_presets import cpu_fallback, lookup
    keys = preset_knobs(spec)

    def words(values: dict) -> str:
        return preset_words(spec, values)
    found = lookup(args.model, model, spec.name)
    if found is None and next(model.parameters()).device.type == "cpu" and spec.query_tokens is not None:
        with stage(f"[preset] no {spec.name} preset for these weights on this device: timing its default step "
                   f"against a 1-row step", getattr(model, "weights_mb_", None)):
            found = cpu_fallback(spec, model)
    if found is None:
        tunes = "; --auto tunes one" if spec.tuner is not None else ""
        note(args, f"[preset] {spec.name} {words(spec.defaults())}: the paper's defaults (no preset for this model "
                   f"on this device{tunes})")
        return {}
    w = found["params"]
    others = "/".join(k.cli for k in keys if k.cli) + (" or --auto" if spec.tuner is not None else "")
    note(args, f"[preset] {spec.name} {words(w)}: {found['source']} ({others} choose another)")
    return {k.name: w[k.name] for k in keys if k.name in w}


def setup(args: argparse.Namespace, specs: dict[str, MethodSpec] | None = None):
    """Validate the options, load the model(s) and build the drafter: (model, tok, drafter, sampling).
    Order: everything that needs no model is checked first (one line, no slow load), then the model loads,
    the CLI resolves the draft / heads, --auto or the device preset chooses the shape, and the one builder
    (decoding.build.build) makes the drafter."""
    specs = _specs(specs)
    if not args.prompt.strip():
        raise ValueError("the prompt is empty")
    sampling = make_sampling(args.temperature, args.top_k, args.top_p, args.seed)
    if args.check_exact and not sampling.greedy:
        raise ValueError("--check-exact compares greedy output with HF greedy: drop --temperature")
    spec = specs[args.method]
    params = method_params(args, spec, specs)
    if spec.check_sampling is not None:  # a value the sampling settings rule out (typical acceptance, greedy)
        spec.check_sampling(params, sampling)
    spec, params = checked(spec, params)  # names, ranges and the method's own combination check
    if args.auto:
        check_auto(spec, params, specs)
    if "heads" in spec.needs and params.get("heads"):  # a folder without heads is refused before a model loads
        from decoding.methods.resources import check_heads_files, heads_folder
        params["heads"] = heads_folder(params["heads"], spec.name)
        check_heads_files(params["heads"])
    if isinstance(params.get("draft_model"), str):
        check_draft_name(params["draft_model"])
    args.model = target_name(args.model)
    if getattr(args, "chat", False):  # from the tokenizer's files, before the weights load
        check_chat_template(args.model)
    if "heads" in spec.needs and not params.get("heads"):  # no shipped heads of this width: say so before the load
        from decoding.methods.resources import check_shipped_heads_fit
        check_shipped_heads_fit(args.model, spec.name)
    model, tok = load(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                      threads=args.threads, layout=args.layout, attn=args.attn, tp_plan=getattr(args, "tp_plan", None),
                      kernel=kernel_arg(args), stage=stage)
    if getattr(model, "threads_rule_", None):
        note(args, f"[threads] {model.threads_rule_}")
    if getattr(model, "weight_storage_", None):  # what each CPU kernel streams: blocks, or float32 panels
        note(args, f"[weights] {model.weight_storage_}")
    for resource in spec.needs:
        if resource in RESOLVE:
            params = RESOLVE[resource](args, spec, params, model, tok)
    if args.auto:  # the method's tuner (decoding/tuning/tune.py), the same the app's Tune button runs
        from ..tuning.tune import tune
        with stage(f"[auto] tuning the {spec.name} shape with pilot runs on this prompt",
                   getattr(model, "weights_mb_", None)):
            tuned = tune(spec.name, model, tok, args.prompt, pilot_tokens=min(32, args.max_new_tokens),
                         draft=params.get("draft_model"), heads=params.get("heads"),
                         draft_tokenizer=params.get("draft_tokenizer"), **spec.tuner.fixed(params))
        detail = f" ({tuned['detail']})" if tuned.get("detail") else ""
        print(f"[auto] {tuned['label']}{detail}", file=sys.stderr)
        params = {**params, **tuned["params"]}
    elif spec.cli_preset and not any(name in params for shape in spec.presets.values() for name in shape):
        if getattr(args, "lp", False):  # the shape runs split over the ranks: a one-process preset does not apply
            note(args, f"[preset] {spec.name} {preset_words(spec, spec.defaults())}: the paper's defaults (--lp splits "
                       f"the window over the processes; the device presets are timed in one; "
                       f"{'/'.join(k.cli for k in preset_knobs(spec) if k.cli)} choose another)")
        else:
            params = {**params, **preset_params(args, spec, model)}
    return model, tok, build(spec, params, model, tok), sampling
