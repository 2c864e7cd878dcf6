#!/usr/bin/env bash
# The manual (and scheduled, .github/workflows/latest-deps.yml) check against the newest versions that
# requirements*.txt allow: a fresh virtualenv installs them WITHOUT constraints.txt, the script prints
# every package whose version moved from the lock, then runs the README's test suite there. An upstream
# release that breaks us shows up here as a named report, not as a random red CI.
#   bash scripts/check_latest_deps.sh [pytest args...]   # e.g. -x -q tests/test_exactness.py
# Exit status: the suite's. The report goes to stdout and to latest-deps-report.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/latest
report=latest-deps-report.txt
python -m venv "$venv"
"$venv/bin/pip" install -q --upgrade -r requirements.txt -r requirements-dev.txt || {
  echo "install of the newest allowed versions failed" | tee "$report"; exit 1; }
{
  echo "# Newest allowed versions vs constraints.txt ($(date -u +%FT%TZ))"
  "$venv/bin/python" - <<'PY'
import re
from importlib.metadata import distributions
pins = {}
for line in open("constraints.txt"):
    m = re.match(r"([A-Za-z0-9_.-]+)==([^\s#]+)", line)
    if m:
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
now = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in distributions()}
moved = [(n, pins[n], now[n]) for n in sorted(pins) if n in now and now[n] != pins[n]]
for n, old, new in moved:
    print(f"moved: {n} {old} -> {new}")
print(f"{len(moved)} of {len(pins)} pinned packages moved" if moved else "no pinned package moved")
PY
} | tee "$report"
"$venv/bin/python" -m pytest -q "$@" 2>&1 | tee -a "$report" | tail -30
rc=${PIPESTATUS[0]}
echo "suite on the newest allowed versions: exit $rc (report: $report)"
exit "$rc"
