"""Re-record the traces the app's Replay tab ships (assets/traces/) on the default model.

    python scripts/record_traces.py [--only STEM] [--max-new-tokens 80]

The recordings (requests, methods, settings) are listed in appkit/run/record_traces.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from appkit.run.record_traces import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
