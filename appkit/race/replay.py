"""Trace files for Replay: the recorded traces shipped in assets/traces/ and checked uploads."""
from __future__ import annotations

from pathlib import Path

from decoding import Trace
from decoding.models import ASSETS
from decoding.trace.check import load_file

from ..public.limits import MAX_TRACE_BYTES

TRACES = ASSETS / "traces"  # assets/traces in a checkout, decodescope/assets/traces installed


def shipped() -> list[tuple[str, str]]:
    """(label, file name) of every recorded trace in assets/traces/ (no server path leaves the server)."""
    return [(p.stem.replace("_", " "), p.name) for p in sorted(TRACES.glob("*.json"))]


def shipped_path(name: str) -> Path:
    """The recorded trace called `name`; only names from shipped() are accepted (no other server file)."""
    if name not in [n for _, n in shipped()]:
        raise ValueError("pick one of the recorded traces in the list")
    return TRACES / name


def load_trace(path: str | Path, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """A Trace from a JSON file, or ValueError with one sentence. The one validating loader
    (decoding.trace.check, through Trace.from_dict) does the checking; the app adds its upload size cap
    and refuses traces with nothing to replay."""
    p = Path(path)
    if not p.is_file():
        raise ValueError("no trace file received")
    size = p.stat().st_size
    if size > max_bytes:
        raise ValueError(f"the trace file is too large ({size / 2**20:.1f} MB; at most {max_bytes / 2**20:.0f} MB)")
    tr = Trace.from_dict(load_file(p))
    if not tr.steps:
        raise ValueError("the trace has no steps to replay")
    return tr
