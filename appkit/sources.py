"""Where a run's drafts come from, checked before any run: the retrieval source (the suffix cache or the shipped
datastore, never a visitor's path) and the medusa / eagle heads (trained for this model, readable)."""
from __future__ import annotations

from pathlib import Path

from decoding.api import HEADS_METHODS

from .settings import InputError


def heads_folder(name: str, method: str, model=None) -> str:
    """The heads folder a medusa/eagle run uses: the one named (or its <method>/ subfolder when it holds one,
    as assets/heads does, so one folder serves a race of both), else the heads shipped for `model`
    (decoding.api.default_heads: the embedded target's or the default model's), else assets/heads/<method>
    (refused with a clear message for any other target)."""
    from decoding.api import default_heads
    from decoding.models import ASSETS
    name = (name or "").strip()
    if name and (Path(name) / method / "heads.json").is_file():
        return str(Path(name) / method)
    if not name and model is not None:
        try:
            return default_heads(model, method)
        except ValueError:
            pass
    return name or str(ASSETS / "heads" / method)


def retrieval_source(choice: str) -> str | None:
    """The retrieval menu's value: "" = the suffix cache (None), "shipped" = the shipped datastore. Only these
    two: a visitor never names a server path."""
    if choice in ("", None):
        return None
    if choice == "shipped":
        return str(Path(__file__).resolve().parent.parent / "assets" / "datastore" / "smollm2")
    raise InputError(f"**retrieval source**: choose the suffix cache or the shipped datastore, not {choice!r}")


def check_retrieval(p, methods: list[str]) -> None:
    """A datastore built with another tokenizer (the shipped one is SmolLM2's): one input error, before any run."""
    if "retrieval" in methods and retrieval_source(p.settings.datastore):
        from decoding.methods.retrieval import open_datastore
        try:
            open_datastore(retrieval_source(p.settings.datastore), p.tok)
        except ValueError as e:
            raise InputError(f"**retrieval source**: {e}") from None


def check_heads(p, methods: list[str]) -> None:
    """Heads trained for another model, or a missing/corrupt heads file: one input error, before any run."""
    from decoding.methods.heads import HeadsError, load_heads
    for m in methods:
        if m in HEADS_METHODS:
            try:
                load_heads(heads_folder(p.settings.heads, m, p.model), p.model, m)
            except HeadsError as e:
                raise InputError(f"**heads**: {e}") from None
