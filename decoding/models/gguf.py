"""An engineer's own GGUF file as a model: converted once into the cache, then loaded like any folder.

    decodescope convert FILE.gguf [--cache DIR] [--force]       # = python -m decoding convert ...
    decodescope generate --model FILE.gguf ...                    # converts on first use, with progress

Why: transformers reads a GGUF file but refuses to save what it read ("quantized with gguf and is not
serializable"), and reading it again on every run de-quantises every tensor again. The converter the default
model uses (fetch.convert: transformers' reader, a fresh model of the same config given the weights,
save_pretrained) makes a plain transformers folder once; it lives in the cache under
models/gguf-<name>-<key>, where key is a hash of the file's name, size and modification time, so an edited or
replaced file converts again and an unchanged one is found at once. A folder holding exactly one .gguf file
(and no config.json) counts as that file.

The weights are stored in float32, which holds every de-quantised value exactly. On CPU the block kernel then
streams a weight as blocks only where its float32 values are exactly ggml blocks (decoding/fast/blocks.py: Q4_1;
Q8_0, Q4_0, Q5_0; Q4_K, Q5_K, Q6_K, Q5_1), recovered bit for bit; any other weight is read as float32 panels.
The conversion measures which is which, with the bytes each kernel would stream (both run the blocks; float32
matrices stay on the fp32 kernel under --kernel int8), and says so (gguf.json, the CLI's progress line,
docs/models.md).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from .fetch import FetchError, cache_root, convert, keep, progress_bar, sweep

MARK = "gguf.json"  # written last: its presence marks a complete conversion
# A conversion writes into .gguf-<name>-<key>.<random>.partial beside its folder and renames it into place (fetch.keep):
# a killed one leaves only that, never a half-written folder, and the next conversion sweeps it once stale
PARTIAL_PREFIX = ".gguf-"
STAGES = (("read", "reading the GGUF file's tensor types"),
          ("convert", "de-quantising the GGUF into a transformers model folder (float32)"),
          ("blocks", "checking which weights the CPU block kernel can stream as exact ggml blocks"),
          ("save", "moving the folder into the cache"))
Progress = Callable[[str, float, str], None]
_CONVERTING = threading.Lock()


def gguf_path(name: str | os.PathLike | None) -> Path | None:
    """The GGUF file `name` means: a file ending in .gguf, or a folder with exactly one .gguf file and no
    config.json; None for anything else (a hub id, a transformers folder). A folder with several .gguf files
    is refused with their names (which one is meant is not ours to guess)."""
    if name is None:
        return None
    p = Path(name).expanduser()
    if p.suffix.lower() == ".gguf":
        if not p.is_file():
            raise FetchError(f"GGUF file {name} does not exist")
        return p
    if not p.is_dir() or (p / "config.json").exists():
        return None
    found = sorted(p.glob("*.gguf"))
    if len(found) > 1:
        raise FetchError(f"{name} holds {len(found)} GGUF files ({', '.join(f.name for f in found[:4])}): "
                         "give --model the one file you mean")
    return found[0] if found else None


def folder_for(gguf: Path, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the conversion of `gguf` lives (whether or not it is there yet)."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in gguf.stem)[:60]
    return cache_root(cache_dir) / "models" / f"gguf-{stem}-{key}"


def converted(gguf: Path, cache_dir: str | os.PathLike | None = None) -> Path | None:
    d = folder_for(gguf, cache_dir)
    return d if (d / MARK).is_file() and (d / "config.json").is_file() else None


def tensor_types(gguf: Path) -> dict[str, int]:
    """{GGML type name: tensors of that type} in the file (e.g. {"Q4_K": 97, "Q6_K": 13, "F32": 61})."""
    try:
        from gguf import GGUFReader
        reader = GGUFReader(str(gguf))
    except ImportError:
        raise FetchError("reading a GGUF file needs the gguf package: pip install gguf") from None
    except Exception as e:  # noqa: BLE001 - not a GGUF, truncated: one line
        raise FetchError(f"{gguf.name} is not a readable GGUF file ({str(e).splitlines()[0][:200]})") from None
    return dict(Counter(t.tensor_type.name for t in reader.tensors))


def block_storage(folder: Path) -> tuple[dict[str, int], dict[str, int]]:
    """How the CPU block kernel would store the converted model's Linear weights: ({"q4_1": n, "q8_0": n,
    "k8": n, "fp32": n}, the bytes streamed per forward for each) (each shared weight once), by blocks.recover
    on the saved float32 values."""
    import torch
    from safetensors.torch import load_file

    from ..fast.blocks import recover, stored_bytes
    from ..fast.cpu_gemm import STORAGES
    counts, sizes = dict.fromkeys(STORAGES, 0), dict.fromkeys(STORAGES, 0)
    weights = load_file(str(folder / "model.safetensors"))
    tied = not any(n.endswith("lm_head.weight") for n in weights)  # then the embedding is the LM head's matrix
    for name, w in weights.items():
        embedding = name.endswith(("embed_tokens.weight", "wte.weight", "word_embeddings.weight"))
        if name.endswith(".weight") and w.dim() == 2 and (tied or not embedding):
            b = recover(w.to(torch.float32)) if w.shape[1] % 32 == 0 else None
            kind = b.kind if b is not None else "fp32"
            counts[kind] += 1
            sizes[kind] += stored_bytes(kind, *w.shape)
    return counts, sizes


def convert_gguf(gguf: str | os.PathLike, cache_dir: str | os.PathLike | None = None, *, force: bool = False,
                 progress: Progress | None = None) -> Path:
    """The converted folder of a GGUF file: from the cache, else converted now (progress(stage, fraction,
    message) at the start and end of each of STAGES). Raises FetchError with one line on any failure."""
    src = Path(gguf).expanduser()
    if not src.is_file():
        raise FetchError(f"GGUF file {gguf} does not exist")
    if not force and (found := converted(src, cache_dir)) is not None:
        return found
    with _CONVERTING:
        if not force and (found := converted(src, cache_dir)) is not None:
            return found
        dest = folder_for(src, cache_dir)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            sweep(dest.parent, (PARTIAL_PREFIX,))  # what a killed conversion left: a partial or replaced folder
            return _convert(src, dest, progress or (lambda stage, fraction, message: None))
        except OSError as e:
            raise FetchError(f"cannot write the converted model to {dest.parent} ({e.strerror or e}); give "
                             "another folder with --cache DIR or DECODESCOPE_CACHE") from None


def _convert(src: Path, dest: Path, say: Progress) -> Path:
    say("read", 0.0, STAGES[0][1])
    types = tensor_types(src)
    say("read", 1.0, ", ".join(f"{k} {v}" for k, v in sorted(types.items(), key=lambda kv: -kv[1])))
    say("convert", 0.0, f"{STAGES[1][1]}: {src.name}, {src.stat().st_size / 1e6:.1f} MB")
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        info = convert(src, tmp)
        say("convert", 1.0, f"{info['model_type']}, {info['n_params'] / 1e6:.1f}M parameters in "
                            f"{time.perf_counter() - t0:.1f} s")
        say("blocks", 0.0, STAGES[2][1])
        storage, sizes = block_storage(tmp)
        say("blocks", 1.0, storage_line(storage, sizes))
        say("save", 0.0, STAGES[3][1])
        (tmp / MARK).write_text(json.dumps({
            "source": src.name, "source_bytes": src.stat().st_size, "tensor_types": types,
            "cpu_block_storage": storage, "cpu_block_bytes": sizes, "storage_dtype": info["dtype"], "model_type": info["model_type"],
            "n_params": info["n_params"], "made": time.strftime("%Y-%m-%d", time.gmtime()),
            "convert_s": round(time.perf_counter() - t0, 1)}, indent=1) + "\n")
        keep(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say("save", 1.0, str(dest))
    return dest


def storage_line(storage: dict[str, int], sizes: dict[str, int]) -> str:
    """What the CPU kernels will stream, in matrices and bytes: block matrices (both kernels) and float32 ones
    (the fp32 kernel, even under --kernel int8); a low int8 share is said, since --kernel int8 then does little."""
    from ..fast.cpu_gemm import INT8_KINDS, INT8_WARN_SHARE
    n, total = sum(storage.values()), sum(sizes.values()) or 1
    blocks = n - storage["fp32"]
    int8_n, int8_b = sum(storage[k] for k in INT8_KINDS), sum(sizes[k] for k in INT8_KINDS)
    line = (f"the CPU kernel streams {blocks} of {n} matrices as blocks (q4_1 {storage['q4_1']}, q8_0 "
            f"{storage['q8_0']}, k8 {storage['k8']}: {(total - sizes['fp32']) / 1e6:.1f} MB); {storage['fp32']} "
            f"de-quantised to float32 ({sizes['fp32'] / 1e6:.1f} MB); --kernel int8 runs {int8_n} of them "
            f"({int8_b / 1e6:.1f} MB, {100 * int8_b / total:.0f}% of the bytes)")
    return line + (" and leaves the rest to the fp32 kernel" if int8_b / total < INT8_WARN_SHARE else "")


def convert_with_bar(name: str, cache_dir: str | os.PathLike | None = None, force: bool = False) -> str:
    """--model's GGUF as a converted folder, with a progress bar only when a conversion really runs."""
    src = gguf_path(name)
    if src is None:
        return name
    if not force and (found := converted(src, cache_dir)) is not None:
        return str(found)
    tensor_types(src)  # a file that is no GGUF: one line before any progress bar
    bar, progress = progress_bar(STAGES, "convert", log="convert")
    try:
        return str(convert_gguf(src, cache_dir, force=force, progress=progress))
    finally:
        bar.close()
