"""The one place a trace's values become page text: HTML text and attributes, SVG, <title>, style, the
data in a <script>, and the strings Plotly draws.

Why one module: a trace is data from elsewhere (an upload, a file on disk), and any field may hold a string
where a number belongs: kv_len = '</title><img src=x onerror=alert(1)>' was written into the mask's
<title> and ran. The loader refuses such traces, but a Trace built in Python never meets the loader, so
every writer escapes here too, numbers included. No viz import: palette.py and common.py both use it.
"""
from __future__ import annotations

import functools
import html
import json
import math
import re

_COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}|rgba?\(\s*[0-9.]+%?\s*(,\s*[0-9.]+%?\s*){2,3}\)|[a-zA-Z]{3,20}")


def esc(value: object) -> str:
    """Any value as HTML/SVG text or a quoted attribute value: & < > " ' escaped. Also for Plotly text:
    Plotly reads <b>, <br>, <a href> inside its strings and decodes &amp; &lt; &gt; and numeric entities
    (not &quot;), so the double quote is written as &#34;."""
    return html.escape(str(value), quote=True).replace("&quot;", "&#34;")


_MD = re.compile(r"([\\\[\]()!#]|^[-+*])")  # a link, an image, a heading, a list; emphasis is only formatting


_AUTOLINK = re.compile(r"(?i)(www)\.")


def one_line(value: object) -> str:
    """A value on one line: every run of whitespace, line breaks and control characters becomes one space (a
    newline in a value would start a heading, a list or a new paragraph outside its span)."""
    return " ".join("".join(c if c.isprintable() else " " for c in str(value)).split())


def md_text(value: object) -> str:
    """Any value as markdown text (the app's status lines), on one line: link and image punctuation
    backslashed, < > & as entities, and what a renderer would turn into a link by itself (https://, www.,
    an e-mail address) broken with an entity, so a crafted method or model name is shown as text, never as
    a link, an image, a tag or a heading."""
    s = _MD.sub(r"\\\1", one_line(value))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _AUTOLINK.sub(r"\1&#46;", s.replace(":", "&#58;").replace("@", "&#64;"))


def colour(value: object, default: str = "#cccccc") -> str:
    """A CSS colour for a style or fill: #hex, rgb()/rgba() or a plain colour name; anything else (a
    crafted 'red;background:url(...)') is replaced by the default."""
    s = str(value).strip()
    return s if _COLOUR.fullmatch(s) else default


def plot_value(value: object) -> object:
    """A data value for Plotly (x, y, customdata, category labels): real numbers pass; anything else becomes
    escaped text, because Plotly draws a string value as markup in tick and hover labels."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    return esc(value)


def number(value: object, default: float | None = None) -> float | None:
    """A finite number from a trace field, else `default` (a crafted trace puts strings where numbers go)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return value


def _finite(obj: object) -> object:
    """NaN and infinities as null: JSON.parse refuses them, and a page whose data does not parse is blank."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (list, tuple)):
        return [_finite(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    return obj


def safe_json(obj: object) -> str:
    """JSON that is safe inside <script>, inside an element's text and inside Gradio's `${value}` template
    (no <, >, &, $, backtick, line separators). A value JSON cannot hold is a ValueError, not a TypeError."""
    try:
        s = json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)
    except TypeError as e:
        raise ValueError(f"the trace holds a value that is not plain data ({e})") from None
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
        .replace("$", "\\u0024").replace("`", "\\u0060").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def drawn(fn):
    """For every public drawing function: a trace field of the wrong type or shape (a crafted or corrupt
    trace) ends in one ValueError sentence, never a TypeError or KeyError from deep inside a picture."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError) as e:
            raise ValueError(f"the trace cannot be drawn: a field has the wrong type or shape "
                             f"({type(e).__name__}: {e})") from e
    return wrapper
