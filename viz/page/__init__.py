"""Page assets: the browser side of the step view (views.js draws, stepper.js steps, export.js downloads,
side_by_side.js links two views), its CSS and the offline plotly.js bundle. No pictures are computed here.
"""
from __future__ import annotations

from pathlib import Path

# One script for the page, in load order: views before the stepper that calls them.
SCRIPT = "\n".join((Path(__file__).parent / f).read_text() for f in ("views.js", "export.js", "side_by_side.js",
                                                                    "stepper.js"))
