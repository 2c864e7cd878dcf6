"""Where the v3 corpus comes from: pinned PyPI wheels, their licences, and which of their files are code.

Wheels, not sdists: `pip download --no-deps --only-binary :all:` runs no build step (an sdist would need its
build backend), and a wheel's METADATA states the licence (PEP 639 License-Expression, else the trove
classifiers, else the License field). Only files whose package licence is MIT / BSD / Apache-2.0 / PSF are
used; everything else is recorded as rejected in the manifest, so every corpus file is traceable to one
package, version and licence.
"""
from __future__ import annotations

import email.parser
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ALLOWED = {"MIT", "MIT-0", "BSD-2-Clause", "BSD-3-Clause", "BSD", "Apache-2.0", "PSF-2.0", "Python-2.0"}
CLASSIFIERS = {"MIT License": "MIT", "BSD License": "BSD", "Apache Software License": "Apache-2.0",
               "Python Software Foundation License": "PSF-2.0"}
# Folders whose files are copies of someone else's code (vendored) or not source at all.
SKIP_DIRS = {"_vendor", "vendor", "vendored", "_vendored", "extern", "_extern", "externals", "third_party",
             "thirdparty", "_thirdparty", "site-packages", "__pycache__", "node_modules"}
FIXTURE_DIRS = {"fixtures", "fixture", "testdata", "test_data", "data", "baseline", "baselines"}
SKIP_NAMES = {"six.py", "_six.py", "versioneer.py", "_version.py", "version.py"}
GENERATED = re.compile(r"(auto-?generated|generated (by|from|with|using)|code generated|do not edit|"
                       r"this file (is|was) generated|automatically generated|@generated)", re.I)


@dataclass
class Package:
    name: str
    version: str
    heldout: bool


def read_packages(path: Path) -> list[Package]:
    """`name==version` per line, `heldout` after it marks an evaluation-only package; `#` comments."""
    out = []
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            name, _, version = words[0].partition("==")
            out.append(Package(name, version, "heldout" in words[1:]))
    return out


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def find_wheel(wheels: Path, pkg: Package) -> Path | None:
    for w in sorted(wheels.glob("*.whl")):
        dist, version = w.name.split("-")[:2]
        if norm(dist) == norm(pkg.name) and (not pkg.version or version == pkg.version):
            return w
    return None


def download(pkg: Package, wheels: Path, log=print) -> Path | None:
    """The package's wheel from the registry (cached in `wheels`); None when it has no wheel for this Python."""
    wheels.mkdir(parents=True, exist_ok=True)
    have = find_wheel(wheels, pkg)
    if have:
        return have
    spec = f"{pkg.name}=={pkg.version}" if pkg.version else pkg.name
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--disable-pip-version-check", "-q", "-d", str(wheels), spec], capture_output=True, text=True)
    if r.returncode:
        log(f"[download] {spec}: no wheel ({r.stderr.strip().splitlines()[-1:]})")
    return find_wheel(wheels, pkg)


def spdx_ok(expr: str) -> bool:
    """An SPDX expression is accepted when every AND term has an allowed alternative (OR)."""
    expr = expr.replace("(", " ").replace(")", " ")
    for term in re.split(r"\s+AND\s+", expr.strip(), flags=re.I):
        ids = [t.strip() for t in re.split(r"\s+OR\s+", term, flags=re.I)]
        if not any(i.split(" WITH ")[0] in ALLOWED for i in ids):
            return False
    return True


def wheel_licence(whl: Path) -> dict:
    """{name, version, licence, source, ok, licence_files} from the wheel's METADATA."""
    with zipfile.ZipFile(whl) as z:
        meta_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode("utf-8", "replace"), headersonly=True)
    files = meta.get_all("License-File") or []
    base = {"name": meta["Name"], "version": meta["Version"], "licence_files": files}
    if meta.get("License-Expression"):
        expr = meta["License-Expression"].strip()
        return {**base, "licence": expr, "source": "License-Expression", "ok": spdx_ok(expr)}
    trove = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    trove = [c for c in trove if c != "OSI Approved"]
    if trove:
        ids = [CLASSIFIERS.get(c, c) for c in trove]
        return {**base, "licence": " / ".join(ids), "source": "classifier",
                "ok": all(i in ALLOWED for i in ids)}
    field = (meta.get("License") or "").strip()
    first = field.splitlines()[0][:80] if field else ""
    guess = next((i for pat, i in ((r"\bMIT\b", "MIT"), (r"\bApache\b", "Apache-2.0"), (r"\bBSD\b", "BSD"))
                  if re.search(pat, first)), None)
    return {**base, "licence": guess or first or "unknown", "source": "License field", "ok": guess is not None}


def drop_reason(path: str, text: str | None) -> str | None:
    """Why a wheel member is not corpus code (None: keep it)."""
    parts = path.split("/")
    if any(p in SKIP_DIRS or p.endswith((".dist-info", ".data")) for p in parts[:-1]):
        return "vendored"
    if parts[-1] in SKIP_NAMES:
        return "vendored"
    if any(p in FIXTURE_DIRS for p in parts[:-1]):
        return "fixture"
    if text is None:
        return "not utf-8"
    if len(text.strip()) < 64:
        return "empty"
    if len(text) > 400_000:
        return "large"
    if GENERATED.search("\n".join(text[:3000].splitlines()[:20])):  # a generator's header, not a docstring
        return "generated"
    lines = text.splitlines() or [""]
    if max(map(len, lines)) > 1000 or len(text) / len(lines) > 100:
        return "minified"
    if sum(c.isdigit() or c in ",x" for c in text) / len(text) > 0.25:
        return "data"
    return None


def wheel_files(whl: Path):
    """(path, text or None) of every .py member of the wheel, sorted by path."""
    with zipfile.ZipFile(whl) as z:
        for name in sorted(n for n in z.namelist() if n.endswith(".py")):
            raw = z.read(name)
            try:
                text = raw.decode("utf-8").replace("\r\n", "\n")
            except UnicodeDecodeError:
                text = None
            yield name, text
