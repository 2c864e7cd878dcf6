"""Per-device presets shared by the CLI and the app: the shapes the autotuners chose for a (model, device),
shipped for the models we measured on a CPU, or tuned on this machine and cached on disk (never in the repo).

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


def lookup(model_name: str, model, method: str, path: Path | None = None) -> dict | None:
    """{"params", "source"} for this (model, device) and method: tuned before on this device (the cache
    file), else shipped for the embedded or the default model on a CPU, else None."""
    from ..models import DEFAULT_MODEL, EMBEDDED_TARGET
    try:
        stored = json.loads((path or preset_file()).read_text())
    except (OSError, ValueError):
        stored = {}
    names = [model_name] + ([DEFAULT_MODEL] if is_default(model_name) else []) + \
            ([EMBEDDED_TARGET] if is_embedded(model_name) else [])
    key = device_key(model)
    for name in names:
        entry = stored.get(f"{name}|{key}", {}) if isinstance(stored, dict) else {}
        if isinstance(entry, dict) and isinstance(entry.get(method), dict):
            return {"params": entry[method], "source": "tuned on this device"}
    cpu = next(model.parameters()).device.type == "cpu"
    if is_embedded(model_name) and cpu and method in SHIPPED_CPU:
        return {"params": SHIPPED_CPU[method], "source": "measured on a 2-core CPU (shipped)"}
    if is_default(model_name) and cpu and method in SHIPPED_CPU_DEFAULT:
        return {"params": SHIPPED_CPU_DEFAULT[method], "source": "tuned on a 2-core CPU on the page's examples (shipped)"}
    return None
