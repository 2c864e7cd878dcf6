"""Kangaroo's adapter: one decoder layer of the target's own architecture after its first k layers, and its files.

Why one layer of the target's own class: it takes the target's config, rotary and KV cache as they are
(any `model.model.layers` model, engine/shallow.py), and starts from a copy of the target's LAST layer,
whose output already lives where the final norm and LM head expect it. Kangaroo (Liu et al. 2024, arXiv
2404.18911) uses a lighter adapter (norms + one attention block); on SmolLM2-135M the shallow layers are
far from the last feature (top-1 agreement <= 0.07 with the first 8 layers alone), so the MLP is kept.

Files: adapter.safetensors + adapter.json (kind, base-model fingerprint as heads.py computes it, exit layer
k, the model's depth) + token_counts.safetensors (the draft vocabulary's ranking, heads.DraftLM). An adapter
is refused, with one line, for another base model, for k outside the model, or when a file is damaged.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from decoding.engine.shallow import check_exit, decoder_parts
from decoding.methods.checkpoint import check_fingerprint, load_weights, read_card, require_files
from decoding.methods.self_draft.heads import HeadsError, base_fingerprint, base_fingerprints

KIND = "self_speculative"
CONFIG, WEIGHTS = "adapter.json", "adapter.safetensors"
MAX_FILE = 2 << 30  # an adapter is one decoder layer: refuse to read a file beyond 2 GiB


class AdapterError(HeadsError):
    """An adapter that cannot be used (wrong model, wrong k, missing or corrupt file); one line for the user."""


def new_adapter(model, k: int, init: str = "identity") -> tuple[nn.Module, dict]:
    """A fresh adapter for exit layer k: the target's decoder layer class with layer_idx = k (its slot in
    the draft's cache), initialised from the target's last layer; and its config. init "identity": the
    same with the output projections (o_proj, down_proj) zeroed, so training starts from plain early exit
    (norm + head on layer k's state) instead of the last layer applied to a state it never saw."""
    inner = decoder_parts(model)
    k = check_exit(model, k)
    last = inner.layers[-1]
    layer = type(last)(model.config.get_text_config(), layer_idx=k)
    # load_state_dict copies the values; under tensor parallelism the target's layer holds shards (DTensors):
    # the adapter is gathered whole and runs unsharded, alike on every rank
    layer.load_state_dict({n: v.full_tensor() if hasattr(v, "full_tensor") else v for n, v in last.state_dict().items()})
    if init == "identity":
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if name.split(".")[-2] in ("o_proj", "down_proj"):
                    p.zero_()
    w = model.get_input_embeddings().weight
    cfg = {"kind": KIND, "base_fingerprint": base_fingerprint(model), "exit_layer": k,
           "layers": len(inner.layers), "layer_class": type(last).__name__,
           "base_model": str(getattr(model.config, "_name_or_path", "") or "").split("/")[-1]}
    return layer.to(device=w.device, dtype=w.dtype), cfg


def save_adapter(layer: nn.Module, cfg: dict, out: str | Path, extra: dict | None = None) -> None:
    from safetensors.torch import save_file
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().float().cpu().contiguous() for k, v in layer.state_dict().items()}, str(out / WEIGHTS))
    (out / CONFIG).write_text(json.dumps({**cfg, **(extra or {})}, indent=1))


def load_adapter(path: str | Path, model) -> tuple[nn.Module, dict]:
    """The adapter in `path` for `model`, checked (bounded work: sizes first, then the fingerprint)."""
    path = Path(path).expanduser()
    train = f"python -m decoding train-heads --kind {KIND} --exit-layer K"
    require_files(path, (CONFIG, WEIGHTS), AdapterError, f"{path} holds no self-speculative adapter ({CONFIG} and "
                  f"{WEIGHTS}); train one with {train}", max_bytes=(1 << 20, MAX_FILE), what="an adapter")
    cfg = read_card(path / CONFIG, AdapterError)
    if not isinstance(cfg, dict) or cfg.get("kind") != KIND:
        raise AdapterError(f"{path / CONFIG} is not a {KIND} adapter (kind {cfg.get('kind') if isinstance(cfg, dict) else None!r})")
    check_fingerprint(cfg, base_fingerprints(model), AdapterError, "this adapter was", f"train one with {train}")
    n = len(decoder_parts(model).layers)
    k = cfg.get("exit_layer")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k < n:
        raise AdapterError(f"{path / CONFIG}: exit layer {k!r} is not inside this {n}-layer model")
    layer, _ = new_adapter(model, k)
    load_weights(layer, path / WEIGHTS, AdapterError, "this model")
    return layer.eval().requires_grad_(False), cfg


def shipped_adapter() -> Path:
    from decoding.models import ASSETS
    return ASSETS / "heads" / "smollm2-self_speculative"


def default_adapter(model) -> str:
    """The shipped adapter when `model` is the one it was trained for (SmolLM2-135M-Instruct; the
    fingerprint adapter.json records), else a ValueError that says how to train one."""
    shipped = shipped_adapter()
    try:
        cfg = json.loads((shipped / CONFIG).read_text())
    except (OSError, ValueError):
        cfg = {}
    if isinstance(cfg, dict) and cfg.get("base_fingerprint") in base_fingerprints(model):
        return str(shipped)
    raise AdapterError(f"self_speculative needs an adapter: the shipped one ({shipped.name}) was trained for "
                       f"{cfg.get('base_model') or 'SmolLM2-135M-Instruct'}, not this model; train one with "
                       f"python -m decoding train-heads --model M --kind {KIND} --exit-layer K --data TEXT "
                       "--out DIR, then pass adapter=DIR (--adapter DIR)")
