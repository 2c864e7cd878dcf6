"""The traces Replay ships (assets/traces/) are what a workshop is shown first: recorded on the default model,
answers that are right code, small, opening on a step that shows the method's point and saying why, and
counted correctly by the docs."""
from __future__ import annotations

import re
from pathlib import Path

from decoding import Trace
from decoding.models import DEFAULT_MODEL
from viz.exports.teach import teaching_step

ROOT = Path(__file__).resolve().parent.parent
TRACES = sorted((ROOT / "assets" / "traces").glob("*.json"))
WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def first_code_block(text: str) -> str:
    m = re.search(r"```python\n(.*?)\n```", text, re.S)
    assert m, f"no complete code block in {text[:120]!r}"
    return m.group(1)


def test_every_shipped_trace_is_on_the_default_model_with_a_right_answer():
    assert TRACES
    for p in TRACES:
        tr = Trace.load(p)
        assert tr.model["name"] == DEFAULT_MODEL, (p.name, tr.model["name"])
        scope: dict = {}
        exec(compile(first_code_block(tr.text), p.name, "exec"), scope)  # noqa: S102 - our own recorded answer
        assert (scope["add"](6, 3), scope["subtract"](6, 3), scope["multiply"](6, 3), scope["divide"](6, 3)) == \
            (9, 3, 18, 2), p.name
        pick = teaching_step(tr)
        assert pick["found"] and pick["k"] > 0, (p.name, pick)  # a step that shows the method's point


def test_the_shipped_traces_are_small_and_the_docs_count_and_explain_them():
    assert sum(p.stat().st_size for p in TRACES) < 400_000
    app = (ROOT / "docs" / "app.md").read_text()
    assert f"`assets/traces/` ships {WORDS[len(TRACES)]}" in app
    assert "python scripts/record_traces.py" in app and (ROOT / "scripts" / "record_traces.py").is_file()
    for p in TRACES:  # each one's opening step and why, as Replay says it
        tr = Trace.load(p)
        assert f"`{p.name}`" in app and teaching_step(tr)["shows"] in app, p.name
