"""The checks a trained-drafter folder gets before its files are used: the Medusa and EAGLE heads (heads.py)
and the self-speculative adapter (self_spec_adapter.py).

Why one place: the folders come from outside (--heads, --adapter, a download), so each is checked the same
way (files present, sizes bounded before anything is read, a JSON card, the base model's fingerprint,
weights that load) and a check fixed for one kind of folder is fixed for both. Every refusal is one line
in the caller's error class, worded by the caller where the two differ.
"""
from __future__ import annotations

import json
from pathlib import Path
from torch import nn


def require_files(folder: Path, names: tuple[str, ...], error: type[Exception], missing: str,
                  max_bytes: tuple[int, ...] = (), what: str = "") -> None:
    """error(missing) unless every file in `names` is in `folder`; with max_bytes (one bound per name, in
    order), also refused when a file is larger: bounded work before a byte is read."""
    if not all((folder / n).is_file() for n in names):
        raise error(missing)
    if any((folder / n).stat().st_size > m for n, m in zip(names, max_bytes)):
        raise error(f"{folder} holds files too large for {what}")


def read_card(file: Path, error: type[Exception]) -> dict:
    """The JSON object in `file` (a folder's card: kind, fingerprint, shape); not JSON, or JSON that is not an
    object, is one line."""
    try:
        card = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{file} is not valid JSON ({e})") from None
    if not isinstance(card, dict):
        raise error(f"{file} is not a JSON object (a {type(card).__name__})")
    return card


def check_fingerprint(cfg: dict, fps: tuple[str, ...], error: type[Exception], what: str, how: str) -> None:
    """Refuse files trained for another base model than the one whose fingerprints are `fps`
    (heads.base_fingerprints: the current one first, then the one older cards record): `what` names them
    ("this adapter was"), `how` says how to get ones for this model."""
    fp = fps[0]
    if cfg.get("base_fingerprint") not in fps:
        raise error(f"{what} trained for another base model ({cfg.get('base_model') or '?'}, fingerprint "
                    f"{cfg.get('base_fingerprint')}), not this one ({fp}): {how}")


def load_weights(module: nn.Module, file: Path, error: type[Exception], against: str) -> None:
    """Load the safetensors `file` into `module`; a damaged file or another shape than `against` (what the
    module was built from) is one line."""
    from safetensors.torch import load_file
    try:
        module.load_state_dict(load_file(str(file)))
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a damaged file
        raise error(f"{file} is corrupt or does not match {against} "
                    f"({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
