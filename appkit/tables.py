"""The small tables and summaries the Race and Sweep tabs show."""
from __future__ import annotations

import pandas as pd


def race_table(rows: list[dict]):
    return pd.DataFrame(rows)


def race_summary(rows: list[dict], greedy: bool) -> str:
    parts = []
    for r in rows[1:]:
        parts.append(f"**{r['method']}**: {r['speedup vs greedy']}× wall-clock, {r['compression']} tokens/step, "
                     f"<span class='ds-badge'>{r['exact']}</span>")
    head = "Exactness checked on the spot (greedy mode)." if greedy else "Sampling mode: exactness is distributional."
    return head + "\n\n" + "\n\n".join(parts)


def sweep_table(points: list[dict]):
    rows = [{"N": p["N"] if p["N"] > 1 else "greedy", "W": p["W"], "G": p["G"], "compression": round(p["compression"], 3),
             "FLOPs/step": f"{p['flops_per_step']:.3g}", "query tokens/step": round(p["query_per_step"], 1),
             "steps": p["steps"], "tokens/s": round(p["tokens_per_s"], 1)} for p in points]
    return pd.DataFrame(rows)
