"""A method registered through its spec alone reaches the app: the method list, its generated controls (label,
range, default, help), their group shown with it only, its colour and its explanation, its settings checked
and its drafter built through decoding.build, with no edit to app.py or appkit/.

The toy method is one new module on sys.path (a drafter and its SPEC) added to the registry before the app is
imported, in a child process so this test's registry stays the shipped one.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TOY = textwrap.dedent('''
    """A toy method: greedy's drafter with two knobs, declared the way every method is."""
    from dataclasses import dataclass

    from decoding.engine.drafter import Greedy
    from decoding.methods.spec import MethodSpec, knob


    class Toy(Greedy):
        name = "toy"

        @classmethod
        def from_params(cls, **p):
            d = cls()
            d.stride, d.fast = p.get("stride", 3), p.get("fast", False)
            return d


    @dataclass
    class ToyParams:
        stride: int = knob(3, lo=1, hi=9, ui=True, label="S stride", help="toy: tokens it strides per step")
        fast: bool = knob(False, ui=True, label="go fast", help="toy: a switch")
        hidden: int = knob(2, lo=1, hi=4, help="toy: not a control")


    SPEC = MethodSpec(name="toy", drafter=Toy, params=ToyParams, label="toy method", colour="#123456",
                      summary="a toy", explain="### Toy decoding\\nIt strides S tokens and checks them.")
''')

PROBE = textwrap.dedent('''
    import inspect, json, sys
    from decoding.methods import registry
    registry.MODULES += ("toy_method",)
    registry.SPECS.update(registry.load_specs(("toy_method",)))
    registry.METHODS = tuple(registry.SPECS)

    import app
    from appkit.public.limits import Limits
    from appkit.page.method_controls import on_method
    from appkit.run.prepared import Prepared
    from appkit.run.settings import FIELDS, Settings, method_params
    from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET

    demo = app.build_demo(EMBEDDED_TARGET, EMBEDDED_DRAFT, public=False)
    p = demo.decodescope["page"]
    out = {"choices": [list(c) for c in p.method.choices], "fields": list(FIELDS)}
    for f in ("stride", "fast", "hidden"):
        c = getattr(p, f, None)
        out[f] = None if c is None else {"type": type(c).__name__, "label": c.label, "value": c.value,
                                         "info": c.info, "in_inputs": c in p.inputs()}
    pick, shown = on_method(p)
    groups = [g for g, _ in p.method_groups + p.resource_groups]
    for m in ("toy", "lookahead"):
        ups = pick(m)
        out[m] = {"visible": [u.get("visible") for u in ups[:len(groups)]], "explain": ups[-1]}
    toy_group = next(g for g, ms in p.method_groups if ms == ("toy",))
    out["toy_group"] = groups.index(toy_group)
    inside = lambda c, b: any(x is c or inside(c, x) for x in getattr(b, "children", []))  # noqa: E731
    out["stride_in_group"] = inside(p.stride, toy_group) and inside(p.fast, toy_group)
    out["css"] = app.launch_kwargs()["css"]
    run_api = next(f for f in demo.fns.values() if f.api_name == "run")
    out["api"] = list(inspect.signature(run_api.fn).parameters)
    problems = []
    method_params(Settings(method="toy", stride=0), "toy", Limits(False), problems)
    out["problems"] = problems
    params = method_params(Settings(method="toy", stride=5, fast=True), "toy", Limits(False), [])
    d = Prepared(Settings(method="toy"), "x", 4, None, None, None, params={"toy": params}).drafter("toy")
    out["built"] = [type(d).__name__, d.stride, d.fast]
    print("PROBE" + json.dumps(out))
''')


def probe(tmp_path: Path) -> dict:
    (tmp_path / "toy_method.py").write_text(TOY)
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "OMP_NUM_THREADS": "1", "DECODESCOPE_NO_FETCH": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "HOME": str(Path.home()), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("PROBE")), None)
    assert line, r.stdout[-2000:] + r.stderr[-4000:]
    return json.loads(line[len("PROBE"):])


def test_a_method_registered_by_its_spec_appears_in_the_app_with_its_controls(tmp_path):
    out = probe(tmp_path)
    # the method list: the spec's label and its one-letter knob, after the shipped methods
    assert ["toy method (S)", "toy"] in out["choices"] and out["choices"][-1] == ["toy method (S)", "toy"]
    # its ui knobs are controls (label, default, range and help as info) sent with every event; the rest is not
    assert out["stride"]["type"] == "Number" and out["stride"]["label"] == "S stride" and out["stride"]["value"] == 3
    assert "1–9" in out["stride"]["info"] and "tokens it strides per step" in out["stride"]["info"]
    assert out["fast"]["type"] == "Checkbox" and out["fast"]["label"] == "go fast" and out["fast"]["value"] is False
    assert out["stride"]["in_inputs"] and out["fast"]["in_inputs"] and out["hidden"] is None
    assert {"stride", "fast"} <= set(out["fields"]) and {"stride", "fast"} <= set(out["api"])
    # its group is shown with it only; the explanation is its spec's, then the common paragraph
    k = out["toy_group"]
    assert out["toy"]["visible"][k] is True and out["lookahead"]["visible"][k] is False
    assert out["toy"]["visible"].count(True) == 1 and out["stride_in_group"]
    assert out["toy"]["explain"].startswith("### Toy decoding") and "memory-bound" in out["toy"]["explain"]
    assert "Toy decoding" not in out["lookahead"]["explain"]
    # its colour marks its entry in the method list
    assert '#ds-method label[data-testid="toy method (S)-radio-label"]{border-left:4px solid #123456}' in out["css"]
    # its values are checked with its knob's label and range, and its drafter is built by decoding.build
    assert out["problems"] == ["**S stride** must be a whole number in [1, 9], got 0"]
    assert out["built"] == ["Toy", 5, True]


def test_the_shipped_page_lists_the_registry():
    """Without the toy: the method list is the registry's, in its order, and nothing else."""
    from appkit.page.ui import METHOD_CHOICES
    from decoding.methods.registry import METHODS
    assert [m for _, m in METHOD_CHOICES] == list(METHODS) and "toy" not in METHODS
