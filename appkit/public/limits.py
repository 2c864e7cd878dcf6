"""Limits on every number the app accepts, and public mode (DECODESCOPE_PUBLIC=1).

Local mode uses the engine's documented caps (decoding.params.LIMITS). Public mode (a shared Space) tightens
them, accepts only allow-listed models and refuses local paths. The checks of the values themselves are in
appkit/run/settings.py (all problems at once, nothing clamped); appkit/errors.py shows them.
"""
from __future__ import annotations

import os
from pathlib import Path

from decoding.params import LIMITS
from decoding.methods.registry import needing
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET

# Tighter caps for a public Space: a step stays small and a run stays short.
PUBLIC_CAPS = {"max_new_tokens": 256, "window": 16, "ngram": 8, "guesses": 16, "num_tokens": 16,
               "max_ngram": 5, "candidates": 4, "draft_tokens": 8, "tree_width": 4, "tree_depth": 6,
               "tree_budget": 64}
# The app's own ranges for values the engine does not cap as integers.
TEMPERATURE = (0.0, 2.0)
SWEEP_MAX_RUNS = 40
PUBLIC_SWEEP_MAX_RUNS = 16
# Hub models a public Space may load (small, decoder-only, full attention), plus the embedded pair.
# The SmolLM2 Instruct family shares one tokenizer: on a GPU the real pairs are 1.7B or 360M target with the
# 135M draft (`decodescope fetch-model --family` compares the tokenizers where the Hub is reachable).
PUBLIC_HUB_MODELS = ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct",
                     "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-360M",
                     "Qwen/Qwen2.5-0.5B",
                     "Qwen/Qwen2.5-Coder-0.5B", "openai-community/gpt2", "distilbert/distilgpt2")
MAX_TRACE_BYTES = 20 * 2**20  # trace uploads above this are refused (decoding.trace.check.CAPS["bytes"])
PUBLIC_MAX_TRACE_BYTES = 5 * 2**20  # public mode: a 19 MB trace took 11.6 s of the shared CPU to replay
MAX_REPLAY_HTML_BYTES = 24 * 2**20  # a replayed step view above this is refused (docs/trace.md: measured sizes)
# Heads a public Space may use: the shipped folders by name ("" = the shipped heads of the chosen method).
PUBLIC_HEADS = ("", *needing("heads"), "assets/heads", *(f"assets/heads/{m}" for m in needing("heads")))
DEVICES = ("auto", "cpu", "cuda")
MAX_PROMPT_CHARS = 20000
# Public mode: a prompt's tokens (20,000 characters are ~8,100 tokens, whose prefill held the CPU worker for
# minutes: the cost of a prefill grows faster than its length).
PUBLIC_PROMPT_TOKENS = 1024
# The suffix cache's per-session histories on a public Space: at most this many sessions (least recently used
# dropped first) of at most this many tokens each (~0.8 MB each as int64): bounded memory, whoever visits.
PUBLIC_HISTORY = {"sessions": 64, "limit": 100_000}


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def public_mode() -> bool:
    """DECODESCOPE_PUBLIC=1/0 decides; unset, a Hugging Face Space (SPACE_ID is set there) is public."""
    v = os.environ.get("DECODESCOPE_PUBLIC", "").strip().lower()
    if v:
        return v in ("1", "true", "yes", "on")
    return bool(os.environ.get("SPACE_ID"))


class Limits:
    """The ranges in force (local or public) and the checks that use them."""

    def __init__(self, public: bool | None = None, default_target: str = EMBEDDED_TARGET,
                 default_draft: str = EMBEDDED_DRAFT):
        self.public = public_mode() if public is None else public
        self.ranges = dict(LIMITS)
        if self.public:
            for k, hi in PUBLIC_CAPS.items():
                self.ranges[k] = (self.ranges[k][0], min(self.ranges[k][1], hi))
        self.sweep_max_runs = PUBLIC_SWEEP_MAX_RUNS if self.public else SWEEP_MAX_RUNS
        self.prompt_tokens = PUBLIC_PROMPT_TOKENS if self.public else None
        self.default_target, self.default_draft = default_target, default_draft
        extra = [m.strip() for m in os.environ.get("DECODESCOPE_ALLOWED_MODELS", "").split(",") if m.strip()]
        self.allowed = [default_target, default_draft, *PUBLIC_HUB_MODELS, *extra]

    def lo(self, name: str) -> int:
        return self.ranges[name][0]

    def hi(self, name: str) -> int:
        return self.ranges[name][1]

    def info(self, name: str) -> str:
        lo, hi = self.ranges[name]
        return f"{lo}–{hi}" + (" (public mode)" if self.public and name in PUBLIC_CAPS else "")

    def model_name(self, name, role: str = "target") -> str:
        """A model name the app may load: allow-listed only in public mode, never a local path there."""
        name = ("" if name is None else str(name)).strip()
        if not name:
            raise ValueError(f"no {role} model given: pick one from the list or type a hub id")
        if self.public and name not in self.allowed:
            # one message for every name off the list, before any file is looked at: an answer that differed
            # for a path that exists would tell a visitor which server files exist
            raise ValueError(f"this Space loads only the models on its allow list (local model paths are disabled "
                             f"in public mode, as are other hub ids); choose a {role} model from: "
                             f"{', '.join(self.allowed_labels())}")
        return name

    def device(self, value) -> str:
        """The device every model of an event loads on: public mode always decides itself ("auto"), so a
        visitor's value reaches no model (target, draft, heads) and no reply names the server's torch build."""
        if self.public:
            return "auto"
        v = "" if value is None else str(value).strip()
        if v not in DEVICES and not (v.startswith("cuda:") and v[5:].isdigit()):
            raise ValueError(f"**device** must be one of {', '.join(DEVICES)} (or cuda:N), got a {type(value).__name__}"
                             f" of {len(v)} characters" if len(v) > 12 else f"**device** must be one of "
                             f"{', '.join(DEVICES)} (or cuda:N), got {v!r}")
        return v

    def dtype(self, value) -> str:
        """The dtype every model of an event loads in, one rule for every endpoint (Run, Race, Profile, Sweep,
        Tune, Load models): public mode refuses fp16 / bf16 without a GPU (emulated on a CPU: several times
        slower than fp32 for the same tokens, on a shared CPU)."""
        v = "auto" if value in (None, "") else str(value).strip()
        if self.public and v in ("fp16", "float16", "bf16", "bfloat16") and not _cuda():
            raise ValueError(f"**dtype**: {v} on this Space's CPU is emulated, several times slower than fp32 for "
                             "the same tokens, and the CPU is shared: pick fp32 (or auto)")
        return v

    def heads(self, value) -> str:
        """The heads field: any folder locally; in public mode only the shipped heads, by name, and no
        server path is looked at (a path would tell a visitor which server folders exist)."""
        v = "" if value is None else str(value).strip()
        if self.public and v not in PUBLIC_HEADS:
            raise ValueError("**heads**: this Space uses the shipped heads only; leave the field empty or name "
                             "one of: " + ", ".join(h for h in PUBLIC_HEADS if h))
        return v

    def allowed_labels(self) -> list[str]:
        """The allow list as a refusal names it: hub ids, and local folders by name (never a server path)."""
        rest = [Path(m).name if os.path.isabs(m) else m for m in self.allowed
                if m not in (self.default_target, self.default_draft)]
        return ["the embedded models"] + list(dict.fromkeys(rest))
