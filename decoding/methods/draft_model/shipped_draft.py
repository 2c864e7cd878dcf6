"""The draft model shipped for the default target (SmolLM2-135M-Instruct): its own layers only, the rest borrowed.

Why: speculative decoding needs a draft with the target's tokenizer, and the SmolLM2 family has no member
smaller than the default model. assets/drafts/smollm2 holds a 2-layer Llama of the target's width, distilled
from the target's own greedy answers (assets/drafts/smollm2/train.py). It shares the target's input embedding
and tied LM head (the same modules, on the target's device, dtype and weight layout), so only its layers and
final norm ship, as ggml blocks (Q8_0: int8 codes and a float16 scale per 32 inputs; or Q4_1, the target's
own format: 4-bit codes, a float16 scale and minimum per 32 inputs), a few MB instead of 113 MB.
De-quantised they are exact blocks, so the CPU kernel streams them as blocks (decoding/fast/blocks.py).

A draft folder is untrusted like a heads folder: files present and bounded before a byte is read, a JSON card,
the base model's fingerprint, tensors of the shapes the card's config implies.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from decoding.methods.checkpoint import check_fingerprint, read_card, require_files
from decoding.models import ASSETS

SHIPPED = ASSETS / "drafts" / "smollm2"  # the repo's assets/, or decodescope/assets when installed
CARD, WEIGHTS = "draft.json", "layers.safetensors"
FORMAT = "decodescope.draft/1"
LAYERS_FROM = (0, 1)  # the target's layers the draft's layers start from (train.py)
MAX_BYTES = (1 << 20, 64 << 20)  # card, weights: bounded before anything is read
QK = 32


class DraftError(ValueError):
    """A draft folder that cannot serve this target: one line saying why."""


def draft_config(target_config, layers: int = len(LAYERS_FROM)):
    """The draft's config: the target's, with `layers` decoder layers (width, heads, rope, vocab shared)."""
    cfg = target_config.__class__.from_dict(target_config.to_dict())
    cfg.num_hidden_layers = layers
    cfg.tie_word_embeddings = True
    return cfg


def quantize_q8_0(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes [N, K], float16 scales [N, K // 32]): ggml's Q8_0 (d = max|w| / 127 per block of 32)."""
    n, k = w.shape
    blocks = w.detach().float().reshape(n, k // QK, QK)
    d = (blocks.abs().amax(-1) / 127).half()
    df = d.float()[..., None]
    q = torch.where(df > 0, (blocks / df).round(), torch.zeros_like(blocks)).clamp_(-127, 127)
    return q.to(torch.int8).reshape(n, k), d


def dequantize_q8_0(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The float32 weight of Q8_0 codes: fp32(d) * q, exact (so blocks.recover finds the blocks again)."""
    return d.float().repeat_interleave(QK, dim=1) * q.float()


def quantize_q4_1(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes [N, K // 2] two 4-bit codes a byte, low nibble first; float16 d and m [N, K // 32]): ggml's
    Q4_1 (m = block min, d = (max - min) / 15)."""
    n, k = w.shape
    blocks = w.detach().float().reshape(n, k // QK, QK)
    lo, hi = blocks.amin(-1), blocks.amax(-1)
    d, m = ((hi - lo) / 15).half(), lo.half()
    df, mf = d.float()[..., None], m.float()[..., None]
    q = torch.where(df > 0, ((blocks - mf) / df).round(), torch.zeros_like(blocks)).clamp_(0, 15)
    q = q.to(torch.uint8).reshape(n, k)
    return q[:, 0::2] | (q[:, 1::2] << 4), d, m


def dequantize_q4_1(packed: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The float32 weight of Q4_1 codes: fp32(d) * q + fp32(m), as ggml computes it (blocks.recover finds it)."""
    q = torch.stack((packed & 15, packed >> 4), dim=-1).reshape(packed.shape[0], -1)
    return d.float().repeat_interleave(QK, dim=1) * q.float() + m.float().repeat_interleave(QK, dim=1)


def save_draft(draft, out: Path, target, trained_with: dict, storage: str = "q8_0") -> None:
    """Write the draft's own tensors (layers, final norm) and its card; the 2-D weights as ggml blocks
    (`storage`: q8_0, 8.5 bits a weight, or q4_1, 5 bits, the target's own format)."""
    from safetensors.torch import save_file
    from decoding.methods.self_draft.heads import base_fingerprint
    tensors = {}
    for name, p in draft.named_parameters():
        if name.startswith(("model.embed_tokens", "lm_head")):
            continue  # borrowed from the target at load
        if p.dim() == 2 and p.shape[1] % QK == 0 and storage == "q4_1":
            tensors[name + ".q4_1"], tensors[name + ".d"], tensors[name + ".m"] = quantize_q4_1(p)
        elif p.dim() == 2 and p.shape[1] % QK == 0:
            tensors[name + ".q8_0"], tensors[name + ".d"] = quantize_q8_0(p)
        else:
            tensors[name] = p.detach().float().contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / WEIGHTS))
    card = {"format": FORMAT, "base_model": "SmolLM2-135M-Instruct (decodescope fetch-model)",
            "base_fingerprint": base_fingerprint(target), "vocab_size": int(draft.config.vocab_size),
            "hidden_size": int(draft.config.hidden_size), "layers": draft.config.num_hidden_layers,
            "layers_from": list(LAYERS_FROM), "storage": storage, "trained_with": trained_with}
    (out / CARD).write_text(json.dumps(card, indent=1) + "\n")


def expected_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """Every tensor the draft's own state holds, with its shape, as the config implies."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg)
    return {n: tuple(p.shape) for n, p in m.named_parameters()
            if not n.startswith(("model.embed_tokens", "lm_head"))}


def load_draft_folder(target, folder: str | Path | None = None):
    """The draft in `folder` for `target`: its layers de-quantised into the target's dtype and device, the
    target's embedding and LM head shared. DraftError (one line) for a folder that does not fit."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM
    from decoding.methods.self_draft.heads import base_fingerprints
    folder = Path(folder if folder is not None else SHIPPED)
    require_files(folder, (CARD, WEIGHTS), DraftError, f"{folder} is not a draft folder (needs {CARD} and "
                  f"{WEIGHTS})", MAX_BYTES, "a draft model")
    card = read_card(folder / CARD, DraftError)
    if card.get("format") != FORMAT:
        raise DraftError(f"{folder / CARD} is not a {FORMAT} card")
    check_fingerprint(card, base_fingerprints(target), DraftError, "this draft was",
                      "pass draft_model= (--draft) a draft for this model")
    layers = card.get("layers")
    if not isinstance(layers, int) or not 1 <= layers <= target.config.get_text_config().num_hidden_layers:
        raise DraftError(f"{folder / CARD}: layers must be an int from 1 to the target's layer count")
    cfg = draft_config(target.config.get_text_config(), layers)
    shapes = expected_shapes(cfg)
    emb = target.get_input_embeddings().weight
    state = {}
    try:
        with safe_open(str(folder / WEIGHTS), "pt") as f:
            keys = set(f.keys())
            for name, shape in shapes.items():
                scales = (shape[0], shape[1] // QK) if len(shape) == 2 else None
                if name + ".q8_0" in keys and name + ".d" in keys:
                    q, d = f.get_tensor(name + ".q8_0"), f.get_tensor(name + ".d")
                    if (q.dtype != torch.int8 or d.dtype != torch.float16 or tuple(q.shape) != shape
                            or tuple(d.shape) != scales):
                        raise DraftError(f"{folder / WEIGHTS}: {name} is not Q8_0 blocks of shape {shape}")
                    w = dequantize_q8_0(q, d)
                elif all(name + x in keys for x in (".q4_1", ".d", ".m")):
                    q, d, m = (f.get_tensor(name + x) for x in (".q4_1", ".d", ".m"))
                    if (q.dtype != torch.uint8 or d.dtype != torch.float16 or m.dtype != torch.float16
                            or scales is None or tuple(q.shape) != (shape[0], shape[1] // 2)
                            or tuple(d.shape) != scales or tuple(m.shape) != scales):
                        raise DraftError(f"{folder / WEIGHTS}: {name} is not Q4_1 blocks of shape {shape}")
                    w = dequantize_q4_1(q, d, m)
                elif name in keys:
                    w = f.get_tensor(name)
                    if tuple(w.shape) != shape or not w.dtype.is_floating_point:
                        raise DraftError(f"{folder / WEIGHTS}: {name} has shape {tuple(w.shape)}, not {shape}")
                else:
                    raise DraftError(f"{folder / WEIGHTS} lacks {name}")
                state[name] = w.to(device=emb.device, dtype=emb.dtype)
    except DraftError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a damaged file
        raise DraftError(f"{folder / WEIGHTS} is corrupt ({type(e).__name__})") from None
    from accelerate import init_empty_weights
    with init_empty_weights():  # parameters on "meta" (no 113 MB embedding to throw away), buffers real
        draft = AutoModelForCausalLM.from_config(cfg, dtype=emb.dtype)
    draft.load_state_dict(state, strict=False, assign=True)
    draft.set_input_embeddings(target.get_input_embeddings())
    draft.set_output_embeddings(target.get_output_embeddings())
    draft = draft.to(emb.device).eval()
    draft.name_or_path_ = str(folder)  # its config is the target's, _name_or_path included: the trace names the folder
    return draft


def fits(target, folder: str | Path | None = None) -> bool:
    """Whether the folder's draft was distilled for this target (its card's fingerprint), without loading it."""
    from decoding.methods.self_draft.heads import base_fingerprints
    try:
        card = json.loads((Path(folder if folder is not None else SHIPPED) / CARD).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(card, dict) and card.get("base_fingerprint") in base_fingerprints(target)


NO_DRAFT = ("speculative decoding needs a draft model, and none ships for this model (drafts ship for the default "
            "SmolLM2-135M-Instruct and the embedded target): pass draft_model= (a model object, or the path or "
            "hub id of a smaller model sharing the target's tokenizer; the CLI's --draft)")
AUTO_DRAFT = "auto"  # draft_model="auto" (or None through run/build_drafter): the draft shipped for the target


def default_draft(model):
    """(draft model, None) shipped for `model`: the distilled SmolLM2 draft (assets/drafts/smollm2, sharing the
    target's embedding and LM head) when the base-model fingerprint fits, the embedded draft for the embedded
    target; else a ValueError that says how to get one."""
    from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET
    if fits(model):
        return with_layout(load_draft_folder(model), getattr(model, "weight_layout_", None)), None
    if Path(getattr(model, "name_or_path_", "") or "").expanduser().resolve() == Path(EMBEDDED_TARGET).resolve():
        return load_draft(model, EMBEDDED_DRAFT)
    raise ValueError(NO_DRAFT)


def load_draft(model, draft) -> tuple:
    """(draft model, its tokenizer or None): a model object as is; "auto" the draft shipped for the target
    (default_draft); a draft folder (draft.json: layers only, the target's embedding and head shared) for
    this target; a path or hub id loaded like the target (decoding.load) on the target's device and in its
    dtype."""
    if draft is None or draft == AUTO_DRAFT:
        return default_draft(model)
    if not isinstance(draft, (str, Path)):
        return draft, None
    from decoding.models import load
    layout = getattr(model, "weight_layout_", None)
    if (Path(draft).expanduser() / CARD).is_file():
        d = load_draft_folder(model, Path(draft).expanduser())
        return with_layout(d, layout), None
    w = model.get_input_embeddings().weight
    dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(w.dtype)
    return load(str(draft), device=str(w.device), dtype=dtype,
                layout=layout if layout in ("stock", "column", "packed") else "auto")


def with_layout(draft, layout: str | None):
    """A draft that borrows the target's embedding and head gets the target's weight layout for its own
    layers (the shared head is packed already, and packing skips it); a target without one (not loaded by
    decoding.load) keeps transformers' stock layout, and so does its draft."""
    from decoding.fast.layout import apply_layout
    draft.weight_layout_ = apply_layout(draft, layout if layout in ("stock", "column", "packed") else "stock")
    return draft
