"""Per-device presets shared by the CLI and the app: the shapes the autotuners chose for a (model, device),
shipped for the models we measured on a CPU, or tuned on this machine and cached on disk (never in the repo).

Keyed by the weights, not the name: what sets a step's cost is the architecture and its sizes (model_type,
hidden, intermediate, layers, heads, KV heads, head size, vocabulary), the quantisation / CPU kernel and the
device. A renamed copy of the default model (its GGUF under another file name) was looked up by name, found
nothing, ran the paper's GPU shape and lost to greedy by half (0.48x), where the same weights under their own
name got the CPU preset. Names still match (a tuned entry written by name), and a tuned entry whose folder
holds the same shape matches a renamed copy too. Where nothing matches on a CPU, the CLI times the method's
default shape against a 1-row step (cpu_fallback) and never defaults to one that would run at half of
greedy's speed or worse when nothing is accepted.

Why here: the paper's GPU lookahead setting (W5 N4 G5) loses to greedy on a CPU (a wide step costs several
1-token steps there), so `decodescope generate --method lookahead` without W/N/G runs the preset the app
runs, from one table. The app's tuning (appkit/run/presets.py) writes the cache this module reads.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..models.fetch import FOLDER, cache_root
from ..methods.registry import SPECS

# The embedded model on a CPU: the best rows measured on the 2-core dev box with the v2 models
# (bench/results/cpu-embedded-{code,chat}.md: lookahead W1 N3 G2 at 1.66x / 1.69x HF greedy, speculative staged
# tree 2,1,1,1,1 at 1.03x / 1.14x), so the first run needs no tuning. Jacobi block 2 (bench/methods/jacobi_reference.py:
# compression ~1.0 at any K; small K costs least); eagle 8 / medusa 4 with cut 0.1 (bench_heads.py --cuts 0,0.1:
# eagle 0.99x -> 1.05x HF greedy, medusa 0.96x -> 0.99x); retrieval: REST's / SuffixDecoding's defaults
# (bench/methods/retrieval_bench.py); self_speculative: the shipped adapter's depth and stop.
# Declared in each method's spec (spec.presets["cpu_embedded"]); this dict is derived from them.
SHIPPED_CPU = {name: spec.presets["cpu_embedded"] for name, spec in SPECS.items() if "cpu_embedded" in spec.presets}
# The default model (SmolLM2-135M-Instruct) on a CPU with the block kernel (decoding/fast/blocks.py): what the
# page's own tuners (appkit/run/presets.py tune(), on the page's example chat requests, never the held-out bench ones)
# chose on the 2-core dev box, 1 thread, 2026-11-25: lookahead W1 N3 G1 (0.80x a greedy step's rate: no window
# pays here, bench/results/cpu-smollm2-135m-instruct-heldout_chat.md), Jacobi block 1, EAGLE budget 4 with cut
# 0.1 (2.21 tokens/step, 54.8 tokens/s on the pilots), Medusa budget 4 with cut 0.1. Speculative with the
# shipped distilled draft (assets/drafts/smollm2), tuned the same way on 2026-11-27 (load 0.7): tree 3,2,1,
# 1.68 tokens/step, 1.06x greedy's 62 tokens/s on the pilots (chain-like trees 2,1,1: 1.03x).
# Re-measured on 2026-11-27 after the one-call CPU step (decoding/fast/cpu_step.py) made a 1-row step 14 -> 8.4 ms,
# so that every verified row costs relatively more: on the page's 4 example chat requests, 64 tokens, 2 rounds
# (python bench/methods/cpu_presets.py, load 0.6), EAGLE budget 4 cut 0.1 0.97x greedy, adaptive budget 8 1.06x (so the
# preset is now adaptive); prompt lookup copying 10 tokens 0.71x, 3 tokens 0.98x, adaptive (copies priced per
# step) 0.99x (now adaptive: it still copies far where the text repeats, as code does). After the step's weight
# list was cached (greedy ~10% faster) and EAGLE's layer became one op call: EAGLE adaptive budget 8 1.01x, the same
# drafting over the 4,096 most frequent tokens 1.07x (so the preset drafts over those).
# Declared in each method's spec (spec.presets["cpu_default"]); this dict is derived from them.
SHIPPED_CPU_DEFAULT = {name: spec.presets["cpu_default"] for name, spec in SPECS.items()
                       if "cpu_default" in spec.presets}


# The fields of a config that set a step's cost (with the kernel and device); the parameter count follows
# from them
SHAPE = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "head_dim", "vocab_size")
# SmolLM2-135M's shape (the default model's config.json), on which the cpu_default presets were tuned
DEFAULT_SHAPE = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                 "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152}
LOSES_BY = 2.0  # a default shape whose step costs this many 1-row steps or more runs at <= 1/2 of greedy's
# speed whenever nothing is accepted: on a CPU the CLI does not default to it


def shape_of(config) -> dict:
    """The SHAPE fields of a config (a transformers config or its config.json as a dict), defaults filled
    (KV heads = heads, head size = hidden / heads) so a converted GGUF's config and the original's compare equal."""
    if isinstance(config, dict):
        top, d = config, config.get("text_config") or config
        get = d.get
    else:
        top = d = config.get_text_config() if hasattr(config, "get_text_config") else config
        get = (lambda k, default=None: getattr(d, k, default))  # noqa: E731
    out = {k: get(k) for k in SHAPE}
    out["model_type"] = out["model_type"] or (top.get("model_type") if isinstance(top, dict) else None)
    if out["num_key_value_heads"] is None:
        out["num_key_value_heads"] = out["num_attention_heads"]
    if out["head_dim"] is None and out["hidden_size"] and out["num_attention_heads"]:
        out["head_dim"] = out["hidden_size"] // out["num_attention_heads"]
    return out


def folder_shape(name: str | Path) -> dict | None:
    """shape_of a local model folder's config.json (None: not a folder with a readable config)."""
    try:
        return shape_of(json.loads((Path(str(name)).expanduser() / "config.json").read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def shape_words(shape: dict) -> str:
    """"llama, 30 layers x 576 (intermediate 1536, 9 heads / 3 KV x 64), vocab 49152"."""
    return (f"{shape['model_type']}, {shape['num_hidden_layers']} layers x {shape['hidden_size']} (intermediate "
            f"{shape['intermediate_size']}, {shape['num_attention_heads']} heads / {shape['num_key_value_heads']} KV x "
            f"{shape['head_dim']}), vocab {shape['vocab_size']}")


def weights_key(model) -> str:
    """What sets this model's step cost, as a cache key: its shape, its quantisation and the CPU kernel."""
    from ..fast.cpu_gemm import model_kernel
    quant = getattr(model.config, "quantization_config", None)
    method = (quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)) or "none"
    return "weights:" + ",".join(f"{k}={v}" for k, v in shape_of(model.config).items()) + \
        f",quant={method},kernel={model_kernel(model)}"


def is_default(model_name: str) -> bool:
    """The default model, by the page's name for it or its cache folder."""
    from ..models import DEFAULT_MODEL
    return model_name == DEFAULT_MODEL or Path(str(model_name)).name == FOLDER


def is_embedded(model_name: str) -> bool:
    """The embedded target, by its path as given (relative or absolute)."""
    from ..models import EMBEDDED_TARGET
    try:
        return model_name == EMBEDDED_TARGET or Path(model_name).resolve() == Path(EMBEDDED_TARGET).resolve()
    except (OSError, ValueError):
        return False


def device_key(model) -> str:
    import torch
    p = next(model.parameters())
    if p.device.type == "cuda":
        return f"{torch.cuda.get_device_name(p.device)}|{p.dtype}"
    return f"cpu|{p.dtype}|threads={torch.get_num_threads()}"


def preset_file(cache_dir: str | Path | None = None) -> Path:
    """Where tuned presets are kept: presets.json in the cache folder (decoding.models.fetch.cache_root)."""
    return cache_root(cache_dir) / "presets.json"


def store_key(model) -> str:
    """The cache file's key for a preset tuned on `model` here: its weights (weights_key) and device, so a
    renamed copy finds it."""
    return f"{weights_key(model)}|{device_key(model)}"


def embedded_shape() -> dict | None:
    from ..models import EMBEDDED_TARGET
    return folder_shape(EMBEDDED_TARGET)


def lookup(model_name: str, model, method: str, path: Path | None = None) -> dict | None:
    """{"params", "source"} for this model's weights on this device and method: tuned before on this device
    (the cache file: by weights, by name, or by a stored folder of the same shape), else shipped for the
    embedded or the default model's shape on a CPU, else None."""
    from ..models import DEFAULT_MODEL, EMBEDDED_TARGET
    try:
        stored = json.loads((path or preset_file()).read_text())
    except (OSError, ValueError):
        stored = {}
    stored = stored if isinstance(stored, dict) else {}
    names = [model_name] + ([DEFAULT_MODEL] if is_default(model_name) else []) + \
            ([EMBEDDED_TARGET] if is_embedded(model_name) else [])
    key, shape = device_key(model), shape_of(model.config)
    same_shape = [k for k in stored if k.endswith(f"|{key}") and not k.startswith("weights:")
                  and k[:-len(key) - 1] not in names and folder_shape(k[:-len(key) - 1]) == shape]
    for k in [store_key(model)] + [f"{name}|{key}" for name in names] + same_shape:
        entry = stored.get(k, {})
        if isinstance(entry, dict) and isinstance(entry.get(method), dict):
            return {"params": entry[method], "source": "tuned on this device"}
    if next(model.parameters()).device.type != "cpu":
        return None
    why = f" for this shape ({shape_words(shape)})"
    if method in SHIPPED_CPU and (is_embedded(model_name) or shape == embedded_shape()):
        return {"params": SHIPPED_CPU[method], "source": f"measured on a 2-core CPU (shipped){why}"}
    if method in SHIPPED_CPU_DEFAULT and (is_default(model_name) or shape == DEFAULT_SHAPE):
        return {"params": SHIPPED_CPU_DEFAULT[method],
                "source": f"tuned on a 2-core CPU on the page's examples (shipped){why}"}
    return None


def step_cost_ratio(model, rows: int, reps: int = 5, kv_len: int = 256) -> float:
    """A `rows`-row step's ms over a 1-row step's, on this model and device against a kv_len-token cache
    (the row cost the tuners price steps with, decoding/engine/timing.py); each the fastest of `reps`, the two
    interleaved, so another process's load (which only adds time) moves the ratio as little as it can."""
    import random
    from ..engine.masks import depths_of
    from ..engine.timing import time_step, timing_core, tree_parents
    from ..fast.static_cache import bucket
    from ..models import max_positions
    limit = max_positions(model.config)
    if limit is not None and kv_len + rows > limit:
        kv_len = max(1, limit - rows)
    rng = random.Random(0)
    vocab = model.get_input_embeddings().weight.shape[0]
    core = timing_core(model, kv_len + bucket(rows))
    core.prefill([rng.randrange(vocab) for _ in range(kv_len)])
    core.commit(list(range(kv_len)))
    steps = {q: ([rng.randrange(vocab) for _ in range(q)], tree_parents(q)) for q in (1, rows)}
    best = {1: float("inf"), rows: float("inf")}
    for i in range(reps + 1):
        for q, (tokens, parents) in steps.items():
            ms = time_step(core, tokens, parents, depths_of(parents), 1)[0]
            best[q] = min(best[q], ms) if i else best[q]  # the first round warms up
    return best[rows] / best[1]


def cpu_fallback(spec, model, ratio: float | None = None) -> dict | None:
    """On a CPU with no preset: when the method's default shape costs LOSES_BY 1-row steps or more (so it runs
    at half of greedy's speed or worse whenever nothing is accepted), {"params", "source"} of the smallest
    shape the method ships for a CPU instead; None when the default shape is cheap enough here (or no
    smaller shape is shipped). `ratio`: the measured step_cost_ratio (measured here when None)."""
    if next(model.parameters()).device.type != "cpu" or spec.query_tokens is None:
        return None
    shipped = [p for place, p in spec.presets.items() if place.startswith("cpu")]
    if not shipped:
        return None
    small = min(shipped, key=lambda p: spec.query_tokens({**spec.defaults(), **p}))
    rows = spec.query_tokens(spec.defaults())
    if rows <= spec.query_tokens({**spec.defaults(), **small}):
        return None
    ratio = step_cost_ratio(model, rows) if ratio is None else ratio
    if ratio < LOSES_BY:
        return None
    return {"params": small, "ratio": ratio, "rows": rows,
            "source": f"the smallest shipped CPU shape: the default's {rows}-row step costs {ratio:.1f} 1-row steps "
                      f"here (measured now), so it would run at {1 / ratio:.2f}x greedy's speed or less whenever "
                      f"nothing is accepted"}
