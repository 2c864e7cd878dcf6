"""plotly.js for pages that open offline: the bundle inlined, its map-tile and licence URLs defused.

Why its own module: the report (viz/summaries/report.py) and the step view's head (viz/steps/stepper.py head_html) both
inline it, and the report imports the stepper; with the bundle here neither has to import the other back.
"""
from __future__ import annotations

import re
from functools import lru_cache

from plotly.offline import get_plotlyjs

URL = re.compile(r"https?://(?!www\.w3\.org/)")


@lru_cache(maxsize=1)
def offline_plotlyjs() -> str:
    """plotly.js with every non-namespace http(s):// string defused ("offline:"), and no </script>."""
    return URL.sub("offline:", get_plotlyjs()).replace("</script", "<\\/script")
