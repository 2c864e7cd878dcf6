"""The output text, one span per token, coloured by origin (or by step), with hover details.

Origins come straight from step.origins: "target" (the model's own next token), "candidate" (verified
lookahead n-gram), "prompt_lookup", "draft", "stage2". Spans carry data-step / data-pos so the step
controls can highlight the tokens of the current step and clicking a token selects its step.
"""
from __future__ import annotations

from .common import ORIGIN_COLORS, TraceLike, as_trace, esc
from .palette import STEP_COLORS, legend_html as swatches, origin_legend, token_origin


def _source(step) -> str | None:
    """Where a lookahead step's accepted candidate came from ("window", "prompt", "output")."""
    info, chosen = step.info or {}, (step.info or {}).get("chosen")
    src = info.get("candidate_sources") or []
    return src[chosen] if chosen is not None and chosen < len(src) else None


def data(trace: TraceLike) -> list[dict]:
    """Every prompt and output token in order with its step, absolute position and origin."""
    tr = as_trace(trace)
    out = [{"token": t, "text": tr.token_text(t), "step": None, "pos": i, "origin": "prompt", "k": None,
            "color_key": "prompt"} for i, t in enumerate(tr.prompt_ids)]
    pos = len(tr.prompt_ids)
    for s in tr.steps:
        src = _source(s)
        for k, (t, o) in enumerate(zip(s.accepted, s.origins)):
            out.append({"token": t, "text": tr.token_text(t), "step": s.index, "pos": pos, "origin": o, "k": k,
                        "color_key": token_origin(o, src)})
            pos += 1
    return out


def legend_html() -> str:
    """The origin colours of the text (the same swatches as every other view's legend)."""
    return swatches(origin_legend(), "text colour = who produced the token:")


def html(trace: TraceLike, mode: str = "origin", show_prompt: bool = True) -> str:
    """HTML fragment of the text; mode "origin" colours by origin, "step" alternates colours per step."""
    tr = as_trace(trace)
    spans = []
    for d in data(tr):
        if d["origin"] == "prompt" and not show_prompt:
            continue
        if mode == "step" and d["step"] is not None:
            color = STEP_COLORS[d["step"] % len(STEP_COLORS)]
        else:
            color = ORIGIN_COLORS.get(d["color_key"], "#eee")
        step = "" if d["step"] is None else d["step"]
        title = (f"prompt token, position {d['pos']}" if d["step"] is None else
                 f"step {d['step']}, position {d['pos']}, origin {d['origin']}, token id {d['token']}")
        text = d["text"].replace("\n", "\u21b5\n")
        spans.append(f"<span class='ds-tok' data-step='{step}' data-pos='{d['pos']}' data-origin='{esc(d['origin'])}'"
                     f" style='background:{color}' title='{esc(title)}'>{esc(text)}</span>")
    return f"<div class='ds-text' data-mode='{esc(mode)}'>{''.join(spans)}</div>"
