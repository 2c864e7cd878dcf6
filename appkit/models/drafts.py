"""Which draft model the page offers for a target, so the speculative option follows the target.

A draft must share the target's tokenizer. The embedded draft fits the embedded target only. A draft shipped
for another target lives in assets/drafts/<name>/: a model folder (its config.json gives its vocabulary) or a
layers-only draft (draft.json; assets/drafts/smollm2, distilled for the default model, borrows the target's
embedding and LM head and fits that model alone). The page preselects the first shipped draft that fits the
target. For a target without one, the Race's default selection leaves speculative out (it cannot run) and a
speculative run says in one line what to pick instead.
"""
from __future__ import annotations

import json
from pathlib import Path

from decoding import ModelError
from decoding.models import ASSETS, DEFAULT_MODEL, EMBEDDED_DRAFT

from ..run.method_fields import needs
from ..run.settings import InputError

SHIPPED_DRAFTS = ASSETS / "drafts"
KNOWN_VOCAB = {DEFAULT_MODEL: 49152}  # the default model's vocabulary, known before its fetch ends (model_card.py)


def vocab_size(name: str | None) -> int | None:
    """A local model folder's vocabulary size from its config.json (nothing loaded); None where unknown."""
    if not name:
        return None
    try:  # a model folder's config.json, or a layers-only draft's card (decoding/methods/draft_model/shipped_draft.py)
        folder = Path(name)
        cfg = json.loads((folder / ("draft.json" if layers_only(name) else "config.json")).read_text())
    except (OSError, ValueError):
        return KNOWN_VOCAB.get(str(name)) or KNOWN_VOCAB.get(Path(str(name)).name)
    return cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")


def layers_only(name: str | None) -> bool:
    """A draft folder that ships only its own layers (draft.json): it is built on the loaded target, whose
    embedding and LM head it shares (ModelCache.draft)."""
    return bool(name) and (Path(name) / "draft.json").is_file()


def shipped() -> list[str]:
    """Every draft shipped with the app: the embedded one, then assets/drafts/* in name order (model folders
    and layers-only drafts)."""
    extra = sorted(str(d) for d in SHIPPED_DRAFTS.glob("*") if (d / "config.json").is_file() or layers_only(str(d))) \
        if SHIPPED_DRAFTS.is_dir() else []
    return [EMBEDDED_DRAFT, *extra]


def default_model(name: str | None) -> bool:
    """The default model, by name or as its cached folder."""
    from decoding.models.fetch import FOLDER
    return bool(name) and (str(name) == DEFAULT_MODEL or Path(str(name)).name == FOLDER)


def fits(target: str | None, draft: str | None) -> bool:
    """Whether `draft` can draft for `target` as far as their configs tell (equal vocabularies; a layers-only
    draft was distilled for the default model and fits it alone); True where one of them is unknown (a hub
    id: the run itself checks the tokenizers)."""
    if layers_only(draft):
        return default_model(target)
    tv, dv = vocab_size(target), vocab_size(draft)
    return tv is None or dv is None or tv == dv


def draft_for(target: str | None) -> str | None:
    """The first shipped draft that fits `target` (a local folder or the default model's name), else None."""
    if vocab_size(target) is None:
        return None
    return next((d for d in shipped() if vocab_size(d) == vocab_size(target) and fits(target, d)), None)


def race_default(methods: list[str], target: str | None, draft: str | None) -> list[str]:
    """The Race's default selection without a method that cannot run here (speculative without a fitting draft)."""
    return [m for m in methods if not needs(m, "draft_model") or fits(target, draft)]


def no_draft(target: str, draft: str, why: str) -> str:
    """One line for a speculative run whose draft does not share the target's tokenizer: why, what instead."""
    return (f"**speculative** needs a draft model that shares the target's tokenizer; the draft {draft} does not "
            f"fit the target {target} ({why.rstrip('.')}). Pick the embedded target (the embedded draft is its draft) "
            "or, under Model, a draft model that shares this target's tokenizer (a smaller model of its family); "
            "lookahead, prompt lookup and the self-drafting methods need no draft")


def check_draft(model, tok, dmodel, dtok, target: str, draft: str) -> None:
    """Before a speculative run: a draft that does not share the target's tokenizer is refused in one line
    that says what to pick instead (not the engine's error from the middle of the run)."""
    from decoding.methods.resources import check_compatible
    try:
        check_compatible(model, dmodel, tok, dtok)
    except ModelError as e:
        raise InputError(no_draft(target, draft, str(e).strip().splitlines()[0])) from None
