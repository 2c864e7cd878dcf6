"""Do default races agree on the winner? The app's Race tab, pressed N times in a row, through its API.

Launches the app (the embedded models, the page's first example prompt, the default methods, 3 interleaved
repeats per race: exactly what a visitor's first "Race" press runs), calls /race N times, and writes one
line per race (winner, every method's median speed-up and min-max spread) plus whether they agree.

    python bench/methods/race_winner.py [--races 3] [--out bench/results/cpu-race-winner.md]
"""
from __future__ import annotations

import argparse
import platform
import re
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gradio_client import Client  # noqa: E402

import app as app_module  # noqa: E402
from appkit.race.race import REPEATS  # noqa: E402
from appkit.run.settings import FIELDS, Settings  # noqa: E402
from appkit.race.tabs import RACE_DEFAULT  # noqa: E402
from appkit.page.ui import EXAMPLES  # noqa: E402
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET  # noqa: E402
from decoding.methods.registry import BASELINE  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def page_default(demo, elem_id: str):
    """A control's value as the page first shows it (what a visitor's first press sends)."""
    return next(b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def race_once(client: Client, max_new: int) -> tuple[str, dict[str, tuple[float, str]]]:
    """(verdict, {method: (median speed-up, 'lo-hi' spread)}) of one default race. The verdict is
    "Winner: X" or "Too close to call: X and Y" (appkit.race.race.winner)."""
    s = Settings(target=EMBEDDED_TARGET, draft=EMBEDDED_DRAFT, prompt=EXAMPLES[0][0], max_new=max_new)
    _, md, table, *_ = client.predict(*[getattr(s, f) for f in FIELDS], list(RACE_DEFAULT), REPEATS, api_name="/race")
    rows = {r[table["headers"].index("method")]: r for r in table["data"]}
    col = table["headers"].index
    speeds = {m: (float(r[col("speedup vs greedy")]), str(r[col("speedup (min-max)")])) for m, r in rows.items()}
    verdict = re.search(r"Winner: \w+|Too close to call: [\w ]+", md).group(0)
    return verdict, speeds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--races", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu-race-winner.md"))
    a = ap.parse_args()
    demo = app_module.build_demo(public=False)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            **app_module.launch_kwargs())
    client = Client(url, verbose=False)
    max_new = int(page_default(demo, "ds-max-new"))
    lines, winners = [], []
    try:
        for k in range(a.races):
            t0 = time.perf_counter()
            w, speeds = race_once(client, max_new)
            winners.append(w)
            cells = ", ".join(f"{m} {v:.2f}x ({sp})" for m, (v, sp) in speeds.items() if m != BASELINE)
            lines.append(f"| {k + 1} | **{w}** | {cells} | {time.perf_counter() - t0:.0f} s |")
            print(lines[-1], flush=True)
    finally:
        demo.close()
    same = len(set(winners)) == 1
    text = "\n".join([
        f"# {a.races} default races in a row ({platform.machine()}, {platform.processor() or 'cpu'}, "
        f"torch threads as the app sets them)", "",
        f"Command: `python bench/methods/race_winner.py --races {a.races}`. Each race: greedy + {', '.join(RACE_DEFAULT)}, "
        f"{REPEATS} interleaved repeats, {max_new} new tokens, the page's first example prompt, the embedded "
        "models, auto presets.", "",
        "| race | verdict | median speed-up vs greedy (min-max over the repeats) | wall |", "|---|---|---|---|",
        *lines, "", f"Same verdict every time: **{'yes' if same else 'no'}** ({', '.join(winners)}).", ""])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text)
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
