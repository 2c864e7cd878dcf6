"""A MethodSpec: everything the engine, the CLI, the app, the pictures and the docs know about one method.

Why one record: before it, a method's parameters, checks, colour, explanation and needs lived in a dozen
places (the CLI's flags, the app's controls, the palette, the presets, the tuner) and drifted apart. Now a
method is one file in decoding/methods/ holding its drafter and its SPEC, plus one line in registry.py;
everything else reads the spec. A leaf module: it imports nothing of the project.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

BASELINE = "greedy"  # the method every other one is measured against and must reproduce exactly

# Resources a method can need, resolved by the builder (decoding/build.py) before the drafter is made:
# "draft_model" (a smaller model with the target's tokenizer), "heads" (Medusa / EAGLE heads folder),
# "adapter" (self-speculation adapter folder), "datastore" (a REST datastore folder, optional).
RESOURCES = ("draft_model", "heads", "adapter", "datastore")
# Pictures the step view can draw, chosen by the structure a method's trace records (viz reads these).
PICTURES = ("mask", "tree", "window", "pool", "trajectory", "retrieval", "draft_cost", "heads")
# What the app hands a method beyond its controls, declared by the spec (capabilities) and never inferred from
# a parameter's name; each names the parameter that receives it, which the method must declare:
# "reference_texts": the reference box's texts, tokenised (prompt lookup's reference lookup);
# "datastore": the page's retrieval source (a datastore folder, or None for the suffix cache);
# "session_history": this session's earlier runs (a suffix-cache History), never the process's;
# "typical_acceptance": the page's typical-acceptance switch ("exact" or Medusa's "typical", sampling only);
# "tree_shape": the page's chain / tree widths / budget radio picks the shape (the "widths" knob is the tree).
CAPABILITIES = {"reference_texts": "reference", "datastore": "datastore", "session_history": "history",
                "typical_acceptance": "acceptance", "tree_shape": "tree"}


@dataclass(frozen=True)
class PilotKit:
    """What decoding/tuning/tune.py lends a method's tuner: a method's file may not import the API (decoding.api
    builds methods through the registry, so the import would close a circle).
    run: decoding.run; make_drafter: (method, **params) -> a drafter without a model; time_pilots: every
    (method, params) timed on every pilot prompt (decoding.tuning.tune.time_pilots); pilots: one prompt or a list of
    texts -> the list of pilot prompts; specs: the registry's specs, by name."""
    run: Callable[..., Any]
    make_drafter: Callable[..., Any]
    time_pilots: Callable[..., dict]
    pilots: Callable[[Any], list]
    specs: dict


@dataclass(frozen=True)
class Tuner:
    """How a method's shape is tuned (decoding/tuning/tune.py drives it; the strategy lives with the method).
    run: (PilotKit, model, tokenizer, prompts, *, method, pilot_tokens, reps, draft, heads, draft_tokenizer,
      **fixed) -> {"params", "label", "result"[, "detail"]}.
    chooses: the parameters it picks (a user's value for one of them contradicts --auto); what: their name in
    words; fixed: the tuner options a user's other values fix (a given heads confidence is the only cut tried);
    pilot_runs: (pilot prompts, reps) -> pilot decodes one tune makes (a shared server counts them first);
    reps: repetitions the app uses; measured: (the tuner's result) -> one sentence of what it measured."""
    run: Callable[..., dict]
    chooses: tuple[str, ...]
    what: str
    pilot_runs: Callable[[int, int], int]
    fixed: Callable[[dict], dict] = lambda params: {}
    reps: int = 1
    measured: Callable[[dict], str] = lambda result: ""


def knob(default: Any = None, *, label: str = "", help: str = "", cli: str | None = None, lo: float | None = None,
         hi: float | None = None, choices: tuple | None = None, ui: bool = False, step: float | None = None,
         internal: bool = False, negate: bool = False, kind: str | None = None, shared: bool = False,
         page_field: str | None = None, page_range: str | None = None) -> Any:
    """A method parameter: a dataclass field whose metadata is its one description.
    cli: its flag ("--window"); several methods may share a flag (--budget), each mapping it to its own field.
    lo / hi: the accepted range (integers when the default is an int); choices: the accepted values.
    ui: the app shows it as a control under the method; internal: filled by the builder, never by a user.
    negate: a boolean flag that turns the field off (--no-prompt-ngrams sets prompt_ngrams False).
    kind: how a value is read from text when the type alone does not say ("widths": "3,2,1" -> [3, 2, 1],
    "path": a file or folder resolved later (heads, adapter), "file": an existing file, "folder": an existing
    folder, "texts": a list of texts (the CLI reads each from a UTF-8 file), "model": a model the CLI loads, "store": on/off
    or a store object the API passes, checked by the method's own check).
    shared: the name means the same thing in every method that declares it (budget, heads, adaptive): the CLI
    and the app may show one control for it. A name two methods use must be declared shared by both, or the
    registry refuses to load (a new method's `tree` must not silently become speculative's tree).
    page_field: the app's page field holding it, where one older than the specs has another name (speculative's
    tree is the page's "widths"); page_range: the app's range for it (appkit/public/limits.py) where that is kept
    under another name. Declared here, so the app maps no parameter name by hand."""
    meta = {"label": label, "help": help, "cli": cli, "lo": lo, "hi": hi, "choices": choices, "ui": ui,
            "step": step, "internal": internal, "negate": negate, "kind": kind, "shared": shared,
            "page_field": page_field, "page_range": page_range}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Knob:
    """One parameter as the CLI and the app see it (dataclass field + metadata, flattened)."""
    name: str
    default: Any
    label: str
    help: str
    cli: str | None
    lo: float | None
    hi: float | None
    choices: tuple | None
    ui: bool
    step: float | None
    internal: bool
    negate: bool
    kind: str | None
    shared: bool = False
    page_field: str | None = None
    page_range: str | None = None


@dataclass(frozen=True)
class MethodSpec:
    """One method, declared next to its drafter.
    params: the parameters dataclass (fields made with knob()); the drafter is built from its values.
    needs: RESOURCES the builder must resolve before the drafter is made (a shipped default where one fits).
    prepare: (params dict, model, tokenizer) -> params dict: what only the model can settle (load a draft,
      pick the shipped heads, check a datastore against the tokenizer); None = nothing to settle.
    check: (params dict) -> None: raises ValueError on a combination the ranges cannot express.
    check_sampling: (params dict, Sampling) -> None: raises ValueError on a value the sampling settings rule
      out (typical acceptance at temperature 0); the CLI runs it before a model loads.
    check_run: (drafter, prompt tokens, max new tokens) -> None: raises ValueError when a run that long does
      not fit what the drafter brings (a draft model's own positions); decoding.run calls it after the
      target's own check.
    capabilities: what the app hands the method beyond its controls (CAPABILITIES: reference texts, the
      retrieval source, the session's history, the typical-acceptance switch, the tree-shape radio).
    tuner: the Tuner decoding/tuning/tune.py searches this method's shape with, declared with the method (None = not
      tuned).
    presets: shipped shapes by place ("cpu_embedded", "cpu_default", "teaching").
    cli_preset: `generate` runs the device's preset (decoding/tuning/device_presets.py lookup) when none of the preset's
      parameters is given: for a method whose default shape loses to greedy on some devices (lookahead's
      paper shape on a CPU).
    colour / label / explain / pictures / paper: what the page, the pictures and the docs show.
    words: (a trace's config) -> the settings in plain words for report headers ("lookahead · W 5 · N 4 ·
      G 5"); the config comes from a trace file, so it reads it defensively (viz falls back to the name).
    origins: the trace origin labels this method introduces (what its accepted tokens and tree nodes carry),
      each with its colour and legend words: {"recycled": ("#8c6bb1", "recycled successor")}; the palette adds
      them to the shared ones ("target", "draft", "candidate", ...), so a new origin is never grey or unnamed.
    query_tokens: (parameter values, defaults filled) -> the most query tokens one step runs: the app holds a
      step to its budget with it (public mode: 128); None = the app's own formulas for the older methods.
    examples: parameter sets the conformance test (tests/test_every_method.py) runs the method with on tiny
      models: at least one, small enough to run in a second; {} runs the defaults.
    learns: its drafts depend on what observe() hands it (the target's predictions, logits or hidden rows, the
      accepted path), as a window, a pool, a table of successors or a draft cache does; False for a method
      whose drafts come from the context alone (greedy, prompt lookup). The conformance test runs the method
      with observe() skipped and expects other drafts: a drafter that forgets to learn is caught.
    no_acceptance: what the CLI says after a run whose drafts the target (almost) never accepted: why this
      method's drafts miss and what to try, one clause ("" = the generic line, decoding/cli/main.py)."""
    name: str
    drafter: type
    params: type
    label: str
    colour: str
    summary: str
    explain: str
    paper: str = ""
    needs: tuple[str, ...] = ()
    prepare: Callable[[dict, Any, Any], dict] | None = None
    check: Callable[[dict], None] | None = None
    check_sampling: Callable[[dict, Any], None] | None = None
    check_run: Callable[[Any, int, int], None] | None = None
    capabilities: tuple[str, ...] = ()
    tuner: Tuner | None = None
    presets: dict[str, dict] = field(default_factory=dict)
    cli_preset: bool = False
    pictures: tuple[str, ...] = ("mask",)
    exact_greedy: bool = True
    words: Callable[[dict], str] | None = None
    origins: dict[str, tuple[str, str]] = field(default_factory=dict)
    examples: tuple[dict, ...] = ({},)
    query_tokens: Callable[[dict], int] | None = None
    learns: bool = True
    no_acceptance: str = ""

    def knobs(self, *, user: bool = True) -> list[Knob]:
        """The parameters in declaration order; user=True leaves out the internal ones the builder fills."""
        out = []
        for f in dataclasses.fields(self.params):
            m = f.metadata
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            k = Knob(f.name, default, m.get("label") or f.name.replace("_", " "), m.get("help", ""), m.get("cli"),
                     m.get("lo"), m.get("hi"), m.get("choices"), bool(m.get("ui")), m.get("step"),
                     bool(m.get("internal")), bool(m.get("negate")), m.get("kind"), bool(m.get("shared")),
                     m.get("page_field"), m.get("page_range"))
            if not (user and k.internal):
                out.append(k)
        return out

    def param_names(self) -> tuple[str, ...]:
        """Every keyword the drafter is built from (user and internal), as make_drafter accepts them."""
        return tuple(f.name for f in dataclasses.fields(self.params))

    def can(self, capability: str) -> bool:
        """It declares `capability` (CAPABILITIES): the app hands it that input."""
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}; one of {', '.join(CAPABILITIES)}")
        return capability in self.capabilities

    def defaults(self) -> dict:
        return {k.name: k.default for k in self.knobs(user=False)}

    def check_values(self, values: dict) -> None:
        """Range, choice and on/off checks of the given (not None) values, with the CLI's sentence, then
        check(). The builder runs it for every caller (API, CLI, app, custom_generate): a value the CLI
        refuses is refused everywhere with the same sentence."""
        for k in self.knobs(user=False):
            v = values.get(k.name)
            if v is None:
                continue
            if k.choices is not None and v not in k.choices:
                raise ValueError(f"{k.name.replace('_', '-')} must be one of {', '.join(map(str, k.choices))}, got {v!r}")
            if isinstance(k.default, bool) and k.kind != "store" and v not in (True, False):  # 0 / 1 pass
                raise ValueError(f"{k.name.replace('_', '-')} is on or off (True or False), got {v!r}")
            if k.lo is not None and k.hi is not None:
                integer = isinstance(k.lo, int) and isinstance(k.hi, int)
                number = (isinstance(v, int) if integer else isinstance(v, (int, float))) and not isinstance(v, bool)
                if not (number and k.lo <= v <= k.hi):
                    what = "an integer" if integer else "a number"
                    raise ValueError(f"{k.name.replace('_', '-')} must be {what} in [{k.lo}, {k.hi}], got {v}")
        if self.check is not None:
            self.check(values)
