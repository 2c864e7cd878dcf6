"""The method spec holds: a new method is one file plus one registry line, and nothing else names methods.

test_a_new_method_is_one_file_and_one_line copies the code (not the assets) into a temporary tree, adds a
toy method there exactly as docs/add-a-method.md says (one new module declaring SPEC, one line in the
registry), edits nothing else, and finds the method in the CLI's help, the Python API (exact against
greedy), the app's method list with its generated controls, colour and explanation, and the README's
generated methods table.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ("decoding", "appkit", "viz", "profiling", "decodescope", "custom_generate", "scripts", "docs", "app.py",
        "README.md", "pyproject.toml")

TOY = textwrap.dedent('''
    """Repeat drafting: propose the last token again, `span` times (a toy method for the registry test)."""
    from __future__ import annotations

    from dataclasses import dataclass

    from ..engine.drafter import Abilities, Plan
    from ..engine.masks import chain_parents
    from .spec import MethodSpec, knob


    class Repeat:
        name = "toy_repeat"
        abilities = Abilities()

        @classmethod
        def from_params(cls, **p) -> "Repeat":
            return cls(p.get("repeat_span", 3))

        def __init__(self, span: int = 3):
            self.span = span

        def config(self) -> dict:
            return {"span": self.span}

        def start(self, prompt_ids):
            pass

        def plan(self, context):
            k = self.span
            return Plan([context[-1]] * (k + 1), chain_parents(k + 1), list(range(k + 1)), ["x0"] + ["draft"] * k,
                        [[0, i] for i in range(k + 1)], [False] + [True] * k, origin="draft")

        def observe(self, plan, preds, verdict, context):
            pass

        def max_depth(self) -> int:
            return self.span + 1


    @dataclass
    class RepeatParams:
        repeat_span: int = knob(3, lo=1, hi=8, cli="--repeat-span", ui=True, label="repeat span",
                         help="toy_repeat: how many copies of the last token to propose")


    SPEC = MethodSpec(name="toy_repeat", drafter=Repeat, params=RepeatParams, label="toy repeat", colour="#123456",
                      summary="the last token again, span times", explain="### Toy repeat\\nRepeats the last token.",
                      pictures=("mask", "tree"))
''')

CHECK = textwrap.dedent('''
    import json, torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from decoding import run
    from decoding.methods.registry import SPECS
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    toy = run(model, None, prompt, "toy_repeat", max_new_tokens=12, repeat_span=4)
    greedy = run(model, None, prompt, "greedy", max_new_tokens=12)
    out = {"exact": toy.output_ids == greedy.output_ids, "method": toy.method, "steps": len(toy.steps),
           "spec": SPECS["toy_repeat"].label}
    from viz.palette import METHOD_COLORS
    out["colour"] = METHOD_COLORS.get("toy_repeat")
    print(json.dumps(out))
''')


def copy_code(dest: Path) -> None:
    """The code and docs, copied; the assets (models, heads, datastore) linked, not copied."""
    for name in CODE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "screenshots"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    for name in ("assets", "tests", "bench"):
        (dest / name).symlink_to(ROOT / name)


def add_toy(dest: Path) -> None:
    (dest / "decoding" / "methods" / "toy_repeat.py").write_text(TOY)
    reg = dest / "decoding" / "methods" / "registry.py"
    text = reg.read_text()
    anchor = '    "decoding.methods.self_draft.self_speculative",\n'
    assert anchor in text
    reg.write_text(text.replace(anchor, anchor + '    "decoding.methods.toy_repeat",\n'))


def py(dest: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(dest), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def toy_tree(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("toy_tree")
    copy_code(dest)
    add_toy(dest)
    return dest


def test_a_new_method_is_one_file_and_one_line(toy_tree: Path):
    mine = {p.relative_to(ROOT): p.read_bytes() for p in (ROOT / "decoding").rglob("*.py")}
    theirs = {p.relative_to(toy_tree): p.read_bytes() for p in (toy_tree / "decoding").rglob("*.py")}
    changed = sorted(str(k) for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    assert changed == ["decoding/methods/registry.py", "decoding/methods/toy_repeat.py"], changed
    added = [line for line in (toy_tree / "decoding/methods/registry.py").read_text().splitlines()
             if line not in (ROOT / "decoding/methods/registry.py").read_text().splitlines()]
    assert added == ['    "decoding.methods.toy_repeat",'], added
    helped = py(toy_tree, "-m", "decoding", "generate", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "toy_repeat" in helped.stdout and "--repeat-span" in helped.stdout
    ran = py(toy_tree, "-c", CHECK)
    assert ran.returncode == 0, ran.stderr[-3000:]
    import json
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert got["exact"] and got["method"] == "toy_repeat" and got["spec"] == "toy repeat"
    assert got["colour"] == "#123456"
    table = py(toy_tree, "scripts/methods_table.py")
    assert table.returncode == 0, table.stderr
    readme = (toy_tree / "README.md").read_text()
    assert "| `toy_repeat` | the last token again, span times |" in readme
    assert "`--repeat-span`" in (toy_tree / "docs" / "methods.md").read_text()


def test_the_generated_docs_are_current():
    """README's methods table and docs/methods.md's parameters are what the specs say today."""
    r = subprocess.run([sys.executable, "scripts/methods_table.py", "--check"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


# ---- no method name compared with a literal outside the methods and the registry ----

def method_names() -> set[str]:
    from decoding.methods.registry import SPECS
    return set(SPECS)


def literal_comparisons(path: Path, names: set[str]) -> list[str]:
    """`x == "eagle"`, `x != "greedy"`, `x in ("medusa", "eagle")`, `"eagle" in methods`: each comparison of a
    method with a string literal that is a method name, as file:line. A literal tested against a dict or list
    that is not about methods (`"jacobi" in step.info`, a picture name in `pictures`) is data, not a method."""
    out = []
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            hit = False
            if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                hit = any(isinstance(x, ast.Constant) and x.value in names for x in (left, right))
            elif isinstance(op, (ast.In, ast.NotIn)):
                if isinstance(right, (ast.Tuple, ast.List, ast.Set, ast.BinOp)):  # BinOp: HEADS + ("retrieval",)
                    hit = any(v in names for v in spelled(right))
                elif isinstance(left, ast.Constant) and left.value in names:
                    hit = "method" in (ast.get_source_segment(source, right) or "").lower()
            if hit:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            left = right
    for node in ast.walk(ast.parse(source)):  # match method: case "jacobi": ...
        if isinstance(node, ast.MatchValue) and any(v in names for v in spelled(node.value)):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def spelled(node: ast.AST) -> list:
    """The string constants a literal container (or a sum of them) spells out."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return spelled(node.left) + spelled(node.right)
    return []


def js_comparisons(path: Path, names: set[str]) -> list[str]:
    pat = re.compile(r"(===?|!==?)\s*[\"'](" + "|".join(map(re.escape, sorted(names))) + r")[\"']|[\"'](" +
                     "|".join(map(re.escape, sorted(names))) + r")[\"']\s*(===?|!==?)")
    return [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1)
            if pat.search(line)]


def outside_methods() -> list[Path]:
    files = [ROOT / "app.py"]
    for folder in ("decoding", "appkit", "viz", "profiling", "decodescope", "custom_generate", "bench", "scripts"):
        files += sorted((ROOT / folder).rglob("*.py")) + sorted((ROOT / folder).rglob("*.js"))
    own = (ROOT / "decoding" / "methods", ROOT / "decoding" / "training")  # the methods and their training code
    return [f for f in files if not any(d in f.parents for d in own) and "__pycache__" not in f.parts]


def test_no_method_name_is_compared_with_a_literal_outside_the_methods():
    names = method_names()
    found = []
    for f in outside_methods():
        found += js_comparisons(f, names) if f.suffix == ".js" else literal_comparisons(f, names)
    assert not found, "compare with spec fields (needs, pictures, presets, BASELINE), not names: " + ", ".join(found)


def test_the_comparison_check_can_fail(tmp_path: Path):
    bad = ROOT / "viz" / "_probe_literal.py"
    try:
        bad.write_text('def f(m, tr):\n    return m in ("medusa", "eagle") or m == "greedy" or "eagle" in tr.methods\n'
                       'def g(info, m):\n    return "jacobi" in info or m in HEADS + ("retrieval",)\n'
                       'def h(m):\n    match m:\n        case "lookahead":\n            return 1\n')
        assert len(literal_comparisons(bad, method_names())) == 5
    finally:
        bad.unlink()
    js = ROOT / "viz" / "_probe_literal.js"
    try:
        js.write_text('const x = D.method === "jacobi" ? 1 : 2;\n')
        assert js_comparisons(js, method_names())
    finally:
        js.unlink()


def test_no_folder_holds_more_than_20_modules():
    """The packages' rooms stay small enough to read: a folder of more than 20 modules wants rooms."""
    crowded = {}
    for folder in ("decoding", "appkit", "viz", "profiling", "decodescope"):
        for d in [ROOT / folder, *[p for p in (ROOT / folder).rglob("*") if p.is_dir()]]:
            if "__pycache__" in d.parts:
                continue
            n = len([f for f in d.glob("*.py") if f.name != "__init__.py"])
            if n > 20:
                crowded[str(d.relative_to(ROOT))] = n
    assert not crowded, crowded
