"""One palette for every picture: one colour per meaning, and the legends that name them.

Why one module: a colour must mean the same thing in the text, the window, the pool, the tree, the mask
and every run chart. Origins (who produced an accepted token) and query roles share hues (a draft node is
orange whether it was accepted or not); the window's ages use a separate yellow-brown scale that never
collides with an origin; methods get one fixed colour each, chosen by name, never by position in a list.
The step script (stepper.js) receives this palette as JSON, so it has no colours of its own.
"""
from __future__ import annotations

import math

from decoding.methods.registry import SPECS  # the methods' declared colours, labels and pictures (data only)

from .escape import colour, esc

# Origin of an accepted token (step.origins), text n-grams split into their own colour.
ORIGIN_COLORS = {
    "prompt": "#e0e0e0",          # the prompt (given, not generated)
    "target": "#9ecae1",          # the target model's own next token (plain decoding, bonus token)
    "candidate": "#a1d99b",       # a verified lookahead-window n-gram (the Jacobi trajectory)
    "text_ngram": "#f4a6c6",      # a verified n-gram copied from the text (prompt/output, or prompt lookup)
    "prompt_lookup": "#f4a6c6",   # prompt lookup copies from the text: the same meaning as text_ngram
    "draft": "#f16913",           # a draft-model token the target accepted
    "stage2": "#b4a7d6",          # a stage-2 (n-gram table) draft token the target accepted
    "reference": "#5fc7c7",       # copied from a reference text the user supplied (reference lookup)
    "jacobi": "#74c476",          # a Jacobi-decoding guess the target confirmed (plain Jacobi, no pool)
    "eagle draft": "#c49a6c",     # an EAGLE head's draft token the target accepted (brown: red means "rejected")
    "datastore": "#a1a99b",       # retrieval: copied from the datastore (REST)
    "suffix": "#e7b5e9",          # retrieval: copied from the suffix cache (this prompt, this run, earlier runs)
    # Medusa head k's token (k tokens after x0): one teal, darker for the nearer heads
    # (light enough for the dark token text: the darkest is #26a69a)
    **{f"head {k}": c for k, c in enumerate(("#26a69a", "#4db6ac", "#67c2b8", "#80cbc4", "#99d5ce",
                                             "#b2dfdb", "#c5e6e2", "#dff2f0"), start=1)},
}
ORIGIN_LABELS = {
    "prompt": "prompt", "target": "model's own next token", "candidate": "lookahead window n-gram",
    "text_ngram": "text n-gram (prompt/output)", "draft": "draft model token", "stage2": "stage-2 n-gram token",
    "reference": "reference text copy", "jacobi": "Jacobi guess",
    "head 1": "Medusa head k (k after x0; darker = nearer)", "eagle draft": "EAGLE head token",
    "datastore": "retrieved from the datastore (REST)",
    "suffix": "retrieved from the suffix cache (this prompt, this run, earlier runs)",
}
# Origins a method introduces are declared in its spec (MethodSpec.origins: colour, legend words), so a new
# method's tokens are never grey or named by a raw label.
DECLARED_ORIGINS = {o: v for spec in SPECS.values() for o, v in spec.origins.items()}
ORIGIN_COLORS.update({o: c for o, (c, _) in DECLARED_ORIGINS.items()})
ORIGIN_LABELS.update({o: words for o, (_, words) in DECLARED_ORIGINS.items()})
# Roles of query tokens inside one step (what the mask and the tree label).
ROLE_COLORS = {
    "prompt": ORIGIN_COLORS["prompt"], "x0": "#6baed6", "window": "#dcbc32", "candidate": ORIGIN_COLORS["candidate"],
    "draft": ORIGIN_COLORS["draft"], "stage2": ORIGIN_COLORS["stage2"], "target": "#6baed6",
    "jacobi": ORIGIN_COLORS["jacobi"],
}
ROLE_LABELS = {"x0": "x0: last accepted token", "window": "window guess", "candidate": "pool candidate",
               "draft": "draft node", "stage2": "stage-2 node", "prompt": "prompt", "jacobi": "Jacobi guess"}
# The Jacobi window's ages: a gold sequential scale (index 0 = produced by this step, the newest).
AGE_COLORS = ["#b8960b", "#dcbc32", "#eed775", "#f7e9a8"]
INIT_COLOR = "#ffffff"            # warm-up's random initial guesses: white, dashed outline
# States of a checked token (pool rows, tree nodes): matched, first rejection, not checked, pruned.
STATE_COLORS = {"matched": "#2ca25f", "rejected": "#de2d26", "unchecked": "#f0f0f0", "pruned": "#bdbdbd"}
# Trajectory cells (viz/steps/trajectory.py): a guess not equal to its final token, the iteration where a position
# converged for good (equals its final token from then on), the iterations after it, a fresh initial guess.
TRAJECTORY_COLORS = {"wrong": "#f0f0f0", "converges": "#31a354", "converged": "#c7e9c0", "fresh": "#ffffff"}
MASK_COLORS = ["#f7f7f7", "#2171b5", "#9ecae1"]  # masked, may attend, cache column
SELECT_COLOR = "#e7298a"          # the selected token's outline in every view
CURRENT_COLOR = "#08519c"         # the current step's marker on run charts (blue: red means "rejected")
# One colour per method, by name (race, sweep, latency, FLOPs, step profile): each method's spec declares it
# (decoding/methods/<method>.py, a dark shade of the origin it is known for). Variants of one method that a
# run chart tells apart (the speculative chain, tree and staged runs, named by their trace config) keep a
# shade of their own here.
VARIANT_COLORS = {"speculative_chain": "#d94801", "speculative_tree": "#a63603", "speculative_staged": "#6a51a3"}
METHOD_COLORS = {**{name: spec.colour for name, spec in SPECS.items()}, **VARIANT_COLORS}
METHOD_LABELS = {name: spec.label for name, spec in SPECS.items()}
# A method the registry does not know (a trace from elsewhere, an older or a newer version): the pictures its
# data can show are chosen from the data, with the tree box shown as it always was for methods not drafting
# by a window.
UNKNOWN_PICTURES = ("mask", "tree")
EXTRA_COLORS = ["#66a61e", "#a6761d", "#1f78b4", "#17becf", "#999999"]
STEP_COLORS = ["#fde0dd", "#deebf7", "#e5f5e0", "#fff7bc", "#efedf5", "#fee6ce"]  # text coloured by step
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


def exact_colours() -> list[str]:
    """Every colour a step view fills with, each once (lower-case "#rrggbb"): a GIF keeps exactly these in its
    palette, so "first mismatch" red stays that red and a reference copy does not turn into the model's blue."""
    groups = [ORIGIN_COLORS.values(), ROLE_COLORS.values(), AGE_COLORS, [INIT_COLOR], STATE_COLORS.values(),
              TRAJECTORY_COLORS.values(), MASK_COLORS, [SELECT_COLOR, CURRENT_COLOR], STEP_COLORS]
    out = [colour(c).lower() for g in groups for c in g]
    return [c for c in dict.fromkeys(out) if len(c) == 7 and c.startswith("#")]


def age_color(age: int) -> str:
    """Window cell made `age` steps ago (0 = by this step); old cells share the palest colour."""
    return AGE_COLORS[max(0, min(age, len(AGE_COLORS) - 1))]


def method_color(name: str) -> str:
    """The fixed colour of a method; unknown names hash to a stable extra colour (never list position)."""
    key = str(name).lower().replace(" ", "_").replace("-", "_")
    for m in sorted(METHOD_COLORS, key=len, reverse=True):
        if key == m or key.startswith(m):
            return METHOD_COLORS[m]
    return EXTRA_COLORS[sum(map(ord, key)) % len(EXTRA_COLORS)]


def method_label(name: str) -> str:
    """The method's display label from its spec; an unknown name is shown as given (callers escape it)."""
    return METHOD_LABELS.get(str(name), str(name))


def method_pictures(name: str) -> tuple[str, ...]:
    """The pictures a method's spec says it has ("window", "pool", "tree", "trajectory", "retrieval", ...)."""
    spec = SPECS.get(str(name))
    return tuple(spec.pictures) if spec is not None else UNKNOWN_PICTURES


COPY_KEY = {"prompt_lookup": "text_ngram"}  # origin label -> colour key: a looked-up copy is a text n-gram


def token_origin(origin: str, source: str | None = None) -> str:
    """A colour key for an accepted token: lookahead candidates from the text become "text_ngram"."""
    if origin == "candidate" and source in ("prompt", "output", "text"):
        return "text_ngram"
    if source == "reference" and (origin == "candidate" or origin in COPY_KEY):
        return "reference"
    return COPY_KEY.get(origin, origin)


def legend_html(items: list[tuple[str, str]], title: str = "") -> str:
    """A row of colour swatches with labels (HTML; used under every coloured view)."""
    sw = "".join(f"<span class='ds-sw'><i style='background:{esc(colour(c))}'></i>{esc(label)}</span>" for label, c in items)
    head = f"<b>{esc(title)}</b> " if title else ""
    return f"<div class='ds-legend'>{head}{sw}</div>"


def _origin_key(origin: str) -> str:
    """The legend entry an origin falls under: every Medusa head shares the "head 1" entry."""
    return "head 1" if origin.startswith("head ") else origin


def origin_legend(present: set[str] | None = None) -> list[tuple[str, str]]:
    """Origin swatches; with `present` (the origins a run has) only those, so greedy shows two, not ten."""
    keys = None if present is None else {_origin_key(o) for o in present}
    return [(label, ORIGIN_COLORS[k]) for k, label in ORIGIN_LABELS.items() if keys is None or k in keys]


def window_legend() -> list[tuple[str, str]]:
    return [("x0", ROLE_COLORS["x0"]), ("new guess (this step)", AGE_COLORS[0]), ("from t-1", AGE_COLORS[1]),
            ("from t-2", AGE_COLORS[2]), ("older", AGE_COLORS[3]), ("initial random guess", INIT_COLOR)]


def pool_legend() -> list[tuple[str, str]]:
    return [("matches the model: window n-gram", ORIGIN_COLORS["candidate"]),
            ("matches the model: text n-gram", ORIGIN_COLORS["text_ngram"]),
            ("matches the model: reference text", ORIGIN_COLORS["reference"]),
            ("first mismatch", STATE_COLORS["rejected"]), ("not checked", STATE_COLORS["unchecked"])]


def tree_legend(pruned: bool = False, origins: set[str] | None = None) -> list[tuple[str, str]]:
    """Tree swatches. The nodes are filled by their origin, so with `origins` (the tree nodes' origins in this
    run) the legend names exactly those colours: Medusa's teal heads, EAGLE's red, a draft model's orange."""
    nodes = [("draft node", ORIGIN_COLORS["draft"]), ("stage-2 node", ORIGIN_COLORS["stage2"])] if origins is None else \
        [(("draft node" if k == "draft" else "stage-2 node" if k == "stage2" else ORIGIN_LABELS.get(k, k)),
          ORIGIN_COLORS.get(k, "#ccc")) for k in dict.fromkeys(_origin_key(o) for o in sorted(origins))
         if k != "target"]
    # the root is filled as origin "target" (views.js), so its swatch is that colour
    items = [("x0 / target token", ORIGIN_COLORS["target"]), *nodes, ("accepted path", STATE_COLORS["matched"]),
             ("first rejected", STATE_COLORS["rejected"])]
    return items + ([("pruned (below cutoff)", STATE_COLORS["pruned"])] if pruned else [])


def trajectory_legend() -> list[tuple[str, str]]:
    return [("not yet its final token", TRAJECTORY_COLORS["wrong"]),
            ("converges here (final token from now on)", TRAJECTORY_COLORS["converges"]),
            ("converged earlier", TRAJECTORY_COLORS["converged"]),
            ("accepted this step (outlined)", STATE_COLORS["matched"])]


def mask_legend(roles: bool | set[str] = False) -> list[tuple[str, str]]:
    """Mask cells; with roles also the role strip along the rows and columns (the step view): True lists
    every role, a set (the roles a run has) only those."""
    cells = [("may attend", MASK_COLORS[1]), ("KV cache (whole prefix)", MASK_COLORS[2]), ("masked", MASK_COLORS[0])]
    shown = [r for r in ("x0", "window", "candidate", "draft", "stage2", "jacobi") if roles is True or
             (isinstance(roles, set) and r in roles)]
    return cells + [(f"role: {ROLE_LABELS[r]}", ROLE_COLORS[r]) for r in shown]


# the page's own accents (caption box, its border, the x0 cell's border): stepper_css.py's values, which the
# slide deck (export.js) must repeat; the browser code may hard-code greys only, so it reads these from here
PAGE_COLORS = {"caption": "#f3f7fb", "accent": "#3182bd", "x0": "#1f4e79"}


def for_js() -> dict:
    """Everything stepper.js colours with (so the browser and Python draw the same colours)."""
    return {"origin": ORIGIN_COLORS, "origin_labels": ORIGIN_LABELS, "role": ROLE_COLORS, "role_labels": ROLE_LABELS,
            "age": AGE_COLORS, "init": INIT_COLOR, "state": STATE_COLORS, "select": SELECT_COLOR, "mask": MASK_COLORS,
            "current": CURRENT_COLOR, "method": METHOD_COLORS, "method_labels": METHOD_LABELS, "extra": EXTRA_COLORS, "step": STEP_COLORS,
            "trajectory": TRAJECTORY_COLORS, "page": PAGE_COLORS}


def decade_ticks(lo: float, hi: float) -> dict:
    """Log-axis ticks that enclose the data: the range runs from the decade below the smallest value to the
    decade above the largest (no point sits below the lowest tick); over two decades or less the 2 and 5 of
    each decade are ticked too (a roofline spanning one decade gets 4 ticks, not 1). Labels are SI
    ("2G", "500M"): the one unit convention of every axis, hover and panel."""
    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 1.0, 10.0
    a, b = math.floor(math.log10(min(lo, hi))), math.ceil(math.log10(max(lo, hi)))
    b = max(b, a + 1)
    steps = (1, 2, 5) if b - a <= 2 else (1,)
    vals = [m * 10.0 ** e for e in range(a, b + 1) for m in steps if m * 10.0 ** e <= 10.0 ** b]
    return {"type": "log", "tickmode": "array", "tickvals": vals, "ticktext": [si(v) for v in vals],
            "range": [a, b], "minor": {"showgrid": False, "ticks": ""}}


_SI = {-12: "p", -9: "n", -6: "µ", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def si(v: float) -> str:
    """A number in SI style, as plotly's exponentformat="SI" writes it: 2e9 -> "2G", 5e-4 -> "500µ"; from
    0.001 to 1 a plain decimal (0.1 -> "0.1")."""
    if not (isinstance(v, (int, float)) and math.isfinite(v)) or v == 0:
        return "0" if v == 0 else str(v)
    if 1e-3 <= abs(v) < 1:  # "0.1", not "100m": a milli- prefix on a ratio (FLOP/byte) reads as a unit
        return f"{v:.3g}"
    e = max(-12, min(18, 3 * math.floor(math.log10(abs(v)) / 3)))
    m = v / 10.0 ** e
    return f"{m:.3g}{_SI[e]}"


def log_axis(values: list[float], **extra) -> dict:
    """A log axis over `values` labelled by decades only (every log axis in viz/ goes through here)."""
    pos = [v for v in values if v and v > 0 and math.isfinite(v)]
    return {**decade_ticks(min(pos) if pos else 1.0, max(pos) if pos else 10.0), **extra}
