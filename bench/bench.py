"""DecodeScope against what a user would use instead, on the same model, prompts and process.

    python bench/bench.py                      # embedded models, code + chat prompts, 5 runs
    python bench/bench.py --quick              # seconds: tiny random models (used by the test suite)

Runs are interleaved (every method once per round, rounds repeated), times are medians over rounds of
each method's total over all prompts. Greedy methods are checked token for token against HF greedy.
--kernels fp32,int8 adds every "ours" row again on the int8 kernel (decoding/fast/cpu_int8.cpp), named
"<row> [int8]": those rows are checked token for token against "ours greedy [int8]", that mode's own greedy
(what exact means there), and the note under the table says how often that greedy equals HF's float32 greedy.
Writes a Markdown table and JSON (machine, versions, dtype, device, the command, prompts and date) under
bench/results/, the files the README's tables come from (bench/readme_table.py). Load discipline: the load
average is printed before and after each run, and numbers for bench/results/ are refused while the 1-minute
load average is above LOAD_LIMIT (one line, exit status 2); --allow-load runs anyway and marks the output
"measured under load" (readme_table.py leaves such files out of the README).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "compare"))  # llamacpp.py: the llama.cpp rows
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from decoding import load, run  # noqa: E402
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET, resolve  # noqa: E402
from decoding.api import load_draft  # noqa: E402
from decoding.methods.draft_model import shipped_draft  # noqa: E402
from decoding.methods.registry import SPECS  # noqa: E402

# (W, N, G, text_span): None = the engine's default span; N - 1 = the paper's pool; (15, 5, 15) = its GPU setting
LOOKAHEAD = [(1, 3, 2, None), (1, 4, 1, None), (1, 5, 2, None), (1, 5, 2, 4), (2, 5, 2, None), (5, 4, 5, None),
             (15, 5, 15, None), (15, 5, 15, 4)]


def load_prompts(sets: list[str], tok=None) -> list[dict]:
    """Prompts of bench/prompts/<set>.jsonl: {"prompt": text} as is, {"chat": request} through the tokenizer's
    chat template (as text whose tokenization is the template's ids)."""
    out = []
    for name in sets:
        for line in (ROOT / "bench" / "prompts" / f"{name}.jsonl").read_text().splitlines():
            entry = {"set": name, **json.loads(line)}
            if "chat" in entry:
                if tok is None or not getattr(tok, "chat_template", None):
                    raise SystemExit(f"prompt set {name} holds chat requests: the model needs a chat template")
                entry["prompt"] = tok.apply_chat_template([{"role": "user", "content": entry["chat"]}],
                                                          add_generation_prompt=True, tokenize=False)
            out.append(entry)
    return out


def quality(tok, outputs: list[list[int]]) -> dict:
    """Text quality of greedy answers: the share of outputs in which a non-empty line repeats 3 or more
    times (a loop), and distinct-4 (distinct token 4-grams / all 4-grams, pooled)."""
    loops, grams, total = 0, set(), 0
    for ids in outputs:
        lines = [ln.strip() for ln in tok.decode(ids, skip_special_tokens=True).splitlines() if ln.strip()]
        loops += any(lines.count(ln) >= 3 for ln in set(lines))
        four = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
        grams |= set(four)
        total += len(four)
    return {"repeat_line_share": loops / max(len(outputs), 1), "distinct_4": len(grams) / total if total else None}


def hf_runner(model, tok, **gen_kw):
    def go(prompt: str, n: int) -> tuple[list[int], int | None]:
        ids = tok(prompt, return_tensors="pt")["input_ids"].to(model.device)
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                 pad_token_id=tok.eos_token_id, **gen_kw)
        return out[0, ids.shape[1]:].tolist(), None
    return go


def layout_row(model, hf_model, tok) -> dict:
    """{"HF greedy (<layout> layout)": HF greedy on our load} when our load's weight layout differs from the
    HF baseline's: how much of a speed-up the layout alone gives; {} when they are the same."""
    layout = getattr(model, "weight_layout_", "stock")
    return {} if layout == getattr(hf_model, "weight_layout_", "stock") else {
        f"HF greedy ({layout} layout)": hf_runner(model, tok)}


def ours_runner(model, tok, method: str, **params):
    def go(prompt: str, n: int) -> tuple[list[int], int]:
        if "history" in SPECS[method].param_names():  # the suffix cache's history would hold this prompt's runs
            from decoding.methods.retrieve.suffix_cache import HISTORY
            HISTORY.clear()
        tr = run(model, tok, prompt, method, max_new_tokens=n, trace=False, **params)
        return tr.output_ids, tr.stats()
    return go


def shipped_heads(model_name: str) -> Path | None:
    """The folder holding medusa/ and eagle/ heads shipped for this model (assets/heads: the embedded target;
    assets/heads/smollm2: the default model), else None."""
    from decoding.models.fetch import FOLDER
    if Path(model_name).resolve() == Path(EMBEDDED_TARGET).resolve():
        return ROOT / "assets" / "heads"
    return ROOT / "assets" / "heads" / "smollm2" if Path(model_name).name == FOLDER else None


DRAFT_VOCAB = 4096  # a smaller drafting vocabulary than the heads' default quarter, for one EAGLE row
HEADS_BUDGET = 8  # the shipped CPU EAGLE preset (appkit/run/presets.py SHIPPED_CPU; bench/methods/bench_heads.py sweeps it)


def contenders(model, tok, draft, k: int, auto: dict | None = None, hf_model=None, hf_draft=None,
               spec_auto: dict | None = None, heads: Path | None = None) -> dict:
    """HF rows run on hf_model/hf_draft: the same weights as loaded by transformers (stock layout), which is
    what a user would run instead; ours run on the engine's load (see decoding/fast/layout.py). The extra row
    'HF greedy (engine layout)' shows how much of our speed-up comes from the weight layout alone."""
    hf_model, hf_draft = hf_model or model, hf_draft or draft
    c = {"HF greedy": hf_runner(hf_model, tok), **layout_row(model, hf_model, tok)}
    c["ours greedy"] = ours_runner(model, tok, "greedy")
    for W, N, G, span in LOOKAHEAD:
        name = f"ours lookahead W{W} N{N} G{G}" + (" (span N-1, paper pool)" if span == N - 1 else "")
        c[name] = ours_runner(model, tok, "lookahead", window=W, ngram=N, guesses=G, text_span=span)
    if auto:
        c[f"ours lookahead auto (W{auto['window']} N{auto['ngram']} G{auto['guesses']})"] = ours_runner(
            model, tok, "lookahead", **auto)
    if is_default_model(model):  # the app's Run tab on a CPU: the shipped preset for the default model
        from decoding.tuning.device_presets import SHIPPED_CPU_DEFAULT
        from appkit.run.presets import describe
        from decoding.methods.registry import spec_of
        for method, preset in SHIPPED_CPU_DEFAULT.items():
            if not spec_of(method).needs:  # the presets of the methods that need nothing shipped beside the model
                c[f"ours {method.replace('_', ' ')} {describe(method, preset)} (app CPU preset)"] = ours_runner(
                    model, tok, method, **preset)
    c["HF prompt lookup"] = hf_runner(hf_model, tok, prompt_lookup_num_tokens=10, max_matching_ngram_size=2)
    c["ours prompt lookup"] = ours_runner(model, tok, "prompt_lookup")
    for block in (4, 8):  # plain Jacobi: the lesson row, expected near greedy
        c[f"ours jacobi K{block}"] = ours_runner(model, tok, "jacobi", block=block)
    if draft is not None:
        # HF reads K from the ASSISTANT's generation config (a generate() kwarg is ignored); 0.4 is its
        # default confidence stop, which our chains and fixed trees use too
        gc = hf_draft.generation_config
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = k, "constant", 0.4
        c[f"HF assisted K{k}"] = hf_runner(hf_model, tok, assistant_model=hf_draft)
        spec = lambda **p: ours_runner(model, tok, "speculative", draft_model=draft, **p)  # noqa: E731
        c[f"ours speculative chain K{k}"] = spec(draft_tokens=k)
        c["ours speculative tree 4,2"] = spec(tree=[4, 2])
        c[f"ours speculative staged chain K{k + 2}"] = spec(draft_tokens=k + 2, staged=True)
        c["ours speculative staged tree 2,1,1,1,1"] = spec(tree=[2, 1, 1, 1, 1], staged=True)
        if spec_auto:
            from decoding.methods.draft_model.shape_tune import label
            c[f"ours speculative auto ({label(spec_auto)})"] = spec(**spec_auto)
    for name, method, p in (("ours self-speculative", "self_speculative", {}),
                            ("ours self-speculative tree 2x2 d6 b12", "self_speculative",
                             {"branch": 2, "beam": 2, "depth": 6, "stop": 0.3, "budget": 12}),
                            ("ours retrieval (suffix cache)", "retrieval", {}),
                            ("ours retrieval (shipped datastore)", "retrieval",
                             {"datastore": str(ROOT / "assets" / "datastore" / "smollm2")}),
                            # its nodes priced by the row-cost curve (decoding/methods/row_cost.py)
                            ("ours retrieval adaptive (shipped datastore)", "retrieval",
                             {"datastore": str(ROOT / "assets" / "datastore" / "smollm2"), "adaptive": 1})):
        if runs_here(model, tok, method, **p):  # rows only where the adapter / datastore fits this model
            c[name] = ours_runner(model, tok, method, **p)
    # self-drafting heads: rows only where heads for it exist; EAGLE also at twice the budget and adaptive
    for kind, budgets, adaptive in (("medusa", (HEADS_BUDGET,), False),
                                    ("eagle", (HEADS_BUDGET // 2, HEADS_BUDGET, 2 * HEADS_BUDGET), True)):
        if heads is not None and (Path(heads) / kind / "heads.json").is_file():
            for b in budgets:
                c[f"ours {kind} budget {b}"] = ours_runner(model, tok, kind, heads=str(Path(heads) / kind), budget=b)
            from appkit.run.presets import describe
            from decoding.tuning.device_presets import SHIPPED_CPU_DEFAULT
            preset = SHIPPED_CPU_DEFAULT.get(kind) if is_default_model(model) else None
            if preset:  # the app's shipped CPU preset for the default model
                c[f"ours {kind} {describe(kind, preset)} (app CPU preset)"] = ours_runner(
                    model, tok, kind, heads=str(Path(heads) / kind), **preset)
            if adaptive:  # the tree sized per step from the draft's confidence and the row-cost curve
                c[f"ours {kind} adaptive budget {2 * HEADS_BUDGET}"] = ours_runner(
                    model, tok, kind, heads=str(Path(heads) / kind), budget=2 * HEADS_BUDGET, adaptive=1)
                # and drafting over the 4,096 tokens the target chose most often (FR-Spec) instead of a quarter
                c[f"ours {kind} adaptive budget {2 * HEADS_BUDGET} draft vocab {DRAFT_VOCAB}"] = ours_runner(
                    model, tok, kind, heads=str(Path(heads) / kind), budget=2 * HEADS_BUDGET, adaptive=1,
                    draft_vocab=DRAFT_VOCAB)
    return c


def cpu_gemm_isa() -> str:
    from decoding.fast import cpu_gemm
    return cpu_gemm.int8_isa()


def int8_note(rows: list[dict]) -> str | None:
    """The sentence under the table for the int8 rows: what their exact column means, how often the int8 mode's
    greedy equals HF's float32 greedy, and each int8 row's speed against that mode's greedy."""
    r8 = [r for r in rows if r["method"].endswith(INT8)]
    g = next((r for r in r8 if r["method"] == INT8_GREEDY), None)
    if g is None:
        return None
    ran = ("Rows marked [int8] run the int8 kernel (int8 activations, int32 block sums, batch-invariant)"
           if g.get("kernel") == "int8" else
           "Rows marked [int8] asked for the int8 kernel and ran the fp32 one (this model has no block weights)")
    others = [f"{r['method']} {r['vs_own_greedy']:.2f}x" for r in r8 if r is not g]
    return (f"{ran}: their "
            f"exact column compares each with {INT8_GREEDY}, that mode's own greedy. {INT8_GREEDY} was identical to "
            f"HF's float32 greedy on {g['hf_identical']} of {g['requests']} requests."
            + (f" Against {INT8_GREEDY}: " + ", ".join(others) + "." if others else ""))


def is_default_model(model) -> bool:
    """Whether `model` is the default model as fetched (its folder's name), whose app presets the bench shows."""
    from decoding.models.fetch import FOLDER
    return Path(getattr(model, "name_or_path", "") or "").name == FOLDER


def runs_here(model, tok, method: str, **params) -> bool:
    """Whether a method runs on this model (its shipped adapter or datastore fits it): a 1-token probe."""
    from decoding.api import METHODS
    if method not in METHODS:
        return False
    try:
        run(model, tok, "x", method, max_new_tokens=1, trace=False, **params)
    except (ValueError, OSError) as e:
        print(f"no {method} row: {str(e).splitlines()[0][:160]}", file=sys.stderr)
        return False
    return True


INT8 = " [int8]"  # the suffix of the rows run on the int8 kernel
INT8_GREEDY = "ours greedy" + INT8  # their reference: the int8 mode's own greedy


def int8_rows(model8, tok, draft, k: int, auto, hf_model, hf_draft, spec_auto, heads) -> dict:
    """Every "ours" row again on a model loaded with the int8 kernel, named "<row> [int8]"."""
    rows = contenders(model8, tok, draft, k, auto, hf_model, hf_draft, spec_auto, heads)
    return {name + INT8: fn for name, fn in rows.items() if name.startswith("ours")}


def bench(model, tok, draft, prompts: list[dict], runs: int, n: int, k: int, only: str | None,
          auto: dict | None = None, hf_model=None, hf_draft=None, spec_auto: dict | None = None,
          heads: Path | None = None, extra: dict | None = None, model8=None, fp32: bool = True) -> list[dict]:
    """extra: more rows, {name: runner}, after ours (bench/compare/llamacpp.py's). A runner with a `greedy_of`
    attribute naming another row gets 'equals_greedy_of': [runs equal, runs, that row], round by round.
    model8: the same model on the int8 kernel (its "ours" rows again, INT8-suffixed); fp32 False: without the
    fp32 kernel's "ours" rows."""
    every = contenders(model, tok, draft, k, auto, hf_model, hf_draft, spec_auto, heads)
    if not fp32:
        every = {name: fn for name, fn in every.items() if not name.startswith("ours")}
    if model8 is not None:
        every.update(int8_rows(model8, tok, draft, k, auto, hf_model, hf_draft, spec_auto, heads))
    every.update(extra or {})
    runners = {name: fn for name, fn in every.items()
               if not only or any(o in name for o in only.split(",")) or name in ("HF greedy", INT8_GREEDY)}
    for fn in runners.values():  # warm-up: first calls pay allocation and lazy-init costs
        fn(prompts[0]["prompt"], 8)
    times = {name: [] for name in runners}
    results: dict[str, list] = {}
    rounds: dict[str, list] = {name: [] for name in runners}  # every round's output ids, per row
    for r in range(runs):
        for name, fn in runners.items():
            t0 = time.perf_counter()
            outs = [fn(p["prompt"], n) for p in prompts]
            times[name].append(time.perf_counter() - t0)
            results[name] = outs
            rounds[name].append([ids for ids, _ in outs])
        print(f"round {r + 1}/{runs} done", file=sys.stderr)
    from readme_table import kernel_of
    from decoding.fast.cpu_gemm import model_kernel
    ran8 = model_kernel(model8) if model8 is not None else None
    ref = [ids for ids, _ in results["HF greedy"]]
    ref8 = [ids for ids, _ in results[INT8_GREEDY]] if INT8_GREEDY in results else None
    base = statistics.median(times["HF greedy"])
    rows = []
    for name in runners:
        outs = results[name]
        int8 = name.endswith(INT8)
        q = quality(tok, [ids for ids, _ in outs]) if tok is not None else {}
        n_tok = sum(len(ids) for ids, _ in outs)
        stats = [s for _, s in outs if s]
        steps = sum(s["steps"] for s in stats)
        t = statistics.median(times[name])
        rows.append({"method": name, "tokens": n_tok, "median_s": t, "tokens_per_s": n_tok / t,
                     "vs_hf_greedy": base / t,
                     # exact within its mode: the int8 rows against the int8 mode's own greedy
                     "exact": [ids for ids, _ in outs] == (ref8 if int8 else ref),
                     # fp32, int8, llama.cpp or torch fp32 (HF's rows); an [int8] row on a model without block
                     # weights ran the fp32 kernel, and says so
                     "kernel": ran8 if int8 else kernel_of({"method": name}),
                     **({"hf_identical": sum(a == b for (a, _), b in zip(outs, ref)),
                         "vs_own_greedy": statistics.median(times[INT8_GREEDY]) / t} if int8 else {}),
                     "compression": n_tok / steps if steps else None,
                     # pooled over the prompts' decode steps (a prompt that stops at EOS after its prefill
                     # token has none; a mean of per-prompt means counted it as 0 accepted)
                     "mean_accepted": (sum(s["new_tokens"] - 1 for s in stats) / max(sum(s["steps"] - 1 for s in stats), 1)
                                       if stats else None),
                     "runs": len(times[name]), "requests": len(outs), **q})
        ref_row = getattr(runners[name], "greedy_of", None)
        if ref_row in rounds:
            from llamacpp import agreement
            rows[-1]["equals_greedy_of"] = [*agreement(rounds[name], rounds[ref_row]), ref_row]
    return rows


LOAD_LIMIT = 0.5  # 1-minute load average above which numbers are not README numbers


def under_load(before: float, after: float, threads: int) -> bool:
    """Whether other work shared the machine: the load before the run, or after it less the bench's own
    threads (a 1-thread bench alone leaves a load average near 1.0 behind; that is not load)."""
    return before > LOAD_LIMIT or after - threads > LOAD_LIMIT
RESULTS = ROOT / "bench" / "results"


def load_average() -> float:
    """The 1-minute load average (0.0 where the OS has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return 0.0


def print_load(when: str) -> float:
    """Print the load average (stderr) and return the 1-minute value."""
    one = load_average()
    print(f"load average {when}: {one:.2f} (1 min)" + (f" — above {LOAD_LIMIT}: under load" if one > LOAD_LIMIT
                                                        else ""), file=sys.stderr, flush=True)
    return one


def refuse_under_load(allow: bool, what: str = "README numbers") -> str | None:
    """None when numbers may be written now; else the one line saying why not (the caller prints it, exits 2).
    With allow (--allow-load) never refuses: the caller marks its output as measured under load."""
    one = load_average()
    if one > LOAD_LIMIT and not allow:
        return (f"error: the 1-minute load average is {one:.2f} (> {LOAD_LIMIT}): not writing {what} now; wait for "
                "a quiet machine, or pass --allow-load for an experiment (marked as measured under load)")
    return None


def for_readme(out: Path) -> bool:
    """Whether `out` is where the README's numbers come from (bench/results/)."""
    try:
        return Path(out).resolve() == RESULTS.resolve()
    except OSError:
        return False


def provenance(script: str, argv: list[str] | None, prompts: str) -> dict:
    """What produced a result file: the command, the prompts and the date (every README figure names them).
    `script` is the caller's __file__: the command names its path from the repository root, so a script moved
    between bench/ folders still records a command that runs."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(script).resolve().relative_to(ROOT).as_posix()
    return {"command": " ".join(["python", path, *args]), "prompt_sets": prompts,
            "date": time.strftime("%Y-%m-%d")}


def cpu_name() -> str | None:
    """The CPU as /proc/cpuinfo names it, with its family/model and widest SIMD (Linux; else None): ratios move
    with the core (AVX-512 VNNI vs AVX2), so a table says which one it was measured on."""
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    first = {}
    for line in info.splitlines():
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    flags = set(first.get("flags", "").split())
    simd = ("AVX-512 VNNI" if {"avx512f", "avx512_vnni"} <= flags else "AVX-512, no VNNI" if "avx512f" in flags
            else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2")
    name = first.get("model name") or platform.processor() or platform.machine()
    return f"{name} (family {first.get('cpu family', '?')}, model {first.get('model', '?')}; {simd})"


def machine(model) -> dict:
    p = next(model.parameters())
    return {"machine": platform.processor() or platform.machine(), "cpu": cpu_name(), "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(), "platform": platform.platform(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "dtype": str(p.dtype).replace("torch.", ""), "device": str(p.device)}


def markdown(rows: list[dict], meta: dict) -> str:
    head = (f"Measured on {meta['gpu'] or meta.get('cpu') or meta['machine']} ({meta['cpus']} CPUs, {meta['threads']} threads), "
            f"{meta['device']} {meta['dtype']}, torch {meta['torch']}, transformers {meta['transformers']}; "
            f"model {meta['model']}, prompts {meta['prompts']}, {meta['max_new_tokens']} new tokens each, "
            f"median of {meta['runs']} interleaved runs."
            + (f" Produced by `{meta['command']}` on {meta['date']}." if meta.get("command") else "")
            + (f" Load average {meta['load_before']:.2f} before, {meta['load_after']:.2f} after (1 min)."
               if meta.get("load_before") is not None else "")
            + (" **Measured under load: not README numbers.**" if meta.get("under_load") else "")
            + "\n\n")
    tail = f"\n{meta['note']}\n" if meta.get("note") else ""  # e.g. how often llama.cpp's drafting kept its greedy
    base = meta.get("baseline", "HF greedy")  # sampling runs: "HF sampling", and no token-for-token check
    lines = [f"| method | kernel | tokens/s | vs {base} | compression | mean accepted | exact | outputs with a line x3 | "
             "distinct-4 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        comp = f"{r['compression']:.2f}" if r["compression"] else "–"
        acc = f"{r['mean_accepted']:.2f}" if r["mean_accepted"] else "–"
        exact = "– (sampling)" if r["exact"] is None else "yes" if r["exact"] else "NO"
        rep = f"{r['repeat_line_share']:.2f}" if r.get("repeat_line_share") is not None else "–"
        d4 = f"{r['distinct_4']:.2f}" if r.get("distinct_4") is not None else "–"
        lines.append(f"| {r['method']} | {r.get('kernel', '–')} | {r['tokens_per_s']:.1f} | {r['vs_hf_greedy']:.2f}x | {comp} | {acc} | "
                     f"{exact} | {rep} | {d4} |")
    return head + "\n".join(lines) + "\n" + tail


def tiny_dir(seed: int = 0) -> str:
    """A tiny random Llama plus a word-level tokenizer saved as a real HF directory: the quick modes of
    the bench scripts check that they run, not speed."""
    sys.path.insert(0, str(ROOT / "tests"))
    import tempfile
    from conftest import save_tiny_dir
    return save_tiny_dir(Path(tempfile.mkdtemp()) / "tiny", seed=seed)


def quick_models():
    """Tiny random target and draft (bench.py --quick)."""
    t, dr = tiny_dir(seed=0), tiny_dir(seed=1)
    model, tok = load(t, device="cpu")
    draft, _ = load(dr, device="cpu")
    stock = load(t, device="cpu", layout="stock")[0], load(dr, device="cpu", layout="stock")[0]
    return model, tok, draft, stock, [{"set": "quick", "prompt": "def x ( y ) : return y + 1"}]


def llama_rows(gguf: str | None, model_name: str, tok, hf_model) -> dict | None:
    """llama.cpp's greedy and prompt-lookup rows (bench/compare/llamacpp.py) on `gguf`, else on the GGUF the default
    model was converted from, at torch's thread count; None, after one line saying why, where they cannot
    run (llama-cpp-python not installed, no GGUF for this model)."""
    import llamacpp
    why = llamacpp.missing()
    if why is None:
        try:
            path = Path(gguf) if gguf else llamacpp.default_gguf(model_name)
            if not path.is_file():
                raise ValueError(f"--gguf {gguf} does not exist")
            eos = hf_model.generation_config.eos_token_id
            eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
            return llamacpp.runners(path, torch.get_num_threads(), eos, lambda p: tok(p)["input_ids"])
        except (ValueError, RuntimeError, OSError) as e:  # FetchError is a RuntimeError
            why = f"no llama.cpp rows: {str(e).splitlines()[0][:200]}"
    print(why, file=sys.stderr)
    return None


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="target (default: the default model, SmolLM2-135M-Instruct; "
                    "`embedded` for the embedded target)")
    ap.add_argument("--draft", default=None, help="draft model (default: the embedded draft, for the embedded "
                    "target only)")
    ap.add_argument("--prompts", default="code,chat", help="comma-separated sets from bench/prompts/")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--only", default=None, help="only methods whose name contains one of these comma-separated words (HF greedy always "
                                                "runs), e.g. --only 'ours greedy,speculative,assisted'")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--kernels", default="fp32", help="comma-separated CPU kernels for our rows: fp32 (exact vs HF "
                    "greedy), int8 (exact vs its own greedy; rows named '<row> [int8]'), e.g. fp32,int8")
    ap.add_argument("--quick", action="store_true", help="tiny random models, 1 run, 16 tokens")
    ap.add_argument("--no-auto", action="store_true", help="skip the autotuned lookahead row")
    ap.add_argument("--heads", default=None, help="folder with medusa/ and eagle/ heads for --model "
                    "(default: assets/heads for the embedded model; rows only where heads exist)")
    ap.add_argument("--gguf", default=None, help="GGUF file for the llama.cpp rows (default: the one the default "
                    "model was converted from; rows need llama-cpp-python: pip install -e '.[bench]')")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip the llama.cpp rows")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="folder for the .md and .json")
    ap.add_argument("--allow-load", action="store_true", help=f"run even when the 1-minute load average is above "
                    f"{LOAD_LIMIT}; the output is marked as measured under load")
    ap.add_argument("--tp-plan", default=None, choices=("auto",),
                    help="under torchrun: shard the target (ours and HF's baseline) with transformers' tensor "
                         "parallelism (docs/distributed.md); rank 0 writes the results")
    a = ap.parse_args(argv)
    kernels = a.kernels.split(",")
    if not kernels or set(kernels) - {"fp32", "int8"}:
        ap.error(f"--kernels: fp32 and/or int8, comma-separated, got {a.kernels!r}")
    if a.tp_plan and not a.no_auto:  # each rank would time its own pilots and could pick another shape
        ap.error("--tp-plan needs --no-auto: autotuning times pilots per process, and the ranks must run one shape")
    if a.tp_plan and os.environ.get("RANK", "0") != "0":  # the other ranks run the same steps, write nothing
        a.out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"decodescope-bench-rank{os.environ['RANK']}")
    if for_readme(Path(a.out)) and not a.quick and (why := refuse_under_load(a.allow_load)):
        print(why, file=sys.stderr)
        raise SystemExit(2)
    before = print_load("before")
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.quick:
        model, tok, draft, (hf_model, hf_draft), prompts = quick_models()
        a.runs, a.max_new_tokens, name = 1, 16, "quick"
    else:
        embedded = a.model == "embedded"
        a.model = EMBEDDED_TARGET if embedded else resolve(a.model)[0]
        embedded = Path(a.model).resolve() == Path(EMBEDDED_TARGET).resolve()
        model, tok = load(a.model, dtype=a.dtype, threads=a.threads, tp_plan=a.tp_plan, kernel="fp32")
        hf_model = load(a.model, dtype=a.dtype, threads=a.threads, layout="stock", tp_plan=a.tp_plan)[0]
        draft = hf_draft = None
        if a.draft or embedded:
            draft = load(a.draft or EMBEDDED_DRAFT, dtype=a.dtype, threads=a.threads)[0]
            hf_draft = load(a.draft or EMBEDDED_DRAFT, dtype=a.dtype, threads=a.threads, layout="stock")[0]
        elif shipped_draft.fits(model):  # the distilled draft shipped for the default model: its own layers on
            draft = load_draft(model, "auto")[0]  # each target's embedding and head (the HF rows: stock)
            hf_draft = load_draft(hf_model, "auto")[0]
        prompts = load_prompts(a.prompts.split(","), tok)
        name = (f"{'cuda' if torch.cuda.is_available() else 'cpu'}-{'embedded' if embedded else Path(a.model).name}-"
                f"{a.prompts.replace(',', '+')}")
    auto = spec_auto = None
    if not a.no_auto:  # W/N/G chosen from this device's latency curve and pilots on the first 3 prompts
        from decoding.methods.windows.lookahead_tune import autotune
        from decoding.tuning.tune import kit
        tuned = autotune(kit(), model, tok, [p["prompt"] for p in prompts[:3]], pilot_tokens=min(48, a.max_new_tokens))
        auto = tuned["best"]
        print(f"autotune picked {auto} (curve {tuned['curve']})", file=sys.stderr)
        if draft is not None:  # K / tree / staged chosen by timing pilots on the same 3 prompts
            from decoding.methods.draft_model.shape_tune import autotune_speculative
            spec_auto = autotune_speculative(kit(), model, draft, tok, [p["prompt"] for p in prompts[:3]],
                                             pilot_tokens=min(32, a.max_new_tokens))["best"]
            print(f"speculative autotune picked {spec_auto}", file=sys.stderr)
    heads = Path(a.heads) if a.heads else None if a.quick else shipped_heads(a.model)
    model8 = None
    if "int8" in kernels:  # the same model on the int8 kernel (decoding/fast/cpu_int8.cpp)
        model8 = load(model.name_or_path_ if a.quick else a.model, dtype=a.dtype, threads=a.threads, layout="packed",
                      kernel="int8")[0]
    extra = None if a.quick or a.no_llama_cpp or a.tp_plan else llama_rows(a.gguf, a.model, tok, hf_model)
    rows = bench(model, tok, draft, prompts, a.runs, a.max_new_tokens, a.draft_tokens, a.only, auto,
                 hf_model, hf_draft, spec_auto, heads, extra, model8, "fp32" in kernels)
    after = print_load("after")
    meta = {**machine(model), **provenance(__file__, argv, a.prompts if not a.quick else "quick"),
            "load_before": before, "load_after": after,
            "under_load": a.allow_load or under_load(before, after, torch.get_num_threads()), "weight_layout": {"ours": getattr(model, "weight_layout_", "stock"),
                                                "hf": getattr(hf_model, "weight_layout_", "stock")},
            "autotuned": auto, "speculative_autotuned": spec_auto, "kernels": kernels,
            **({"int8_isa": cpu_gemm_isa()} if model8 is not None else {}),
            "model": "tiny random" if a.quick else ("embedded (assets/target)" if embedded else Path(a.model).name),
            "prompts": a.prompts if not a.quick
            else "quick", "max_new_tokens": a.max_new_tokens, "runs": a.runs}
    from llamacpp import note, version
    if extra:
        meta["llama_cpp"] = version()
    notes = [x for x in (note(rows), int8_note(rows)) if x]
    if notes:
        meta["note"] = "\n\n".join(notes)
    md = markdown(rows, meta)
    print(md)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if kernels != ["fp32"]:
        name += "-kernels-" + "-".join(kernels)
    if a.threads is not None:  # the 1- and 2-thread tables of one command are two files, not one overwritten
        name += f"-threads-{a.threads}"
    if a.only and not a.quick:  # a subset of the rows: its own file, never overwriting the full table
        name += "-only-" + "".join(c if c.isalnum() else "_" for c in a.only.lower())[:60]
    (out / f"{name}.md").write_text(md)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
