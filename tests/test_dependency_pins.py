"""CI is reproducible: constraints.txt (pip-tools output of scripts/lock_deps.sh) pins every requirement
inside its supported range, and the README's install lines (the one CI runs included) use it."""
from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> list[Requirement]:
    out = []
    for name in ("requirements.txt", "requirements-dev.txt"):
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                out.append(Requirement(line))
    return out


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==([^\s#]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_every_requirement_is_pinned_inside_its_range():
    pins = _pins()
    assert "torch" not in pins  # pinned exactly in requirements.txt; the lock must not carry a local +cpu label
    for req in _requirements():
        key = req.name.lower().replace("_", "-")
        if key == "torch":
            assert str(req.specifier) == "==2.13.0"
            continue
        assert key in pins, f"{req.name} has no pin in constraints.txt: run scripts/lock_deps.sh"
        assert req.specifier.contains(pins[key], prereleases=True), f"{req.name}=={pins[key]} outside {req.specifier}"


def test_readme_installs_use_the_pins():
    readme = (ROOT / "README.md").read_text()
    test_cmd = readme.split("<!-- test-command -->", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    assert "-c constraints.txt" in test_cmd and "pytest" in test_cmd
    pages = [readme, *(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))]  # install lines moved there too
    lines = [line for page in pages for line in re.findall(r"^pip install -r requirements\.txt.*$", page, re.M)]
    assert len(lines) >= 2  # the README's app and test lines at least
    for line in lines:
        assert "-c constraints.txt" in line, line
