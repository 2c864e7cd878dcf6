"""Where a run's drafts come from, checked before any run: the retrieval source (the suffix cache or the shipped
datastore, never a visitor's path) and the medusa / eagle heads (trained for this model, readable)."""
from __future__ import annotations

from pathlib import Path

from .method_fields import can, needing, spec
from .settings import InputError, Settings


def heads_folder(name: str, method: str, model=None) -> str:
    """The heads folder a heads method's run uses: the one named (or its <method>/ subfolder when it holds one,
    as assets/heads does, so one folder serves a race of both), else the heads the method's spec picks for
    `model` (its prepare step: the embedded target's or the default model's), else assets/heads/<method>
    (refused with a clear message for any other target: check_heads)."""
    from decoding.models import ASSETS
    name = (name or "").strip()
    if name and (Path(name) / method / "heads.json").is_file():
        return str(Path(name) / method)
    if not name and model is not None:
        try:
            return spec(method).prepare({}, model, None)["heads"]
        except ValueError:
            pass
    return name or str(ASSETS / "heads" / method)


def resources(s: Settings, method: str, model=None) -> dict:
    """What the page names for a method besides its controls, resolved once per event (Handlers.plan): the
    heads folder (and the typical acceptance switch), the adapter folder (the heads box; empty = the shipped
    one, settled by the spec's prepare), the retrieval source."""
    sp, out = spec(method), {}
    if "heads" in sp.needs:
        out["heads"] = heads_folder(s.heads, method, model)
    if "adapter" in sp.needs and (s.heads or "").strip():
        out["adapter"] = s.heads.strip()
    if can(method, "typical_acceptance"):
        out["acceptance"] = "typical" if s.typical else "exact"
    if can(method, "datastore"):
        out["datastore"] = retrieval_source(s.datastore)
    return out


def retrieval_source(choice: str) -> str | None:
    """The retrieval menu's value: "" = the suffix cache (None), "shipped" = the shipped datastore. Only these
    two: a visitor never names a server path."""
    if choice in ("", None):
        return None
    if choice == "shipped":
        from decoding.models import SHIPPED_FOLDERS
        return SHIPPED_FOLDERS["datastore"]["smollm2"]  # the package's, a checkout's or an install's
    raise InputError(f"**retrieval source**: choose the suffix cache or the shipped datastore, not {choice!r}")


def check_retrieval(p, methods: list[str]) -> None:
    """A datastore built with another tokenizer (the shipped one is SmolLM2's): one input error, before any run."""
    if any(can(m, "datastore") for m in methods) and retrieval_source(p.settings.datastore):
        from decoding.methods.resources import open_datastore
        try:
            open_datastore(retrieval_source(p.settings.datastore), p.tok)
        except ValueError as e:
            raise InputError(f"**retrieval source**: {e}") from None


def check_heads(p, methods: list[str]) -> None:
    """Heads trained for another model, or a missing/corrupt heads file: one input error, before any run."""
    from decoding.methods.resources import HeadsError, load_heads
    for m in methods:
        if m in needing("heads"):
            try:
                load_heads(p.resources.get(m, {}).get("heads") or heads_folder(p.settings.heads, m, p.model),
                           p.model, m)
            except HeadsError as e:
                raise InputError(f"**heads**: {e}") from None
