"""The one gate every trace passes through: uploads, CLI arguments, shipped examples, Trace.from_dict/load.

A trace is untrusted input: people share them and the public Space replays uploads. check_document()
parses with bounded nesting and number size, enforces the size caps (CAPS, documented in docs/trace.md),
validates against schema.json with jsonschema, and then checks what no schema can say: parents form
a forest (every parent before its child), parallel arrays agree, indices are in range, token ids are inside
the vocabulary. Any failure is one TraceError (a ValueError) naming the value: never a traceback.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

SCHEMA_FILE = Path(__file__).with_name("schema.json")
NOT_A_TRACE = "not a DecodeScope trace"

# Size caps. A real run stays far inside them: max-new-tokens is at most 4096 (steps <= 4097), a step's
# query is the prompt (prefill) or a budget of at most 1,920 tokens, and JSON costs >= 2 bytes an id.
CAPS = {
    "bytes": 20 * 2**20,          # the file or text
    "depth": 32,                  # nesting of arrays/objects (real traces: 7)
    "digits": 24,                 # characters of one JSON number
    "values": 4_000_000,          # JSON values in the whole document
    "bytes_per_container": 16,    # arrays + objects: at most one per 16 bytes of the file (real traces: ~30)
    "steps": 4200,
    "ids": 65_536,                # prompt_ids, output_ids, or one step's tokens / accepted / any id list
    "total_tokens": 2_000_000,    # query + accepted + tree tokens over all steps
    "tree_nodes": 4096,           # nodes in one step's drafted tree
    "string": 1_000_000,          # characters of one string (the run's text included)
    "vocab_id": 10_000_000,       # token ids when the trace does not state its vocabulary size
}


class TraceError(ValueError):
    """A file or document that is not a usable trace; str() is the one line to show."""


def _where(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the document"


def _fail(msg: str) -> None:
    raise TraceError(f"{NOT_A_TRACE}: {msg}")


# ---- parsing with bounded depth and number size ----
# Linear time on any input: the json module parses (its C scanner is linear and raises RecursionError on deep
# nesting instead of recursing without bound), and the depth is checked on what it returns. No regular
# expression reads the text: a backtracking pattern over a crafted upload (an unterminated string of escaped
# quotes) once held the server for 51 s on 100 KB, quadratic in the file's size.


def _check_depth(doc: object) -> None:
    """Refuse nesting deeper than CAPS['depth'] in a parsed document (iterative: no recursion of our own)."""
    stack = [(doc, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > CAPS["depth"]:
            _fail(f"nested deeper than {CAPS['depth']} levels")
        kids = v.values() if isinstance(v, dict) else v
        stack.extend((x, depth + 1) for x in kids if isinstance(x, (dict, list)))


def _number(kind):
    def parse(s: str):
        if len(s) > CAPS["digits"]:
            _fail(f"a number with {len(s):,} characters (at most {CAPS['digits']})")
        v = kind(s)
        if kind is float and v in (float("inf"), float("-inf")):
            _fail(f"the number {s} is out of range")
        return v
    return parse


def _constant(name: str):
    _fail(f"{name} is not a JSON number")


def parse(text: str | bytes, name: str = "the trace") -> object:
    """JSON text -> Python value, refusing oversize input, deep nesting, huge numbers and NaN/Infinity."""
    if isinstance(text, bytes):
        if len(text) > CAPS["bytes"]:
            _fail(f"{name} is too large ({len(text) / 2**20:.1f} MB; at most {CAPS['bytes'] / 2**20:.0f} MB)")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            _fail(f"{name} is not UTF-8 text")
    if len(text) > CAPS["bytes"]:
        _fail(f"{name} is too large ({len(text) / 2**20:.1f} MB; at most {CAPS['bytes'] / 2**20:.0f} MB)")
    # memory: an empty list costs the parser ~70 bytes for the file's 3, so a file of brackets is refused
    # before parsing (an upper bound in one pass: brackets inside strings count too); with it the parse's
    # peak memory stays within ~32x the file's size whatever the file holds (tests/test_linear_parsing.py)
    brackets, most = text.count("[") + text.count("{"), 1000 + len(text) // CAPS["bytes_per_container"]
    if brackets > most:
        _fail(f"{name} holds {brackets:,} brackets (at most {most:,} arrays and objects for its size)")
    try:
        doc = json.loads(text, parse_int=_number(int), parse_float=_number(float), parse_constant=_constant)
    except RecursionError:
        _fail(f"nested deeper than {CAPS['depth']} levels")
    except json.JSONDecodeError as e:
        _fail(f"{name} is not valid JSON ({e.msg} at line {e.lineno})")
    if isinstance(doc, (dict, list)):
        _check_depth(doc)
    return doc


def load_file(path: str | Path) -> object:
    """Read and parse a trace file, checking its size before reading it."""
    p = Path(path)
    if p.is_dir():
        raise TraceError(f"{p.name or p} is a folder, not a trace file (give the trace's .json file)")
    if not p.is_file():
        raise TraceError(f"no trace file at {p.name or p}")
    size = p.stat().st_size
    if size > CAPS["bytes"]:
        _fail(f"{p.name} is too large ({size / 2**20:.1f} MB; at most {CAPS['bytes'] / 2**20:.0f} MB)")
    return parse(p.read_bytes(), p.name)


# ---- the document ----

def _inline_refs(schema: dict) -> dict:
    """The schema with every local "$ref" replaced by its definition (the trace schema has no recursion):
    resolving references per value was most of jsonschema's time on a large trace."""
    defs = schema.get("$defs", {})

    def walk(v):
        if isinstance(v, dict):
            if str(v.get("$ref", "")).startswith("#/$defs/"):  # siblings (a description) kept beside it
                rest = {k: x for k, x in v.items() if k != "$ref"}
                return {**walk(defs[v["$ref"][len("#/$defs/"):]]), **walk(rest)}
            return {k: walk(x) for k, x in v.items() if k != "$defs"}
        return [walk(x) for x in v] if isinstance(v, list) else v

    return walk(schema)


def _predicate(rule: object):
    """A plain-Python test equivalent to a simple schema rule (the shapes of a trace's long arrays), or None
    when the rule is not that simple. Only a True from it is trusted; a False defers to jsonschema."""
    if not isinstance(rule, dict):
        return None
    rule = {k: v for k, v in rule.items() if k != "description"}
    kind = rule.get("type")
    if kind == "integer" and set(rule) <= {"type", "minimum"}:
        lo = rule.get("minimum", -2**63)
        return lambda x: type(x) is int and x >= lo
    if kind == ["number", "null"] and set(rule) == {"type"}:
        return lambda x: x is None or type(x) in (int, float)
    if kind == "string" and set(rule) == {"type", "pattern"}:
        pat = re.compile(rule["pattern"])
        return lambda x: type(x) is str and pat.search(x) is not None
    if kind == "array" and set(rule) <= {"type", "items", "maxItems"} and "items" in rule:
        inner, most = _predicate(rule["items"]), rule.get("maxItems", 2**63)
        if inner is not None:
            return lambda x: type(x) is list and len(x) <= most and all(map(inner, x))
    return None


@lru_cache(maxsize=1)
def _validator():
    """The schema as a reader applies it: the derived fields (stats, speculative) are recomputed, never read,
    and the optional run fields default (Trace's own defaults), so only what a reader needs is required.
    Token-id arrays are most of a trace's values: their "items" rule takes a fast pass first (every element
    a plain int above the minimum) and falls back to jsonschema's own rule, for its precise error, only when
    that pass fails (docs/trace.md has the measured times)."""
    from jsonschema import Draft202012Validator, validators

    schema = _inline_refs(json.loads(SCHEMA_FILE.read_text()))
    schema.pop("if"), schema.pop("then")
    schema["required"] = ["schema", "method", "config", "prompt_ids"]
    slow = Draft202012Validator.VALIDATORS["items"]
    fast = {}

    def items(validator, rule, instance, parent):
        key = id(rule)
        if key not in fast:
            fast[key] = _predicate(rule)
        ok = fast[key]
        if ok is not None and "prefixItems" not in parent and isinstance(instance, list) and all(map(ok, instance)):
            return
        yield from slow(validator, rule, instance, parent)

    return validators.extend(Draft202012Validator, {"items": items})(schema)


def _count_values(doc: object) -> None:
    """Bound the work every later pass does: values in the document (iterative, no recursion)."""
    stack, n = [doc], 0
    while stack:
        v = stack.pop()
        n += 1
        if n > CAPS["values"]:
            _fail(f"more than {CAPS['values']:,} values")
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and len(v) > CAPS["string"]:
            _fail(f"a string of {len(v):,} characters (at most {CAPS['string']:,})")


def _list_caps(d: dict) -> None:
    """Caps on the lists that pictures and stats walk, checked before the schema walks them."""
    steps = d.get("steps")
    if isinstance(steps, list) and len(steps) > CAPS["steps"]:
        _fail(f"{len(steps):,} steps (at most {CAPS['steps']:,})")
    for key in ("prompt_ids", "output_ids"):
        if isinstance(d.get(key), list) and len(d[key]) > CAPS["ids"]:
            _fail(f"{key} holds {len(d[key]):,} tokens (at most {CAPS['ids']:,})")
    total = 0
    for k, s in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(s, dict):
            continue
        for key in ("tokens", "positions", "parents", "roles", "slots", "kept", "accepted", "origins"):
            v = s.get(key)
            if isinstance(v, list) and len(v) > CAPS["ids"]:
                _fail(f"steps[{k}].{key} holds {len(v):,} entries (at most {CAPS['ids']:,})")
        tree = s.get("info", {}).get("tree") if isinstance(s.get("info"), dict) else None
        nodes = tree.get("tokens") if isinstance(tree, dict) else None
        if isinstance(nodes, list) and len(nodes) > CAPS["tree_nodes"]:
            _fail(f"steps[{k}].info.tree has {len(nodes):,} nodes (at most {CAPS['tree_nodes']:,})")
        total += sum(len(v) for v in (s.get("tokens"), s.get("accepted"), nodes) if isinstance(v, list))
        if total > CAPS["total_tokens"]:
            _fail(f"more than {CAPS['total_tokens']:,} tokens over its steps")


def _show(v: object) -> str:
    """A value for an error line without echoing its text: strings and containers by size only, so a
    crafted value never reaches a page through the message."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return f"a string of {len(v)} characters"
    return f"a list of {len(v)}" if isinstance(v, list) else f"an object with {len(v)} keys"


def _why(err) -> str:
    v, kw = err.validator_value, err.validator
    return {"type": lambda: f"expected {v if isinstance(v, str) else ' or '.join(v)}",
            "enum": lambda: "expected one of " + ", ".join(json.dumps(x) for x in v),
            "pattern": lambda: "not an allowed name here",
            "propertyNames": lambda: "a key is not an allowed name here",
            "minimum": lambda: f"below the minimum {v}",
            "maxLength": lambda: f"longer than {v} characters",
            "maxItems": lambda: f"more than {v} entries",
            "minItems": lambda: f"fewer than {v} entries",
            "required": lambda: "missing " + ", ".join(k for k in v if k not in (err.instance or {}))}.get(
        kw, lambda: f"fails the schema's {kw!r} rule")()


# Sections Trace.to_dict derives from the steps (run statistics; a draft model's tree statistics, named
# "speculative" in the document): recomputed on load, so the schema does not describe them.
DERIVED = ("stats", "speculative")


def _schema(d: dict) -> None:
    import jsonschema

    read = {k: v for k, v in d.items() if k not in DERIVED}
    err = jsonschema.exceptions.best_match(_validator().iter_errors(read))
    if err is not None:
        if "propertyNames" in err.schema_path:  # name the offending key's place, not the object
            _fail(f"{_where(err.absolute_path)} has a key that is not a token id")
        _fail(f"{_where(err.absolute_path)} = {_show(err.instance)}: {_why(err)}")


def _forest(parents: list, where: str) -> None:
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            _fail(f"{where}[{i}] = {p} is not before node {i}")


def _semantics(d: dict) -> None:
    """The rules the schema cannot state; the pictures and stats rely on every one of them."""
    cfg = d.get("model", {}).get("config") if isinstance(d.get("model"), dict) else None
    vocab_size = cfg.get("vocab_size") if isinstance(cfg, dict) else None
    if not (isinstance(vocab_size, int) and not isinstance(vocab_size, bool) and 0 < vocab_size <= CAPS["vocab_id"]):
        vocab_size = CAPS["vocab_id"]

    def ids(values: list, where: str) -> None:
        for i, t in enumerate(values):
            if t >= vocab_size:
                _fail(f"{where}[{i}] = {t} is outside the vocabulary ({vocab_size:,} tokens)")

    ids(d["prompt_ids"], "prompt_ids")
    ids(d.get("output_ids", []), "output_ids")
    for k, s in enumerate(d.get("steps", [])):
        at = f"steps[{k}]"
        if s["index"] != k:
            _fail(f"{at}.index = {s['index']}: steps must be numbered 0, 1, 2, ... in order")
        if s["kind"] == "prefill" and k != 0:
            _fail(f"{at} is a prefill step after step 0")
        if len(s["origins"]) != len(s["accepted"]):
            _fail(f"{at} has {len(s['accepted'])} accepted tokens but {len(s['origins'])} origins")
        ids(s["accepted"], f"{at}.accepted")
        n = len(s.get("tokens", []))
        for key in ("positions", "parents", "roles"):
            if len(s.get(key, [])) != n:
                _fail(f"{at}.{key} has {len(s.get(key, []))} entries but tokens has {n}")
        if s.get("slots") and len(s["slots"]) != n:
            _fail(f"{at}.slots has {len(s['slots'])} entries but tokens has {n}")
        if n and s["n_query"] != n:
            _fail(f"{at}.n_query = {s['n_query']} but the step lists {n} query tokens")
        ids(s.get("tokens", []), f"{at}.tokens")
        _forest(s.get("parents", []), f"{at}.parents")
        for i, q in enumerate(s.get("kept", [])):
            if q >= max(n, s["n_query"]):
                _fail(f"{at}.kept[{i}] = {q} is not a query index (the step has {max(n, s['n_query'])})")
        _tree(s.get("info", {}), f"{at}.info", ids)


def _tree(info: dict, at: str, ids) -> None:
    tree = info.get("tree")
    nodes = 0
    if tree is not None:
        nodes = len(tree["tokens"])
        for key in ("parents", "depth", "draft_prob", "target_prob", "origin", "head", "rank", "exit", "count"):
            if key in tree and len(tree[key]) != nodes:
                _fail(f"{at}.tree.{key} has {len(tree[key])} entries but the tree has {nodes} nodes")
        ids(tree["tokens"], f"{at}.tree.tokens")
        _forest(tree["parents"], f"{at}.tree.parents")
        pruned = tree.get("pruned", {})
        for key in ("tokens", "draft_prob"):
            if key in pruned and len(pruned[key]) != len(pruned.get("parents", [])):
                _fail(f"{at}.tree.pruned.{key} and .parents differ in length")
        for i, p in enumerate(pruned.get("parents", [])):
            if p >= nodes:
                _fail(f"{at}.tree.pruned.parents[{i}] = {p} is not a node of the tree ({nodes} nodes)")
    ret = info.get("retrieval", {})
    ids(ret.get("suffix", []), f"{at}.retrieval.suffix")
    if "node_at" in ret and len(ret["node_at"]) != max(0, nodes - 1):
        _fail(f"{at}.retrieval.node_at has {len(ret['node_at'])} entries but the tree has {nodes - 1} drafted nodes")
    conf = info.get("self_spec", {}).get("draft_conf")
    if conf is not None and len(conf) != nodes:
        _fail(f"{at}.self_spec.draft_conf has {len(conf)} entries but the tree has {nodes} nodes")
    path = info.get("accepted_path", []) if tree is not None else []  # without a tree nothing walks it
    for i, node in enumerate(path):
        if node >= nodes:
            _fail(f"{at}.accepted_path[{i}] = {node} is not a node of the tree ({nodes} nodes)")
        if i and tree["parents"][node] != path[i - 1]:
            _fail(f"{at}.accepted_path[{i}] = {node} is not a child of node {path[i - 1]}")


def check_document(d: object) -> dict:
    """A parsed trace document -> the same dict, checked. Raises TraceError with one sentence."""
    if not isinstance(d, dict):
        _fail(f"expected a JSON object, got {type(d).__name__}")
    _count_values(d)
    _list_caps(d)
    _schema(d)
    _semantics(d)
    return d
