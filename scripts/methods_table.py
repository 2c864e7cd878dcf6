"""Write the README's methods table and docs/methods.md's parameter reference from the method specs.

Why generated: the specs (decoding/methods/*.py, listed in decoding/methods/registry.py) are the one place a
method is described; a hand-written table drifted from them before. `--check` exits 1 when a file is stale
(tests/test_method_spec.py runs it), so a new method shows up in the docs the moment it is registered.

    python scripts/methods_table.py          # rewrite the marked blocks
    python scripts/methods_table.py --check  # exit 1 if they are stale
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from decoding.methods.registry import SPECS  # noqa: E402
from decoding.methods.spec import MethodSpec  # noqa: E402

NEEDS = {"draft_model": "a draft model (shipped for the default model)", "heads": "trained heads (shipped)",
         "adapter": "a trained adapter (shipped)", "datastore": "a datastore (optional)"}
BLOCKS = {"README.md": ("<!-- methods-table -->", "<!-- /methods-table -->", "table"),
          "docs/methods.md": ("<!-- method-params -->", "<!-- /method-params -->", "params")}


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(specs: dict[str, MethodSpec] = SPECS) -> str:
    """One row per registered method: name, what drafts, exact when greedy, needs, paper."""
    rows = ["| method | drafts with | greedy output = HF greedy | needs | paper |", "|---|---|---|---|---|"]
    for s in specs.values():
        needs = ", ".join(NEEDS.get(n, n) for n in s.needs) or "nothing"
        rows.append(f"| `{s.name}` | {cell(s.summary)} | {'yes' if s.exact_greedy else 'no'} | {cell(needs)} | "
                    f"{cell(s.paper) or '-'} |")
    return "\n".join(rows)


def params(specs: dict[str, MethodSpec] = SPECS) -> str:
    """Per method: its parameters as run(**params) takes them, the CLI flag, range and default."""
    out = []
    for s in specs.values():
        out += [f"### {s.label} (`{s.name}`)", "", cell(s.summary) + ".", ""]
        knobs = s.knobs()
        if not knobs:
            out += ["No parameters.", ""]
            continue
        out += ["| parameter | CLI flag | range | default | what it does |", "|---|---|---|---|---|"]
        for k in knobs:
            rng = (f"{k.lo}..{k.hi}" if k.lo is not None else ", ".join(map(str, k.choices)) if k.choices else "")
            out.append(f"| `{k.name}` | {f'`{k.cli}`' if k.cli else '-'} | {rng or '-'} | "
                       f"{'-' if k.default is None else f'`{k.default}`'} | {cell(k.help)} |")
        out.append("")
    return "\n".join(out).rstrip()


def render(kind: str, specs: dict[str, MethodSpec] = SPECS) -> str:
    return table(specs) if kind == "table" else params(specs)


def updated(text: str, start: str, end: str, body: str) -> str | None:
    """text with the block between the markers replaced by body; None when a marker is missing."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        return None
    return text[:i + len(start)] + "\n" + body + "\n" + text[j:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale")
    a = ap.parse_args(argv)
    stale = []
    for rel, (start, end, kind) in BLOCKS.items():
        path = ROOT / rel
        text = path.read_text()
        new = updated(text, start, end, render(kind))
        if new is None:
            print(f"{rel}: markers {start} ... {end} missing", file=sys.stderr)
            return 1
        if new != text:
            stale.append(rel)
            if not a.check:
                path.write_text(new)
    if a.check and stale:
        print(f"stale: {', '.join(stale)} (run python scripts/methods_table.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
