"""Import rules the code keeps, read from the source (every import, lazy ones inside functions included):
- no import circle among the project's modules (decoding/, viz/, appkit/, profiling/, decodescope/, app.py);
- decoding/ needs nothing outside itself (no viz, profiling, app, gradio or plotly);
- the rooms of decoding/: methods/ may use engine/ and fast/; engine/ and fast/ never import a method;
  fast/ never imports the engine's loop; the top-level data modules (params, and the folders trace/ and
  models/) import no method (they may read the registry's specs); only build.py, api.py, tuning/tune.py,
  hf_generate.py and the CLI (cli/) build methods.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("decoding", "viz", "appkit", "profiling", "decodescope")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = f
    out["app"] = ROOT / "app.py"
    return out


MODS = modules()


def imported(name: str) -> set[str]:
    """The project modules `name` imports (a from-import of a submodule counts as that submodule)."""
    path = MODS[name]
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = name.split(".")
            if node.level:
                base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODS]
            targets = subs + ([mod] if len(subs) < len(node.names) else [])
        else:
            continue
        out |= {t for t in targets if t in MODS and t != name}
    return out


GRAPH = {m: imported(m) for m in MODS}
# The registry imports its methods by name (one line each): those are edges too.
from decoding.methods.registry import MODULES  # noqa: E402
GRAPH["decoding.methods.registry"] |= {m for m in MODULES if m in MODS}


def cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative enough for our size)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_anywhere():
    assert cycles() == []


def test_the_detector_finds_a_circle():
    """The check can fail: a made-up back edge (engine.masks -> methods.lookahead, which imports
    engine.masks) is reported."""
    saved = set(GRAPH["decoding.engine.masks"])
    GRAPH["decoding.engine.masks"].add("decoding.methods.windows.lookahead")
    try:
        assert any("decoding.engine.masks" in c and "decoding.methods.windows.lookahead" in c for c in cycles())
    finally:
        GRAPH["decoding.engine.masks"] = saved


def test_decoding_imports_nothing_from_profiling_viz_or_the_app():
    for name, path in MODS.items():
        if name.split(".")[0] != "decoding":
            continue
        bad = set()
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad |= {m for m in mods if m.split(".")[0] in ("profiling", "viz", "app", "appkit", "gradio", "plotly")}
        assert not bad, f"{name} imports {bad}"


# Folders that group the top-level modules by what they are (the trace, loading, the command line, tuning): they keep
# the top's rule, so only the builders named below build methods.
TOP_FOLDERS = ("trace", "models", "cli", "tuning")


def test_the_rooms_of_decoding():
    builders = {"decoding", "decoding.api", "decoding.build", "decoding.tuning.tune", "decoding.hf_generate",
                "decoding.cli.main", "decoding.cli.habits", "decoding.cli.method_flags"}
    readers = {"decoding.methods.registry", "decoding.methods.spec"}  # the specs, read by name, build nothing
    for name, deps in GRAPH.items():
        if not name.startswith("decoding"):
            continue
        room = name.split(".")[1] if name.count(".") >= 2 else "top"
        if room in TOP_FOLDERS:
            room = "top"
        methods = {d for d in deps if d.startswith("decoding.methods")}
        if room == "top" and name not in builders:
            methods -= readers
        if room in ("engine", "fast"):
            assert not methods, f"{name} ({room}/) imports methods {methods}"
        if room == "fast":
            assert not {d for d in deps if d.startswith("decoding.engine")}, f"{name} (fast/) imports the engine"
        if room == "top" and name not in builders:
            assert not methods, f"{name} imports methods {methods}: only the builders build methods"


def test_speculative_does_not_import_api():
    assert "decoding.api" not in GRAPH["decoding.methods.draft_model.speculative"]
    assert "decoding.methods.draft_model.speculative" in GRAPH["decoding.methods.registry"]


# Outside decoding/methods/ a method is reached through the registry, the spec, or resources.py (drafts, heads,
# reference texts, datastores, histories, the adapter), never through its own modules. Left as they are: the
# trainers of heads and adapters (decoding/training/) and lookahead parallelism (decoding/parallel/, and the
# interconnect model that prices its split), which are parts of one method kept outside its folder.
METHOD_DOORS = {"decoding.methods", "decoding.methods.registry", "decoding.methods.spec", "decoding.methods.resources"}
METHOD_PARTS_OUTSIDE = ("decoding.training", "decoding.parallel", "profiling.interconnect")


def method_internals_imported(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} imports {dep}" for name, deps in graph.items()
                  if not name.startswith(("decoding.methods", *METHOD_PARTS_OUTSIDE))
                  for dep in deps if dep.startswith("decoding.methods.") and dep not in METHOD_DOORS)


def test_nothing_outside_the_methods_imports_a_methods_internals():
    assert method_internals_imported(GRAPH) == []


def test_the_internals_rule_can_fail():
    planted = {**GRAPH, "decoding.api": GRAPH["decoding.api"] | {"decoding.methods.self_draft.medusa"}}
    assert method_internals_imported(planted) == ["decoding.api imports decoding.methods.self_draft.medusa"]
