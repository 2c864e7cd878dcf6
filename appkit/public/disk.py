"""The app's downloads on disk, bounded: one folder per request, a total cap, oldest deleted first.

Why: a profile at 256 tokens writes ~85 MB (its Perfetto files) and Gradio keeps a copy of every download in
its own cache, so back-to-back requests on a shared server would fill the disk within hours. The cap counts
both (this folder and Gradio's cache, where its copies of our files land) and, when a new request would pass
it, deletes the oldest entries first; entries older than max_age_s go in any case. A download deleted this
way answers 404 to a late click; the page says downloads are kept a while, not forever.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

TMP = Path(tempfile.gettempdir()) / "decodescope-app"
TMP_MAX_AGE_S = 3600
# Total bytes of downloads (ours + Gradio's copies): a public Space shares one disk between all its visitors.
DISK_CAP = {"public": 1 * 2**30, "local": 4 * 2**30}


def disk_cap(public: bool) -> int:
    """DECODESCOPE_DISK_CAP_MB if set (a positive number), else the mode's default."""
    v = os.environ.get("DECODESCOPE_DISK_CAP_MB", "").strip()
    try:
        mb = float(v)
        if mb > 0:
            return int(mb * 2**20)
    except ValueError:
        pass
    return DISK_CAP["public" if public else "local"]


def _size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    total = 0
    for root, _, files in os.walk(p):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except OSError:
            pass


class Downloads:
    """Folders for requests' downloads under `root`; `others` (Gradio's cache) count against the same cap.

    Two ways to count: `prune` walks the folders (a request's start and end, in its worker thread), and
    `written` (an upload, several a second under attack) counts only the files just written, against running
    totals kept since the last walk (`_index`): its work does not grow with the entries on disk."""

    def __init__(self, root: Path = TMP, cap: int = DISK_CAP["local"], max_age_s: float = TMP_MAX_AGE_S):
        self.root, self.cap, self.max_age_s = Path(root), int(cap), max_age_s
        self.others: list[Path] = []
        self.owners: dict[Path, str] = {}  # top-level entry -> the client that wrote it (uploads: clients.py)
        self._index: dict[Path, list] = {}  # top-level entry -> [last change, bytes], as of the last walk + uploads
        self._total = 0  # the bytes of _index
        self._by_owner: dict[str, int] = {}  # client -> bytes of its entries in _index
        self._lock = threading.Lock()

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last change, bytes, path) of every top-level entry of the root and of the other folders."""
        out = []
        for d in [self.root, *self.others]:
            try:
                children = list(d.iterdir())
            except OSError:
                continue
            for p in children:
                try:
                    out.append((p.stat().st_mtime, _size(p), p))
                except OSError:
                    pass
        return out

    def used(self) -> int:
        return sum(b for _, b, _ in self.entries())

    def top(self, path: str | Path) -> Path | None:
        """The top-level entry (of the root or an other folder) that holds `path`, or None."""
        p = Path(path)
        for d in [self.root, *self.others]:
            try:
                rel = p.relative_to(d)
            except ValueError:
                continue
            return d / rel.parts[0] if rel.parts else None
        return None

    def written(self, paths: list[str], owner: str) -> int:
        """Files a client has just written (an upload): owned by it and added to the running totals, then the
        cap enforced at once, the writer's own older files first. Reads only the new files' sizes: O(files
        written), whatever is on disk. Returns the bytes counted."""
        with self._lock:
            now = time.time()
            for p in paths[:64]:
                top = self.top(p)
                if top is None:
                    continue
                try:
                    size = os.lstat(p).st_size
                except OSError:
                    continue
                entry = self._index.setdefault(top, [now, 0])
                entry[0], entry[1] = now, entry[1] + size
                self._total += size
                if self.owners.get(top) not in (None, owner):  # an entry changes hands: its bytes go with it
                    self._by_owner[self.owners[top]] -= entry[1] - size
                    self._by_owner[owner] = self._by_owner.get(owner, 0) + entry[1] - size
                self.owners[top] = owner
                self._by_owner[owner] = self._by_owner.get(owner, 0) + size
            if self._total > self.cap:
                live = [(t, b, q) for q, (t, b) in self._index.items()]
                for t, b, q in self._order(live, owner):
                    if self._total <= self.cap:
                        break
                    _remove(q)
                    self._forget(q)
            return self._total

    def held_by(self, owner: str) -> int:
        """Bytes of the entries a client wrote, as counted (uploads since the last walk included)."""
        with self._lock:
            return self._by_owner.get(owner, 0)

    def _forget(self, p: Path) -> None:
        """Drop an entry from the running totals (it was deleted). Caller holds the lock."""
        t_b = self._index.pop(p, None)
        owner = self.owners.pop(p, None)
        if t_b is not None:
            self._total -= t_b[1]
            if owner is not None and owner in self._by_owner:
                self._by_owner[owner] -= t_b[1]
                if self._by_owner[owner] <= 0:
                    del self._by_owner[owner]

    def _order(self, live: list[tuple[float, int, Path]], owner: str | None) -> list[tuple[float, int, Path]]:
        """Who goes first when over the cap: the writer's own entries (oldest first), then everyone's oldest,
        each other owner's newest entry last (one client's junk never deletes another visitor's fresh file)."""
        live = sorted(live, key=lambda e: e[0])
        newest: dict[str, Path] = {}
        for _, _, p in live:
            if p in self.owners:
                newest[self.owners[p]] = p
        mine = [e for e in live if owner is not None and self.owners.get(e[2]) == owner]
        last = [e for e in live if e not in mine and newest.get(self.owners.get(e[2], "")) == e[2]]
        return mine + [e for e in live if e not in mine and e not in last] + last

    def prune(self, keep: Path | None = None, owner: str | None = None) -> int:
        """Delete entries older than max_age_s, then, in `_order`, until the total fits the cap (never `keep`,
        the folder a request is writing now). Returns the bytes left."""
        with self._lock:
            now = time.time()
            live = []
            for t, b, p in self.entries():
                if now - t > self.max_age_s and p != keep:
                    _remove(p)
                    self.owners.pop(p, None)
                else:
                    live.append((t, b, p))
            total = sum(b for _, b, _ in live)
            for t, b, p in self._order(live, owner):
                if total <= self.cap:
                    break
                if p != keep:
                    _remove(p)
                    self.owners.pop(p, None)
                    total -= b
            # the walk is the truth: the running totals start again from it
            kept = [(t, b, p) for t, b, p in live if p.exists() or p == keep]
            self._index = {p: [t, b] for t, b, p in kept}
            self._total = sum(b for _, b, _ in kept)
            self._by_owner = {}
            for t, b, p in kept:
                if p in self.owners:
                    self._by_owner[self.owners[p]] = self._by_owner.get(self.owners[p], 0) + b
            self.owners = {p: o for p, o in self.owners.items() if p in self._index}
            return total

    def folder(self) -> Path:
        """A fresh folder for one request's downloads, after making room."""
        self.prune()
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=self.root))
