"""The output text, one span per token, coloured by origin (or by step), with hover details.

Origins come straight from step.origins: "target" (the model's own next token), "candidate" (verified
lookahead n-gram), "prompt_lookup", "draft", "stage2". Spans carry data-step / data-pos so the step
controls can highlight the tokens of the current step and clicking a token selects its step.
"""
from __future__ import annotations

from ..common import ORIGIN_COLORS, TraceLike, as_trace, drawn, esc
from ..palette import STEP_COLORS, legend_html as swatches, origin_legend, token_origin


def _source(step) -> str | None:
    """Where a lookahead step's accepted candidate came from ("window", "prompt", "output")."""
    info, chosen = step.info or {}, (step.info or {}).get("chosen")
    src = info.get("candidate_sources") or []
    return src[chosen] if isinstance(chosen, int) and 0 <= chosen < len(src) else None


def data(trace: TraceLike) -> list[dict]:
    """Every prompt and output token in order with its step, absolute position and origin."""
    tr = as_trace(trace)
    out = [{"token": t, "text": _text(tr, t), "step": None, "pos": i, "origin": "prompt", "k": None,
            "color_key": "prompt"} for i, t in enumerate(tr.prompt_ids)]
    pos = len(tr.prompt_ids)
    for s in tr.steps:
        src = _source(s)
        for k, (t, o) in enumerate(zip(s.accepted, s.origins)):
            out.append({"token": t, "text": _text(tr, t), "step": s.index, "pos": pos, "origin": o, "k": k,
                        "color_key": token_origin(o, src)})
            pos += 1
    return out


def _text(tr, t) -> str:
    """The token's own text (whitespace as it is); a crafted vocab's non-string value as its text."""
    return str(tr.vocab.get(str(t), f"<{t}>")) if isinstance(tr.vocab, dict) else f"<{t}>"


def _step_color(step: object, key: object) -> str:
    """A step's colour in "step" mode (by step number), else the origin's colour."""
    if isinstance(step, int) and not isinstance(step, bool):
        return STEP_COLORS[step % len(STEP_COLORS)]
    return ORIGIN_COLORS.get(key, "#eee") if isinstance(key, str) else "#eee"


def legend_html(trace: TraceLike | None = None) -> str:
    """The origin colours of the text (the same swatches as every other view's legend); with a trace, only
    the origins its tokens have (greedy: the prompt and the model's own tokens)."""
    present = None
    if trace is not None:
        present = {d["color_key"] for d in data(as_trace(trace)) if isinstance(d["color_key"], str)}
    return swatches(origin_legend(present), "text colour = who produced the token:")


@drawn
def html(trace: TraceLike, mode: str = "origin", show_prompt: bool = True) -> str:
    """HTML fragment of the text; mode "origin" colours by origin, "step" alternates colours per step."""
    tr = as_trace(trace)
    spans = []
    for d in data(tr):
        if d["origin"] == "prompt" and not show_prompt:
            continue
        key = d["color_key"] if isinstance(d["color_key"], str) else None
        color = _step_color(d["step"], key) if mode == "step" and d["step"] is not None else ORIGIN_COLORS.get(key, "#eee")
        step = "" if d["step"] is None else d["step"]
        title = (f"prompt token, position {d['pos']}" if d["step"] is None else
                 f"step {d['step']}, position {d['pos']}, origin {d['origin']}, token id {d['token']}")
        text = d["text"].replace("\n", "\u21b5\n")
        spans.append(f"<span class='ds-tok' data-step='{esc(step)}' data-pos='{esc(d['pos'])}' "
                     f"data-origin='{esc(d['origin'])}' style='background:{esc(color)}' title='{esc(title)}'>"
                     f"{esc(text)}</span>")
    return f"<div class='ds-text' data-mode='{esc(mode)}'>{''.join(spans)}</div>"
