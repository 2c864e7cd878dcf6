"""Self-drafting heads on the target's own features: the Medusa heads and the EAGLE head, and their files.

Medusa (Cai et al. 2024): head k = ResBlock (Linear(h, h) initialised to zero, SiLU, residual) then an LM
head, on the target's last (normed) hidden state at the last accepted position; head k guesses the token
k + 2 positions ahead (the target's own LM head gives + 1). Our heads SHARE the target's LM head (frozen):
a head is then 0.1M parameters instead of h x vocab (10x smaller files, and training on a CPU spends its
time in the vocab projection either way). EAGLE (Li et al. 2024): fc over [embedding of the next token;
the target's feature] then one Llama decoder layer predicts the next feature; the target's embedding and
LM head are frozen and shared. EAGLE-3 (Li et al. 2025): the same head reads a FUSION of several of the
target's hidden states (low, middle and high layers, concatenated, one Linear down to h: `fuse`) instead of the
top feature alone, and is trained on the token loss only, unrolled on its own outputs (decoding/training/
eagle3.py); its card lists the fused layers (eagle.fuse), so the engine hands those states from the forward it
runs anyway. Files: heads.safetensors + heads.json naming the base model's fingerprint, so heads are never used
on a model they were not trained for.
"""
from __future__ import annotations

import hashlib
import json
import os
import weakref
from pathlib import Path

import numpy as np
import torch
from torch import nn

from decoding.fast.layout import column_major_linears
from decoding.engine.drafter import Abilities, Plan
from decoding.engine.sampling import Sampling, warp
from decoding.models import ASSETS, cache_kwarg
from decoding.methods.checkpoint import check_fingerprint, load_weights, read_card, require_files
from decoding.methods.spec import knob
from decoding.params import LIMITS, MAX_TREE_NODES

KINDS = ("medusa", "eagle")
CONFIG, WEIGHTS, COUNTS = "heads.json", "heads.safetensors", "token_counts.safetensors"


class HeadsError(ValueError):
    """Heads that cannot be used (wrong base model, corrupt or missing file); the message is for the user."""


def _embedding_sample(model) -> tuple[list, torch.Tensor]:
    """(shape facts, a strided sample of at most ~1M values of the input embedding, on the CPU). A sharded
    embedding (tensor parallelism: a DTensor) is gathered first, on every rank alike, so each rank sees
    the whole table (a collective: all ranks fingerprint together, as they load together)."""
    cfg = model.config.get_text_config()
    w = model.get_input_embeddings().weight.detach()
    if hasattr(w, "full_tensor"):  # torch.distributed.tensor.DTensor
        w = w.full_tensor()
    emb = w.flatten().cpu()
    step = max(1, emb.numel() // 1_000_000)
    return [cfg.model_type, int(cfg.hidden_size), int(emb.numel()), int(w.shape[0])], emb[::step]


def base_fingerprint(model) -> str:
    """sha256 of the base model's shape and of the SIGNS of a strided sample of its input embedding: equal for
    the same weights in fp32, bf16 or fp16 (a cast rounds a value, it never flips its sign: signbit keeps
    the sign of a value rounded to zero), different for another model or another checkpoint of it. The
    values themselves would change with the dtype, and bf16 is the CUDA default for large models."""
    facts, sample = _embedding_sample(model)
    h = hashlib.sha256(b"signs/1")
    h.update(json.dumps(facts).encode())
    h.update(np.packbits(torch.signbit(sample).numpy()).tobytes())
    return h.hexdigest()[:16]


def base_fingerprints(model) -> tuple[str, str]:
    """(base_fingerprint, the value fingerprint cards written before it record): heads and adapters
    trained earlier still load on the model they were trained for when it is loaded in fp32."""
    facts, sample = _embedding_sample(model)
    h = hashlib.sha256()
    h.update(json.dumps(facts).encode())
    h.update(sample.float().numpy().tobytes())
    return base_fingerprint(model), h.hexdigest()[:16]


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)  # starts as the identity: head k begins as the target's own guess
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """n ResBlocks; logits come from the target's LM head (passed in: it is frozen and shared)."""

    def __init__(self, hidden: int, n_heads: int):
        super().__init__()
        self.blocks = nn.ModuleList([ResBlock(hidden) for _ in range(n_heads)])  # n distinct modules

    def forward(self, feat: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """feat [..., h] -> logits [n_heads, ..., vocab]."""
        return lm_head(self.features(feat))

    def features(self, feat: torch.Tensor) -> torch.Tensor:
        """feat [..., h] -> each head's feature [n_heads, ..., h] (what the LM head reads)."""
        return torch.stack([b(feat) for b in self.blocks])


class EagleHead(nn.Module):
    """fc([embedding; feature]) -> one Llama decoder layer (own rotary, KV cache usable) -> next feature.
    With spec["fuse"] (EAGLE-3): a real feature is fuse(concat of those hidden states of the target), see
    feature(); predicted features are fed back as they come out of the layer."""

    def __init__(self, spec: dict):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel
        h = spec["hidden"]
        self.fc = nn.Linear(2 * h, h, bias=False)
        fuse = spec.get("fuse")
        self.fuse = nn.Linear(len(fuse) * h, h, bias=False) if fuse else None
        cfg = LlamaConfig(vocab_size=1, hidden_size=h, intermediate_size=spec["intermediate"],
                          num_hidden_layers=1, num_attention_heads=spec["heads"],
                          num_key_value_heads=spec["kv_heads"], head_dim=spec["head_dim"],
                          max_position_embeddings=spec["max_positions"], rms_norm_eps=spec["eps"],
                          rope_parameters={"rope_type": "default", "rope_theta": spec["rope_theta"]},
                          pad_token_id=None, bos_token_id=None, eos_token_id=None)
        cfg._attn_implementation = "sdpa"
        self.body = LlamaModel(cfg)

    def forward(self, emb: torch.Tensor, feat: torch.Tensor, position_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, past_key_values=None, use_cache: bool = False) -> torch.Tensor:
        """emb, feat [B, T, h] -> predicted features [B, T, h]. The one decoder layer is called directly
        (rotary, layer, norm): a drafting step calls it once per tree level, and LlamaModel's per-call
        set-up (mask creation, output capture) cost more than the layer itself on a CPU. No mask = causal
        (training); drafting passes its additive tree mask and the head's own KV cache."""
        x = self.fc(torch.cat([emb, feat], dim=-1))
        if position_ids is None:
            start = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(start, start + x.shape[1], device=x.device)[None]
        if attention_mask is None and x.shape[1] > 1 and past_key_values is not None and past_key_values.get_seq_length():
            raise ValueError("EagleHead: pass the attention mask when appending several rows to a cache")
        b = self.body
        x = b.layers[0](x, attention_mask=attention_mask, position_ids=position_ids,
                        **{cache_kwarg(b.layers[0]): past_key_values},
                        use_cache=use_cache, position_embeddings=b.rotary_emb(x, position_ids=position_ids))
        return b.norm(x)

    def feature(self, states: torch.Tensor) -> torch.Tensor:
        """The head's real feature from the target's hidden states [..., layers, h] (the card's layers, in
        its order): the one state itself, or (EAGLE-3) fuse over their concatenation -> [..., h]."""
        if self.fuse is None:
            return states[..., 0, :]
        return self.fuse(states.flatten(-2))


FUSE_MAX = 8  # fused hidden states an EAGLE-3 card may list (the paper fuses 3)


def fused_layers(path: str | Path) -> tuple[int, ...]:
    """The target hidden states an EAGLE head in `path` reads (transformers' hidden_states indices): its
    card's eagle.fuse, else (-1,), the last normed state. Read before a model loads (the runner asks a
    drafter's abilities early); anything unreadable gives (-1,) here, and load_heads refuses the card
    with one line when the drafter binds."""
    try:
        fuse = json.loads((Path(path) / CONFIG).read_text()).get("eagle", {}).get("fuse")
    except (OSError, ValueError, AttributeError):
        return (-1,)
    if isinstance(fuse, list) and fuse and all(_whole(k) for k in fuse):
        return tuple(fuse)
    return (-1,)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_eagle_spec(spec, model, where: str) -> None:
    """Refuse an EAGLE card whose shape cannot be this model's head (the file is untrusted: a shape is
    checked before a tensor is made from it): whole-number sizes in bounds, the model's hidden width, query
    heads a multiple of KV heads, positive eps and rope theta, and eagle.fuse (if any) 1 to FUSE_MAX
    distinct hidden-state indices of this model (0 the embeddings, k after decoder layer k, L the last,
    normed state)."""
    if not isinstance(spec, dict):
        raise HeadsError(f"{where} holds no eagle shape (an object under \"eagle\")")
    for k in ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "max_positions"):
        v = spec.get(k)
        if not _whole(v) or not 1 <= v <= (1 << 24 if k == "max_positions" else 1 << 16):
            raise HeadsError(f"{where}: eagle.{k} must be a whole number in bounds, got {v!r}")
    c = model.config.get_text_config()
    if spec["hidden"] != int(c.hidden_size) or spec["heads"] % spec["kv_heads"] or \
            spec["heads"] * spec["head_dim"] > 1 << 16:
        raise HeadsError(f"{where}: eagle shape {spec['heads']} heads x {spec['head_dim']} ({spec['kv_heads']} KV "
                         f"heads), hidden {spec['hidden']} does not fit this model (hidden {c.hidden_size})")
    for k in ("eps", "rope_theta"):
        v = spec.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < float("inf"):
            raise HeadsError(f"{where}: eagle.{k} must be a positive number, got {v!r}")
    fuse = spec.get("fuse")
    if fuse is None:
        return
    n = int(c.num_hidden_layers)
    if not (isinstance(fuse, list) and 1 <= len(fuse) <= FUSE_MAX and all(_whole(k) and 0 <= k <= n for k in fuse)
            and len(set(fuse)) == len(fuse)):
        raise HeadsError(f"{where}: eagle.fuse must list 1 to {FUSE_MAX} distinct hidden-state indices in 0..{n} "
                         f"(0 the embeddings, {n} the last, normed state), got {fuse!r}")


def eagle_spec(model) -> dict:
    """The EAGLE layer's shape from the base model's config (any causal LM, with Llama-like fallbacks)."""
    c = model.config.get_text_config()
    h = int(c.hidden_size)
    heads = int(getattr(c, "num_attention_heads", None) or max(1, h // 64))
    rope = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", getattr(c, "rope_theta", 10000.0))
    return {"hidden": h, "heads": heads, "kv_heads": int(getattr(c, "num_key_value_heads", None) or heads),
            "head_dim": int(getattr(c, "head_dim", None) or h // heads),
            "intermediate": int(getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * h),
            "max_positions": int(getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", 2048)),
            "eps": float(getattr(c, "rms_norm_eps", None) or 1e-6), "rope_theta": float(rope or 10000.0)}


def new_heads(model, kind: str, n_heads: int = 4, fuse: list[int] | None = None) -> tuple[nn.Module, dict]:
    """Fresh heads for `model` and their config (saved beside the weights); fuse: an EAGLE-3 head over these
    hidden states (check_eagle_spec's indices)."""
    if kind not in KINDS:
        raise HeadsError(f"unknown heads kind {kind!r}; choose one of {', '.join(KINDS)}")
    h = int(model.config.get_text_config().hidden_size)
    cfg = {"kind": kind, "base_fingerprint": base_fingerprint(model), "hidden": h,
           "base_model": str(getattr(model.config, "_name_or_path", "") or "").split("/")[-1]}
    if kind == "medusa":
        cfg.update(n_heads=n_heads, lm_head="shared")
        module = MedusaHeads(h, n_heads)
    else:
        cfg.update(eagle=eagle_spec(model) | ({"fuse": list(fuse)} if fuse else {}))
        check_eagle_spec(cfg["eagle"], model, "new heads")
        module = EagleHead(cfg["eagle"])
    dev = model.get_input_embeddings().weight.device
    return module.to(dev), cfg


def save_heads(module: nn.Module, cfg: dict, out: str | Path, extra: dict | None = None) -> None:
    from safetensors.torch import save_file
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(out / WEIGHTS))
    (out / CONFIG).write_text(json.dumps({**cfg, **(extra or {})}, indent=1))


def check_heads_files(path: str | Path) -> None:
    """A heads folder holds both files (checked before a model loads, so a wrong --heads is one line at once)."""
    path = Path(path)
    require_files(path, (CONFIG, WEIGHTS), HeadsError, f"{path} holds no heads ({CONFIG} and {WEIGHTS}); train "
                  "them with python -m decoding train-heads")


def load_heads(path: str | Path, model, kind: str | None = None) -> tuple[nn.Module, dict]:
    """Heads from `path` for `model`; refused (HeadsError, one line) for another base model, another
    kind than asked, or a missing/corrupt file."""
    path = Path(path)
    check_heads_files(path)
    cfg = read_card(path / CONFIG, HeadsError)
    if cfg.get("kind") not in KINDS:
        raise HeadsError(f"{path / CONFIG} names no known heads kind ({cfg.get('kind')!r})")
    if kind is not None and cfg["kind"] != kind:
        raise HeadsError(f"{path} holds {cfg['kind']} heads, not {kind} heads")
    check_fingerprint(cfg, base_fingerprints(model), HeadsError, f"these {cfg['kind']} heads were",
                      "train heads for it with python -m decoding train-heads")
    if cfg["kind"] == "eagle":
        check_eagle_spec(cfg.get("eagle"), model, str(path / CONFIG))
    vocab = cfg.get("draft_vocab")
    if vocab is not None and not (_whole(vocab) and vocab >= 0):
        raise HeadsError(f"{path / CONFIG}: draft_vocab must be a whole number >= 0, got {vocab!r}")
    module = (MedusaHeads(cfg["hidden"], cfg["n_heads"]) if cfg["kind"] == "medusa"
              else EagleHead(cfg["eagle"]))
    load_weights(module, path / WEIGHTS, HeadsError, CONFIG)
    w = model.get_input_embeddings().weight
    return module.to(device=w.device, dtype=w.dtype).eval(), cfg


def save_counts(out: str | Path, counts: np.ndarray) -> None:
    """How often the target chose each token over the training rows (its argmax: what a head must guess)."""
    from safetensors.torch import save_file
    Path(out).mkdir(parents=True, exist_ok=True)
    save_file({"target_argmax": torch.from_numpy(np.asarray(counts, dtype=np.int64))}, str(Path(out) / COUNTS))


def load_counts(path: str | Path) -> torch.Tensor | None:
    """The heads' token counts, or None (heads trained before counts were kept, or the file is gone)."""
    from safetensors.torch import load_file
    f = Path(path) / COUNTS
    if not f.is_file():
        return None
    try:
        return load_file(str(f))["target_argmax"]
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a damaged file
        raise HeadsError(f"{f} is corrupt ({type(e).__name__}); delete it to draft over the whole vocabulary") from None


CONFIDENCE = 0.0  # default cut: nodes whose path probability is below it are neither verified nor expanded


_LOADED: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()


def load_drafting(path: str | Path, model, kind: str, draft_vocab: int | None) -> tuple[nn.Module, dict, "DraftLM"]:
    """What a heads drafter binds to: the heads (refused for another model; CPU layout as the target's)
    and the target's LM head as the drafts read it. Kept per model while its heads files are unchanged
    (their sizes and times): the app and the benches decode prompt after prompt with one set of heads, and
    reading, fingerprinting and packing them again cost ~40 ms a run on the embedded target."""
    from decoding.fast.layout import apply_layout
    path = Path(path)
    stats = [f.stat() if f.is_file() else None for f in (path / CONFIG, path / WEIGHTS, path / COUNTS)]
    stamp = tuple(st and (st.st_mtime_ns, st.st_size) for st in stats)
    layout = getattr(model, "weight_layout_", "auto")
    # a target on the int8 kernel drafts with it too (cheaper multi-row levels; drafts need no exactness)
    kernel = getattr(model, "cpu_kernel_", None) if layout == "packed" else None
    key = (str(path.resolve()), kind, draft_vocab, layout, kernel, stamp)
    per_model = _LOADED.setdefault(model, {})
    if key not in per_model:
        module, cfg = load_heads(path, model, kind)
        # no size asked: the one the heads were trained over (an EAGLE-3 card's draft_vocab), else DraftLM's
        size = cfg.get("draft_vocab") if draft_vocab is None else draft_vocab
        if draft_blocks(model):
            quantize_drafting(module)
        apply_layout(module, layout, kernel)
        if len(per_model) >= 4:
            per_model.pop(next(iter(per_model)))
        per_model[key] = module, cfg, DraftLM(model.get_output_embeddings(), load_counts(path), size)
    return per_model[key]


def draft_blocks(model) -> bool:
    """Whether a drafter bound to `model` stores its own weights as Q8_0 blocks: where the target's LM head is
    block-packed (a GGUF-converted model on the CPU kernel, decoding/fast/blocks.py), a drafting forward is
    bound by reading weights as the target's is; DECODESCOPE_DRAFT_BLOCKS=0 keeps them float32."""
    lm = model.get_output_embeddings()
    return getattr(lm, "storage", "fp32") != "fp32" and os.environ.get("DECODESCOPE_DRAFT_BLOCKS", "1") != "0"


@torch.no_grad()
def quantize_drafting(module: nn.Module) -> int:
    """Round every Linear weight of a drafting module (K a multiple of 32) to llama.cpp's Q8_0 blocks in place,
    so that the packed layout stores it at 8.5 bits a weight instead of 32. Only drafts change (by ~0.4% of a
    weight's block maximum): the target verifies every token, so greedy output stays exact and sampling keeps
    the target's distribution. Returns how many weights were rounded."""
    from decoding.fast.blocks import dequantize, quantize
    done = 0
    for mod in module.modules():
        if isinstance(mod, nn.Linear) and mod.weight.dtype == torch.float32 and mod.in_features % 32 == 0:
            mod.weight.copy_(dequantize(quantize(mod.weight, "q8_0")))
            done += 1
    return done


def draft_ids(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The drafting vocabulary: the `size` most counted tokens (ties: the lower id), ascending. One rule for
    drafting (DraftLM) and for training a head over that vocabulary (decoding/training/eagle3.py)."""
    return torch.argsort(counts, descending=True, stable=True)[:size].sort().values


LARGE_VOCAB_DRAFT = 32_768  # the default drafting vocabulary's cap (FR-Spec's size for a 128K vocabulary)


class DraftLM:
    """The target's LM head as the drafts use it, optionally restricted to the `size` tokens the target
    chose most often in training (FR-Spec, Zhao et al. 2025). Why: a drafting level multiplies its rows by
    the whole vocab x hidden head (the embedded target: 8,192 x 320, the size of two decoder layers), while
    a token the target rarely emits is rarely worth a tree node. Drafts only: verification runs the full
    head, so greedy ids stay exact and sampling keeps the target's distribution.
    size None: a quarter of the vocabulary (FR-Spec's 32K of Llama 3's 128K; on the embedded target the
    top 2,048 of 8,192 cover 94-98% of its argmax choices), at most LARGE_VOCAB_DRAFT tokens: a quarter of
    Gemma 3's 262K would still be 65K rows per drafting level (EAGLE ran at 0.7 tokens/s against greedy's 3
    there); 0, heads without counts, or an LM head that is
    not a plain Linear: the whole vocabulary. Holds a copy of those rows (a quarter of the LM head's memory
    by default: ~270 MB for a 128K x 4096 bf16 head)."""

    def __init__(self, lm: nn.Module, counts: torch.Tensor | None = None, size: int | None = None):
        self.lm, self.ids, self.size = lm, None, 0
        w = getattr(lm, "weight", None)
        if counts is None or not isinstance(lm, nn.Linear) or w.shape[0] != len(counts):
            return
        size = min(w.shape[0] // 4, LARGE_VOCAB_DRAFT) if size is None else int(size)
        if 0 < size < w.shape[0]:
            ids = draft_ids(counts, size).to(w.device)
            self.head = nn.Linear(w.shape[1], size, bias=lm.bias is not None, device=w.device, dtype=w.dtype)
            self.head.requires_grad_(False)
            self.head.weight.copy_(w.detach()[ids])
            if lm.bias is not None:
                self.head.bias.copy_(lm.bias.detach()[ids])
            from decoding.fast.cpu_gemm import PackedLinear  # not at import: see decoding/fast/cpu_step.py
            if isinstance(lm, PackedLinear):  # the target's layout (layout.py), for the drafts' head too
                self.head = PackedLinear(self.head)
            elif w.device.type == "cpu" and w.dtype == torch.float32:
                column_major_linears(self.head)
            self.ids, self.size, self.ids_host = ids, size, ids.cpu()  # ids_host: where dist() scatters

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits over the drafting vocabulary (column j is token self.ids[j], or token j without ids)."""
        return self.lm(x) if self.ids is None else self.head(x)

    def dist(self, x: torch.Tensor, s: Sampling) -> torch.Tensor:
        """Per row: the distribution sampled drafts are drawn from, over the whole vocabulary (zero outside
        the drafting vocabulary), warped as the target's (temperature, top-k, top-p); on the host."""
        p = warp(self.logits(x).float(), s).cpu()
        if self.ids is None:
            return p
        full = torch.zeros((p.shape[0], self.lm.weight.shape[0]), dtype=torch.float32)
        full[:, self.ids_host] = p
        return full

    def topk(self, x: torch.Tensor, k: int) -> tuple[list[list[float]], list[list[int]]]:
        """Per row: the k best draft tokens and their probabilities (softmax over the drafting vocabulary)."""
        probs = self.logits(x).float().softmax(-1)
        top = torch.topk(probs, min(k, probs.shape[-1]))
        toks = top.indices if self.ids is None else self.ids[top.indices]
        # ONE device-to-host transfer (not one per list): float32/bf16 values and token ids are exact in float64
        vals, ids = torch.stack([top.values.double(), toks.double()]).tolist()
        return vals, [[int(t) for t in row] for row in ids]


class HeadsDrafter:
    """What Medusa and EAGLE share as drafters: built from its spec's parameters (heads folder required; the confidence cut a
    float, the acceptance rule a name, the rest whole numbers) and the same abilities (a tree drafted from
    the target's last hidden state, verified exactly or by typical acceptance)."""
    name: str
    acceptance: str
    tracing = True  # set by the runner: the target probabilities of the tree are read only for the trace
    hidden_layers: tuple[int, ...] = (-1,)  # the target states the heads read (an EAGLE-3 head: its card's)

    @classmethod
    def from_params(cls, **p):
        if not p.get("heads"):
            raise ValueError(f"{cls.name} needs heads: a folder made by python -m decoding train-heads --kind {cls.name}")
        cast = {"confidence": float, "acceptance": str, "row_ms": str}
        return cls(heads_folder(p["heads"], cls.name),
                   **{k: cast.get(k, int)(v) for k, v in p.items() if k != "heads" and v is not None})

    @property
    def abilities(self) -> Abilities:
        return Abilities(hidden_layers=tuple(self.hidden_layers), binds_target=True, acceptance=self.acceptance,
                         wants_tracing=True)


SHIPPED_HEADS = ASSETS / "heads"  # heads.json records the base model each kind was trained for


# Shipped heads by name, wherever the package is installed (the docs use these, not assets/ paths, which
# exist only in a checkout): the embedded target's and the default model's
SHIPPED_NAMES = {"embedded": SHIPPED_HEADS, "smollm2": SHIPPED_HEADS / "smollm2"}


def heads_folder(path, method: str) -> str:
    """A heads folder for `method`: the folder itself, or its <method>/ subfolder when given the parent
    that holds both kinds (assets/heads -> assets/heads/eagle), as the app and the race accept it; a
    shipped set by name ("embedded", "smollm2") where no folder of that name exists."""
    if str(path) in SHIPPED_NAMES and not Path(path).exists():
        path = SHIPPED_NAMES[str(path)]
    p = Path(path).expanduser()
    if not (p / "heads.json").is_file() and (p / method / "heads.json").is_file():
        return str(p / method)
    return str(path)


def default_heads(model, method: str) -> str:
    """The shipped heads for `model`: assets/heads/<method> (the embedded target) or
    assets/heads/smollm2/<method> (the default model), whichever was trained for it (the base-model
    fingerprint their heads.json records), else a ValueError that says how to get heads."""
    fingerprints, bases = base_fingerprints(model), []
    for shipped in (SHIPPED_HEADS / method, SHIPPED_HEADS / "smollm2" / method):
        try:
            cfg = json.loads((shipped / "heads.json").read_text())
        except (OSError, ValueError):
            continue
        if cfg.get("base_fingerprint") and cfg["base_fingerprint"] in fingerprints:
            return str(shipped)
        bases.append(cfg.get("base_model") or "the embedded target")
    raise ValueError(no_heads_for(method, bases))


def check_shipped_heads_fit(model_dir: str, method: str) -> None:
    """Before a model loads: when no shipped heads set has its hidden width (read from config.json, cheap),
    none can be its own, so the refusal default_heads would give after the load comes now. A set of the
    same width may still be another model's: default_heads checks the fingerprint after the load."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return  # a Hub id, or no readable config: the load says what is wrong
    cfg = cfg.get("text_config") or cfg
    hidden = cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model")))
    cards = []
    for shipped in (SHIPPED_HEADS / method, SHIPPED_HEADS / "smollm2" / method):
        try:
            cards.append(json.loads((shipped / "heads.json").read_text()))
        except (OSError, ValueError):
            continue
    if hidden is None or any(c.get("hidden") in (None, hidden) for c in cards):
        return
    raise ValueError(no_heads_for(method, [c.get("base_model") or "the embedded target" for c in cards]))


def no_heads_for(method: str, bases: list[str]) -> str:
    """The one line for a model no shipped heads were trained for."""
    shipped = SHIPPED_HEADS / method
    base = " and ".join(bases) or "the embedded target"
    return (f"{method} needs heads: the shipped ones ({shipped.relative_to(ASSETS.parent)}) were trained "
            f"for {base}, not this model; train heads for it with python -m decoding train-heads "
            f"--model M --kind {method} --data TEXT --out DIR, then pass heads=DIR (--heads DIR)")


def prepare_heads(method: str):
    """The builder's step for a heads method: the shipped heads, for the model they fit, unless given."""
    def prepare(p: dict, model, tokenizer) -> dict:
        return p if p.get("heads") else {**p, "heads": default_heads(model, method)}
    return prepare


def heads_plan(tokens: list[int], parents: list[int], depths: list[int], origins: list[str], info: dict,
               q: torch.Tensor | None = None) -> Plan:
    """A tree the heads drafted (Medusa, EAGLE), as the engine verifies it: x0 then the drafted nodes, each
    its own slot, and every node's target hidden state kept: the next step drafts from the accepted one's."""
    n = len(tokens)
    return Plan(tokens, parents, depths, ["x0"] + ["draft"] * (n - 1), [[i, d] for i, d in enumerate(depths)],
                [False] + [True] * (n - 1), origin="draft", info=info, origins=origins,
                hidden_rows=list(range(n)), q=q)


ACCEPTANCES = ("exact", "typical")


def check_acceptance(acceptance: str, sampling: Sampling | None = None) -> str:
    """The heads' acceptance rule: "exact" (greedy ids = HF greedy; sampling keeps the target's
    distribution) or "typical" (Medusa's, sampling only, not exact). Raises ValueError with one line."""
    if acceptance not in ACCEPTANCES:
        raise ValueError(f"acceptance must be one of {', '.join(ACCEPTANCES)}, got {acceptance!r}")
    if acceptance == "typical" and sampling is not None and sampling.greedy:
        raise ValueError("typical acceptance needs sampling (temperature > 0); greedy verification is exact "
                         "already")
    return acceptance


def check_sampling(p: dict, sampling: Sampling) -> None:
    """The spec's sampling check (medusa, eagle): typical acceptance needs sampling."""
    if p.get("acceptance") is not None:
        check_acceptance(p["acceptance"], sampling)


# The parameters Medusa and EAGLE share, declared once (each spec's dataclass lists them in its own order).
def budget_knob(default: int):
    return knob(default, shared=True, lo=1, hi=MAX_TREE_NODES, cli="--budget", ui=True, label="heads tree budget",
                page_field="heads_budget", page_range="tree_budget",
                help="tree nodes verified per step (default 12 medusa, 16 eagle)")


def heads_knob():
    return knob(None, shared=True, cli="--heads", kind="path",
                help="medusa / eagle: heads folder (python -m decoding train-heads), or its parent holding medusa/ "
                     "and eagle/ (default: the shipped assets/heads/<method> when the model is the one they were "
                     "trained for)")


def draft_vocab_knob():
    return knob(None, shared=True, lo=LIMITS["draft_vocab"][0], hi=LIMITS["draft_vocab"][1], cli="--draft-vocab",
                help="draft only the N tokens the target chose most often in the heads' training (FR-Spec; "
                     "verification still uses the whole vocabulary; 0 = all)")


def cut_knob():
    return knob(CONFIDENCE, shared=True, lo=0.0, hi=1.0, cli="--draft-confidence",
                help="medusa / eagle: do not verify (or expand) a node whose path's draft probability is below it "
                     "(default 0)")


def acceptance_knob():
    return knob("exact", shared=True, choices=ACCEPTANCES, cli="--acceptance",
                help="with --temperature > 0: typical = Medusa's typical acceptance, longer accepted paths but NOT "
                     "exact (the output no longer follows the target's distribution); default exact")
