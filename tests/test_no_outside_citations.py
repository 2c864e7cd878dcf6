"""Every file a reader gets cites only what a reader has: no notes kept outside the repository (REFERENCE.md,
TRAINING.md, ../shared/...) and no issue-tracker numbers ("issue 18"). Measured and library facts live in
docs/engineering-notes.md, each with a source a reader can check."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve()

PATTERNS = {
    "an outside notes file": re.compile(r"\b(?:REFERENCE|TRAINING)\.md\b"),
    "a path into ../shared": re.compile(r"(?:\.\./shared\b|\bshared/(?:models|seeds|tools|hooks)\b"
                                        r"|\bshared/[A-Z][A-Z_]*\.md\b)"),
    "an issue-tracker number": re.compile(r"\b[Ii]ssues?\s?#?\d+\b|\b[Ii]ssue\s?#\s?\d+"),
}
BINARY = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".pdf", ".safetensors", ".bin", ".pt", ".gguf",
          ".whl", ".gz", ".zip", ".so", ".pyc", ".npy", ".npz"}


def repo_files() -> list[Path]:
    """Tracked files plus untracked ones git does not ignore: what a commit of the working tree would hold."""
    try:
        out = [subprocess.run(["git", "ls-files", "-z", *extra], cwd=ROOT, capture_output=True, check=True,
                              text=True).stdout for extra in ((), ("--others", "--exclude-standard"))]
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: nothing to list")
    names = {n for chunk in out for n in chunk.split("\0") if n}
    return sorted(p for p in (ROOT / n for n in names) if p.is_file() and p.resolve() != SELF)


def text_of(path: Path) -> str | None:
    if path.suffix.lower() in BINARY:
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def citations(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, line) for every outside citation in text."""
    return [(i, what, line.strip()) for i, line in enumerate(text.splitlines(), 1)
            for what, rx in PATTERNS.items() if rx.search(line)]


def test_the_patterns_catch_citations_and_spare_ordinary_text():
    cited = ['see REFERENCE.md "GPU facts"', "(shared/models/TRAINING.md)", "shared/models TRAINING.md:",
             "../shared/seeds/000", "(issue 18)", "Issue 20: the Jacobi box", "issue 21's goals", "issues 3 and 4",
             "issue #19", "Issue#7"]
    plain = ['"&#39;"', "#39;", "color: #1f77b4", "line=dict(color='#999')", "go(#5)", "a shared/ cache pool",
             "shared with other jobs", "uses: actions/checkout@v4", "the issue's first look", "tissue 3",
             "reference.md in lower case is another file", "runs/issue_18.json"]
    assert all(citations(t) for t in cited), [t for t in cited if not citations(t)]
    assert not any(citations(t) for t in plain), [t for t in plain if citations(t)]


def test_no_file_cites_what_a_reader_does_not_have():
    hits = []
    for path in repo_files():
        text = text_of(path)
        if text is not None:
            hits += [f"{path.relative_to(ROOT)}:{i}: {what}: {line[:160]}" for i, what, line in citations(text)]
    assert not hits, ("cite docs/engineering-notes.md (or a paper, a library version, a committed result file) "
                      "instead:\n" + "\n".join(hits))
