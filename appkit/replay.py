"""Trace files for Replay: the recorded traces shipped in assets/traces/ and checked uploads."""
from __future__ import annotations

import json
from pathlib import Path

from decoding import Trace

from .limits import MAX_TRACE_BYTES

TRACES = Path(__file__).resolve().parent.parent / "assets" / "traces"


def shipped() -> list[tuple[str, str]]:
    """(label, file name) of every recorded trace in assets/traces/ (no server path leaves the server)."""
    return [(p.stem.replace("_", " "), p.name) for p in sorted(TRACES.glob("*.json"))]


def shipped_path(name: str) -> Path:
    """The recorded trace called `name`; only names from shipped() are accepted (no other server file)."""
    if name not in [n for _, n in shipped()]:
        raise ValueError("pick one of the recorded traces in the list")
    return TRACES / name


def load_trace(path: str | Path, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """A Trace from a JSON file, or ValueError with one sentence (missing, too big, not JSON, wrong schema)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError("no trace file received")
    size = p.stat().st_size
    if size > max_bytes:
        raise ValueError(f"the trace file is too large ({size / 2**20:.1f} MB; at most {max_bytes / 2**20:.0f} MB)")
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the file is not a DecodeScope trace: not valid JSON ({e.__class__.__name__})") from None
    if not isinstance(d, dict):
        raise ValueError("the file is not a DecodeScope trace: expected a JSON object")
    try:
        tr = Trace.from_dict(d)  # every trace version, and the CLI's pre-v2 wrapper
    except ValueError as e:
        raise ValueError(str(e) if "trace" in str(e) else f"the file is not a DecodeScope trace: {e}") from None
    except (TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"the file is not a DecodeScope trace: malformed fields ({e})") from None
    if not tr.steps:
        raise ValueError("the trace has no steps to replay")
    for s in tr.steps:  # the pictures index these: refuse traces whose arrays disagree
        if len(s.tokens) != len(s.parents) or len(s.roles) != len(s.tokens):
            raise ValueError(f"the trace is corrupt: step {s.index} has mismatched token/parent/role lists")
    return tr
