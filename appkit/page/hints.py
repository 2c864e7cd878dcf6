"""Page text that must follow the loaded model: the prompt box's room and the hub models' availability.

Why: the prompt hint said "2,048 positions" after another model was loaded, and the model list offered
hub models that cannot load on an offline machine without saying so.
"""
from __future__ import annotations

import gradio as gr

from decoding.models import max_positions

from ..public.limits import MAX_PROMPT_CHARS


def prompt_info(positions: int | None, model: str = "") -> str:
    room = f"{model + ': ' if model else ''}{positions:,} positions for prompt + output; " if positions else ""
    return f"{room}at most {MAX_PROMPT_CHARS:,} characters"


def prompt_hint(h, target, device, dtype, kernel=None):
    """The prompt box's info for the target as loaded now (nothing is loaded here)."""
    try:
        name = h.model_name(target, "target")
    except ValueError:
        return gr.skip()
    dev = "auto" if h.lim.public else device
    if not h.cache.cached(name, dev, dtype, kernel):
        return gr.update(info=f"{MAX_PROMPT_CHARS:,} characters at most; the model's positions show once it loads")
    model = h.cache.get(name, dev, dtype, kernel)[0]
    return gr.update(info=prompt_info(max_positions(model.config), str(target)))


def hub_label(model_id: str) -> str:
    """A hub id as the model list shows it: marked when its files are not in the local cache (offline it
    cannot load; online the first use downloads it)."""
    try:
        from huggingface_hub import try_to_load_from_cache
        hit = try_to_load_from_cache(model_id, "config.json")
    except Exception:  # noqa: BLE001 - an odd id or no hub library: treat as not downloaded
        hit = None
    return model_id if isinstance(hit, str) else f"{model_id} (not downloaded: needs internet on first use)"


def kernel_info() -> str:
    """What "exact" means under each CPU kernel, with the int8 greedy's measured agreement with HF greedy
    (bench/kernels/int8_agreement.py's result file; left out where it is missing)."""
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "bench" / "results" / "int8-agreement-smollm2-135m-instruct.json"
    try:
        seen = json.loads(path.read_text())["summary"]["int8"]["all"]
        measured = (f" (identical on {seen['identical']} of {seen['requests']} held-out requests of the default "
                    "model, docs/cpu-kernel.md)")
    except (OSError, ValueError, KeyError, TypeError):
        measured = " (measured in docs/cpu-kernel.md)"
    return ("CPU block weights (the default model). fp32: exact = every method returns HF's float32 greedy tokens. "
            "int8: faster rows; exact = every method returns the int8 greedy's tokens, whatever the rows a step "
            "verifies (batch invariant), and that greedy agrees with HF greedy on a measured fraction" + measured)


DTYPE_INFO = ("fp32: exact, greedy's tokens; bf16/fp16: half the memory, faster on a GPU, may drift. "
              "auto = fp32 on CPU, bf16 on GPU")
