"""Words a teacher reads aloud must match what was really run or counted: what the shipped datastore holds,
which draft a speculative trace ran, what a roofline axis and the profile's bytes say, what lookahead's
trajectory banner claims."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "assets" / "datastore" / "smollm2" / "datastore.json"


def store_parts() -> dict[str, dict]:
    """The shipped datastore's documents grouped by source folder (chat/, stdlib/), read from its own record."""
    parts: dict[str, dict] = defaultdict(lambda: {"files": 0, "tokens": 0, "names": []})
    meta = json.loads(STORE.read_text())
    for f in meta["files"]:
        p = parts[f["name"].split("/")[0]]
        p["files"] += 1
        p["tokens"] += f["tokens"]
        p["names"].append(f["name"].split("/", 1)[1])
    return {**parts, "total": {"tokens": meta["tokens"]}}


def test_every_description_of_the_shipped_datastore_says_what_is_in_it():
    from appkit.page.lesson import ALL
    from appkit.page.method_controls import DATASTORES
    parts = store_parts()
    chat, lib = parts["chat"], parts["stdlib"]
    assert 0.2 < chat["tokens"] / parts["total"]["tokens"] < 0.3  # "a quarter"
    last_folder = lib["names"][-1].split("/")[0] + "/"
    stop = next(s for s in ALL if s.method == "retrieval")
    said = stop.narration
    for words in (said, (ROOT / "docs" / "retrieval.md").read_text(),
                  (ROOT / "assets" / "datastore" / "README.md").read_text()):
        assert "index of the Python standard library" not in words
        assert f"{parts['total']['tokens']:,}" in words
        assert f"{chat['files']} " in words and f"first {lib['files']} " in words, words[:400]
        assert last_folder in words and lib["names"][0] in words
        assert "a quarter" in words
    label = dict((v, k) for k, v in DATASTORES)["shipped"]
    assert "chat answers" in label and f"up to {last_folder}" in label
    card = (ROOT / "assets" / "datastore" / "README.md").read_text()
    assert f"{chat['tokens']:,}" in card and f"{lib['tokens']:,}" in card
