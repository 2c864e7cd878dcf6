"""What profiling costs: plain run vs trace on vs step ranges vs full torch.profiler, interleaved.

Why: the trace is always on in the app, so it must be nearly free (goal: <= 5% over tracing off); the
profiler is opt-in and its overhead is reported so users know how far profiled step times are inflated.
Runs are interleaved (rotating order each round) and the median of several rounds is reported, because
the machine is shared and drifts. Run:  python bench/kernels/bench_profiling.py [--model DIR] [--reps 9]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from decoding import generate, load, make_drafter  # noqa: E402
from decoding.methods.registry import SPECS  # noqa: E402
from profiling.profiler import StepClock  # noqa: E402

MODES = ("plain", "traced", "ranges", "profiled")


def bench_model(hidden: int, layers: int, vocab: int):
    """An in-process Llama big enough that a step is not pure Python overhead."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=int(2.75 * hidden),
                      num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                      num_key_value_heads=max(1, hidden // 128), max_position_embeddings=2048,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(cfg).eval()


def one_run(mode: str, model, prompt: list[int], method: str, n: int, params: dict,
            trace_dir: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one decoding run in `mode` (profiled includes start/stop and export).

    CPU time is reported too: on a shared machine it is far less noisy than wall time (1 thread)."""
    drafter = make_drafter(method, **params)
    kw = dict(max_new_tokens=n, eos_token_id=None)
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "plain":
        generate(model, prompt, drafter, trace=False, **kw)
    elif mode == "traced":
        generate(model, prompt, drafter, trace=True, **kw)
    elif mode == "ranges":
        clock = StepClock(method, model.device)
        generate(model, prompt, drafter, trace=True, step_context=clock, **kw)
        clock.finish()
    else:
        clock = StepClock(method, model.device)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if model.device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            generate(model, prompt, drafter, trace=True, step_context=clock, **kw)
        clock.finish()
        prof.export_chrome_trace(f"{trace_dir}/bench.json")
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model dir/hub id (default: in-process Llama)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--method", default="lookahead")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model, _ = load(args.model)
        vocab = model.get_input_embeddings().weight.shape[0]
    else:
        model, vocab = bench_model(args.hidden, args.layers, args.vocab), args.vocab
    params = dict(SPECS[args.method].presets.get("teaching", {}))  # lookahead: the paper's W5 N4 G5
    prompt = [(7 * i) % vocab for i in range(12)] * 3
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as d:
        for m in MODES:  # warm-up: allocator, mask caches, profiler initialisation
            one_run(m, model, prompt, args.method, args.max_new_tokens, params, d)
        for r in range(args.reps):
            order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
            for m in order:
                times[m].append(one_run(m, model, prompt, args.method, args.max_new_tokens, params, d))
    wall = {m: statistics.median(t[0] for t in v) for m, v in times.items()}
    cpu = {m: statistics.median(t[1] for t in v) for m, v in times.items()}
    print(f"{args.method}, {args.max_new_tokens} new tokens, {model.device}, threads={torch.get_num_threads()}, "
          f"median of {args.reps} interleaved rounds")
    paired = {m: statistics.median(t[1] / p[1] - 1 for t, p in zip(v, times["plain"])) for m, v in times.items()}
    print(f"{'mode':<9} {'wall ms':>8} {'vs plain':>9} {'cpu ms':>8} {'vs plain':>9} {'paired':>8}  what")
    what = {"plain": "trace=False", "traced": "trace=True (the app's default)",
            "ranges": "trace + StepClock record_function ranges, no profiler",
            "profiled": "trace + ranges + torch.profiler + Perfetto export"}
    for m in MODES:
        print(f"{m:<9} {wall[m] * 1e3:>8.1f} {100 * (wall[m] / wall['plain'] - 1):>+8.1f}% "
              f"{cpu[m] * 1e3:>8.1f} {100 * (cpu[m] / cpu['plain'] - 1):>+8.1f}% {100 * paired[m]:>+7.1f}%  {what[m]}")
    print("paired = median over rounds of cpu(mode) / cpu(plain) in the same round - 1 (robust to drift)")
    cost = 100 * paired["traced"]
    print(f"trace overhead {cost:+.1f}% (paired cpu; goal <= 5%): {'OK' if cost <= 5 else 'OVER'}")

if __name__ == "__main__":
    main()
