"""Import rules the engine keeps: decoding/ needs nothing outside itself (the CLI's --auto included), and
speculative.py does not import the API that builds it (api -> speculative only)."""
import ast
from pathlib import Path

DECODING = Path(__file__).resolve().parent.parent / "decoding"


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add(("." * node.level) + (node.module or ""))
    return out


def test_decoding_imports_nothing_from_profiling_viz_or_the_app():
    for f in DECODING.glob("*.py"):
        bad = {m for m in imports(f) if m.split(".")[0] in ("profiling", "viz", "app", "appkit", "gradio", "plotly")}
        assert not bad, f"{f.name} imports {bad}"


def test_speculative_does_not_import_api():
    assert not {m for m in imports(DECODING / "speculative.py") if m.endswith("api")}
    assert ".speculative" in imports(DECODING / "api.py")
