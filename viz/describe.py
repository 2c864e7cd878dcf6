"""Plain words for a run's header: method and settings, the model's name, where it was recorded.

Why: a reader should see "lookahead · W 5 · N 4 · G 5 · text span 7", not the config's JSON, and a page
must never leak the server's file system (a model loaded from /work/main/assets/target is shown as
"assets/target"). Every header and report line goes through here.
"""
from __future__ import annotations

import re

from decoding.methods.registry import SPECS

from .common import TraceLike, as_trace
from .counts import run_counts

_ABS = re.compile(r"^(/|~|[A-Za-z]:[\\/]|\\\\)")


def short_name(name: object) -> str:
    """A model name for display: hub ids and relative paths as they are; an absolute path (/, ~, C:\\)
    by its last two components."""
    s = str(name or "").strip()
    if not s or not _ABS.match(s):
        return s
    parts = [p for p in re.split(r"[\\/]+", s) if p and p != "~" and not re.fullmatch(r"[A-Za-z]:", p)]
    return "/".join(parts[-2:]) if parts else ""


def scrub_paths(text: str) -> str:
    """Replace every absolute path inside free text by its last two components."""
    return re.sub(r"(?<![\w.:/])(?:~|/)[\w.\-]+(?:/[\w.\-]+)+", lambda m: short_name(m.group(0)), text)


def _num(v: object) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _draft_words(name: str) -> str:
    """The app's shipped draft model is called what it is; an unnamed one is not guessed at."""
    if name.endswith("drafts/smollm2"):
        return "shipped draft (assets/drafts/smollm2: 2 layers, the target's embedding and head)"
    return "embedded draft" if name.endswith("assets/draft") else name or "unnamed draft model"


def config_words(trace: TraceLike) -> str:
    """The method and its settings in one line of plain words (no JSON)."""
    tr = as_trace(trace)
    c = tr.config if isinstance(tr.config, dict) else {}
    spec = SPECS.get(str(tr.method))
    try:
        line = spec.words(c) if spec is not None and spec.words is not None else str(tr.method).replace("_", " ")
    except (TypeError, ValueError, AttributeError, KeyError):  # a crafted config: the name, not a traceback
        line = str(tr.method).replace("_", " ")
    draft = c.get("draft")
    name = short_name(draft.get("name") if isinstance(draft, dict) else draft)
    if name or isinstance(draft, dict):
        line += f" · draft: {_draft_words(name)}"
    s = c.get("sampling") if isinstance(c.get("sampling"), dict) else {}
    temp = s.get("temperature") or 0
    line += " · greedy (exact)" if not temp else f" · sampling T {_num(temp)}"
    return line


def model_words(trace: TraceLike) -> str:
    """'model assets/target (llama, 10.1M params, float32)': name never an absolute path."""
    tr = as_trace(trace)
    m = tr.model if isinstance(tr.model, dict) else {}
    name = short_name(m.get("name")) or "unnamed model"
    bits = [m.get("model_type"), _params(m.get("n_params")), m.get("dtype")]
    extra = ", ".join(str(b) for b in bits if b)
    return f"{name} ({extra})" if extra else name


def _params(n: object) -> str:
    if not isinstance(n, (int, float)) or n <= 0:
        return ""
    return f"{n / 1e9:.1f}B params" if n >= 1e9 else f"{n / 1e6:.1f}M params" if n >= 1e6 else f"{n / 1e3:.0f}k params"


def recorded_on(trace: TraceLike) -> str:
    """'recorded on cpu' / 'recorded on cuda (NVIDIA H100)' from the trace's device/platform fields."""
    tr = as_trace(trace)
    m = tr.model if isinstance(tr.model, dict) else {}
    where = [str(m[k]) for k in ("device", "device_name", "platform", "recorded_on") if m.get(k)]
    return "recorded on " + ", ".join(dict.fromkeys(short_name(w) for w in where)) if where else ""


def header_words(trace: TraceLike) -> str:
    """One plain line for a step view or report: settings · model · where recorded · tokens and steps."""
    tr = as_trace(trace)
    parts = [config_words(tr), model_words(tr), recorded_on(tr), run_counts(tr).words()]
    return scrub_paths(" · ".join(p for p in parts if p))
