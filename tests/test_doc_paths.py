"""Every repository path the docs name exists: a page that sends a reader to a moved or deleted file fails
here (docs/add-a-method.md is read by people adding a method with nothing else in hand)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("decoding", "appkit", "viz", "profiling", "tests", "bench", "scripts", "docs", "assets", "custom_generate",
           "decodescope")
PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(FOLDERS) + r")/[\w./-]*[\w/])")
LINK = re.compile(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)")


def named_paths(text: str) -> set[str]:
    """Repository paths in a page: folder/... spelled out, and relative Markdown links to other pages."""
    out = {m.group(1).rstrip(".") for m in PATH.finditer(text)}
    return {p for p in out if "..." not in p and "*" not in p and "<" not in p}


def missing(page: Path) -> list[str]:
    text = page.read_text()
    gone = []
    for p in sorted(named_paths(text)):
        target = ROOT / p
        # a name stem ("bench/results/lp" before "-<date>.md") counts when a file starts with it
        if not target.exists() and not any(target.parent.glob(target.name + "*")):
            gone.append(p)
    for link in LINK.findall(text):
        if not (page.parent / link).exists():
            gone.append(link)
    return gone


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"], ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page: Path):
    assert not missing(page), f"{page.relative_to(ROOT)} names paths that do not exist: {missing(page)}"


def test_the_check_can_fail(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("See `decoding/methods/no_such_method.py` and [the guide](no-such-page.md); "
                    "`decoding/methods/spec.py` exists.\n")
    assert missing(page) == ["decoding/methods/no_such_method.py", "no-such-page.md"]
