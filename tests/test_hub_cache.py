"""The Hub code path without the Hub: tiny models laid out as huggingface_hub's cache lays out a download
(models--org--name/blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>, refs/main = commit)
load by Hub id through decoding.load under HF_HUB_OFFLINE=1, and speculative decoding with a draft named
by Hub id equals HF greedy. huggingface_hub reads HF_HUB_CACHE, HF_HOME and HF_HUB_OFFLINE when it is
imported, so the check runs in a fresh process with those variables set."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import save_tiny_dir

ROOT = Path(__file__).resolve().parent.parent


def hub_cache_entry(cache: Path, repo_id: str, folder: Path, commit: str) -> Path:
    """Put a saved model folder into `cache` as the Hub client stores repo_id at `commit`; the snapshot."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snap = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = f.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / f.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(os.path.relpath(blob, link.parent))
        except OSError:  # no symlinks (Windows without developer mode): the client copies files then
            link.write_bytes(data)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


CHECK = r"""
import json, sys
from decoding import ModelError, load, run
from decoding.exactness import hf_greedy
from decoding.models import hub_offline
out = {"offline": hub_offline()}
model, tok = load("org/tiny-target")
hf = load("org/tiny-target", layout="stock")[0]
prompt = "def f ( x ) : return x + 1 def g ( y ) :"
ids = tok(prompt)["input_ids"]
ref = hf_greedy(hf, ids, 32)
out["greedy"] = run(model, tok, prompt, "greedy", max_new_tokens=32).output_ids == ref
for name, draft, p in (("chain", "org/tiny-draft", dict(draft_tokens=3)), ("tree", "org/tiny-draft", dict(tree=[2, 1])),
                       ("staged", "org/tiny-twin", dict(tree=[2, 1, 1], staged=True))):
    tr = run(model, tok, prompt, "speculative", max_new_tokens=32, draft_model=draft, **p)
    out[name] = tr.output_ids == ref
    out[name + "_steps"] = len(tr.steps)
out["name"] = model.name_or_path_
try:
    load("org/not-cached")
except ModelError as e:
    out["missing"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    base = tmp_path_factory.mktemp("hub")
    cache = base / "hub"
    # a draft with other weights (rejections) and a twin of the target (every drafted token accepted)
    for repo_id, seed, commit in (("org/tiny-target", 0, "a" * 40), ("org/tiny-draft", 1, "b" * 40),
                                  ("org/tiny-twin", 0, "c" * 40)):
        folder = Path(save_tiny_dir(base / repo_id.split("/")[1], seed=seed))
        hub_cache_entry(cache, repo_id, folder, commit)
    return base, cache


def test_load_and_speculate_by_hub_id_offline(hub_cache, tmp_path):
    base, cache = hub_cache
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(base / "home"), HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["offline"] and out["name"] == "org/tiny-target"
    assert out["greedy"] and out["chain"] and out["tree"] and out["staged"], out
    assert out["staged_steps"] < 32  # the twin's drafts were accepted: several tokens per step
    assert "not in the Hugging Face cache" in out["missing"] and "HF_HUB_OFFLINE=1" in out["missing"]
    assert "\n" not in out["missing"]
    assert not (base / "home" / "hub").exists() or not any((base / "home" / "hub").iterdir())  # read HF_HUB_CACHE


def test_cache_layout_is_what_the_hub_client_reads(hub_cache, monkeypatch):
    """huggingface_hub's own cache scanner sees both repos at their commits (the layout is not a look-alike)."""
    from huggingface_hub import scan_cache_dir
    _, cache = hub_cache
    info = scan_cache_dir(cache)
    repos = {r.repo_id: r for r in info.repos}
    assert set(repos) == {"org/tiny-target", "org/tiny-draft", "org/tiny-twin"}
    assert {rev.commit_hash for rev in repos["org/tiny-target"].revisions} == {"a" * 40}
    assert "main" in next(iter(repos["org/tiny-draft"].revisions)).refs
    assert not info.warnings
