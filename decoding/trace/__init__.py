"""The per-step trace: the only contract between decoding/ and viz/, profiling/, app.py.

A Trace is plain data (ints, floats, strings, lists, dicts) so it serialises to JSON and a run recorded on
a GPU replays anywhere. Bump SCHEMA when a field changes meaning. The one document (Trace.save, the CLI's
--json, the app's download) is described field by field in docs/trace.md and by decoding/trace/schema.json.
Version 2 always carries the derived "stats" (and "speculative" for speculative runs); both are recomputed,
never read back. Trace.load also reads version 1 files and the pre-v2 CLI wrapper {"trace": {...}, ...}.

Step fields:
  index, kind ("prefill" | "decode"), kv_len (cached tokens before the step), n_query,
  tokens / positions / parents / roles / slots: the step's query, one entry per new token. roles are
    "prompt", "x0", "window", "candidate", "draft", "stage2", "jacobi" (a Jacobi block guess); slots say where in its structure the token
    sits: window → [level, column] (x0 is [0, 0], L0[j-1] is [0, j]), candidate → [candidate, offset],
    draft → [node id, depth]; parents are query indices (-1 = root) and define the attention mask.
  accepted: new tokens this step; origins: one per accepted token ("target" = the model's own next token,
    "candidate" = a verified lookahead n-gram, "prompt_lookup", "reference" = copied from a reference
    text (reference lookup), "jacobi" = a confirmed Jacobi guess, "draft", "stage2");
  kept: query indices whose KV entries stayed in the cache; wall_ms: the step's wall time;
  info: what the method did (lookahead: window, window_next, pool_key, candidates, candidate_sources,
    matched, chosen, harvested, pool_size, pool_delta (the pool's changes this step, in order:
    ["t"|"w"|"x", key, *n-gram] = text added, window added, window evicted); prompt lookup: key,
    candidates, matched, chosen and, with references, candidate_sources ("reference" | "text") and
    reference_at ([reference, end of the match]);
    jacobi: info["jacobi"] = {guesses, fresh, updated (the model's argmax at x0 and every guess), accepted,
    next (the following step's guesses)}; speculative: the tree, draft probabilities, ...).
With tracing off, the query arrays and info are left empty and only counts and times are kept.

Trace.agreement (optional, None = not measured; traces without it load): the output compared with HF
greedy on the same model (decoding.exactness.measure): {"reference": "hf_greedy", "identical",
"first_divergence" (new-token index or None), "compared", "dtype", "device", "text"}. Greedy fp32 is
identical by construction; bf16/fp16 runs may diverge at near-tied logits, so they are measured.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .stats import spec_decode_stats, speculative_stats
from .check import TraceError, check_document, load_file, parse

SCHEMA = "decodescope.trace/2"
READS = ("decodescope.trace/1", SCHEMA)  # v1: the same fields; "stats" optional
DERIVED = ("stats", "speculative")  # written for readers without DecodeScope; recomputed on load


@dataclass
class Step:
    index: int
    kind: str
    kv_len: int
    n_query: int
    accepted: list[int]
    origins: list[str]
    wall_ms: float = 0.0
    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    slots: list[list[int]] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    info: dict = field(default_factory=dict)


@dataclass
class Trace:
    method: str
    config: dict
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    model: dict = field(default_factory=dict)
    text: str = ""
    vocab: dict[str, str] = field(default_factory=dict)  # token id (as str) -> text, for replay
    wall_s: float = 0.0
    stop_reason: str = ""
    schema: str = SCHEMA
    agreement: dict | None = None  # measured exactness against HF greedy (see the module docstring)

    def stats(self) -> dict:
        """Run-level numbers. steps counts target forward passes, prefill included."""
        decode = [s for s in self.steps if s.kind == "decode"]
        lens = [len(s.accepted) for s in decode]
        n = len(self.output_ids)
        steps = len(self.steps)
        return {
            "new_tokens": n,
            "steps": steps,
            "compression": n / steps if steps else 0.0,
            "mean_accepted": sum(lens) / len(lens) if lens else 0.0,
            "accepted_histogram": {str(k): v for k, v in sorted(Counter(lens).items())},
            "query_tokens": sum(s.n_query for s in self.steps),
            "wall_s": self.wall_s,
            "tokens_per_s": n / self.wall_s if self.wall_s > 0 else 0.0,
        }

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stats"] = {**self.stats(), **spec_decode_stats(self)}  # + the serving engines' names (decoding/trace/stats.py)
        if isinstance(self.config, dict) and isinstance(self.config.get("draft"), dict):  # a draft model's run
            # (read from the trace itself, which replays without the registry)
            d["speculative"] = speculative_stats(self)
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, d: dict) -> "Trace":
        """Every trace that enters DecodeScope comes through here (Trace.load, the app's upload and replay, the
        CLIs, shipped examples): decoding.trace.check validates it first, so a crafted file is refused with one
        TraceError (a ValueError) before any picture or statistic touches it."""
        if not isinstance(d, dict):
            raise TraceError(f"not a DecodeScope trace: expected a JSON object, got {type(d).__name__}")
        if d.get("schema") is None and isinstance(d.get("trace"), dict):  # the CLI's --json before v2
            d = {**d["trace"], **({"agreement": d["agreement"]} if d.get("agreement") else {})}
        schema = d.get("schema")
        if schema is None:
            raise TraceError("not a DecodeScope trace: it has no \"schema\" field (a trace is the JSON written by "
                             "Trace.save, `python -m decoding generate --json` or the app's download)")
        if schema not in READS:
            newer = isinstance(schema, str) and schema.startswith("decodescope.trace/")
            why = "written by another version of DecodeScope" if newer else "not a DecodeScope trace"
            plain = isinstance(schema, str) and re.fullmatch(r"[\w./-]{1,60}", schema)
            shown = repr(schema) if plain else "(not a version name)"  # never echo markup into a page
            raise TraceError(f"{why}: schema {shown}; this version reads {', '.join(READS)}")
        fields = set(cls.__dataclass_fields__)  # derived ("stats", ...) and unknown keys are not read back
        missing = [k for k in ("method", "config", "prompt_ids") if k not in d]
        if missing:
            raise TraceError(f"incomplete trace: missing {', '.join(missing)}")
        check_document(d)
        d = {k: v for k, v in d.items() if k in fields}
        d["steps"] = [Step(**s) for s in d.get("steps", [])]
        d["schema"] = SCHEMA  # read into the current version; saving writes v2
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        """Read a trace file of any supported version; bad files raise TraceError (a ValueError), one sentence.
        The size is checked before reading, and parsing bounds nesting and number size (decoding/trace/check.py)."""
        return cls.from_dict(load_file(path))

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trace":
        """A trace from JSON text, through the same checks as load()."""
        return cls.from_dict(parse(text))

    def token_text(self, tok: int) -> str:
        return self.vocab.get(str(tok), f"<{tok}>")
