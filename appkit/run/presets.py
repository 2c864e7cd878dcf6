"""Per-device presets: the lookahead W/N/G and speculative shape the autotuners pick for a (model, device),
tuned once and cached on disk (never in the repo).

Why: the paper's GPU settings lose to greedy on a CPU (a wide step costs several 1-token steps there), and
a teaching demo must not start with a slowdown. The autotuners measure this device; the embedded model on
a CPU ships the best rows measured on the 2-core dev box with the v2 models (bench/results/cpu-embedded-
{code,chat}.md: lookahead W1 N3 G2 at 1.66x / 1.69x HF greedy, speculative staged tree 2,1,1,1,1 at
1.03x / 1.14x), so the first Run needs no tuning.

The tuners (decoding/tuning/tune.py, one per method, the CLI's --auto too) are imported here only.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

from decoding.models.fetch import FOLDER
from decoding.models import DEFAULT_MODEL, EMBEDDED_TARGET
# The shipped rows (measured on the dev box, with the reasons) and the lookup live in decoding/tuning/device_presets.py: the
# CLI's lookahead without W/N/G runs the same preset as the page.
from decoding.tuning.device_presets import SHIPPED_CPU, SHIPPED_CPU_DEFAULT, device_key, is_default, lookup  # noqa: F401

from .method_fields import has_shape, is_baseline, spec

# The code examples the tuners pilot on (the embedded models know the Python standard library).
PILOTS = ["class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):",
          "import os\n\n\ndef list_python_files(root):\n    \"\"\"Return every .py file under root.\"\"\""]
_lock = threading.Lock()


def pilots(tok) -> list[str]:
    """What the tuners pilot on: chat requests (chat template applied) for a chat model, else code."""
    if getattr(tok, "chat_template", None):
        from ..page.examples import CHAT
        return [tok.apply_chat_template([{"role": "user", "content": r}], add_generation_prompt=True, tokenize=False)
                for r in CHAT[:2]]
    return PILOTS


def cache_dir() -> Path:
    """$DECODESCOPE_CACHE, else ~/.cache/decodescope (else the system temp dir if home is read-only)."""
    env = os.environ.get("DECODESCOPE_CACHE")
    for d in ([Path(env)] if env else []) + [Path.home() / ".cache" / "decodescope",
                                             Path(tempfile.gettempdir()) / "decodescope"]:
        try:
            d.mkdir(parents=True, exist_ok=True)
            return d
        except OSError:
            continue
    raise OSError("no writable cache folder for DecodeScope")


def _path() -> Path:
    return cache_dir() / "presets.json"


def _read() -> dict:
    try:
        return json.loads(_path().read_text())
    except (OSError, ValueError):
        return {}


def cached(model_name: str, model, method: str) -> dict | None:
    """The preset for this (model, device) and method if known: tuned before, or shipped."""
    found = lookup(model_name, model, method, _path())
    if found is not None:
        return found
    from decoding.tuning.tune import tuner_of
    if tuner_of(method) is None and not is_baseline(method):  # nothing to tune (prompt lookup, retrieval, ...)
        return {"params": dict(SHIPPED_CPU.get(method, {})), "source": "the method's defaults: it has no tuner"}
    return None


class _Unloaded:
    """What the preset lookup reads of a model, for one not loaded yet: its config's shape, on a CPU in fp32
    (the device and dtype "auto" pick on a machine without CUDA), with the CPU kernel's fp32 default."""

    def __init__(self, config: dict):
        self.config = config

    def parameters(self):
        import torch
        yield torch.empty(0)


def before_load(model_name: str, methods) -> dict[str, dict]:
    """{method: params} the first auto run of each method will use for `model_name`, found before the model is
    loaded, by the very lookup the run makes (cached() on the model's config shape, on a CPU): what the page's
    fields show on first load, so they are what the first Run runs. The default model's shape is known before
    its fetch ends (DEFAULT_SHAPE); a method with no known preset is left out (the first run tunes it).
    {} where the run would load on a GPU (device "auto" with CUDA here): that preset is tuned on the first run."""
    import torch
    from decoding.tuning.device_presets import DEFAULT_SHAPE, folder_shape
    if torch.cuda.is_available():
        return {}
    config = dict(DEFAULT_SHAPE) if is_default(model_name) else folder_shape(model_name)
    if config is None:
        from decoding.models import EMBEDDED_TARGET
        from decoding.tuning.device_presets import is_embedded
        config = folder_shape(EMBEDDED_TARGET) if is_embedded(model_name) else None
    if config is None:  # a hub id not in the cache: its shape is known once it loads
        return {}
    model = _Unloaded(config)
    out = {}
    for m in methods:
        if is_baseline(m):
            continue
        found = cached(model_name, model, m)
        if found is not None:
            out[m] = dict(found["params"])
    return out


def tune(model_name: str, model, tok, method: str, draft=None, on_step=None, heads: str | None = None,
         save: bool = True, pause=None) -> dict:
    """Run the method's autotuner now (tens of seconds on a CPU), cache and return {"params", "source"}.
    heads: the medusa / eagle heads folder the budget is tuned with (default: the shipped heads); save=False:
    return it only (a public Space keeps a visitor's tuning in that visitor's session); pause: a context each
    pilot run is held in (a public Space's turn on the model, so other visitors run between pilot runs)."""
    from decoding.models import ASSETS
    from decoding.tuning.tune import tune as run_tuner, tuner_of

    measured = ""
    if tuner_of(method) is not None:  # the same tuner as the CLI's --auto (decoding/tuning/tune.py)
        tuner = tuner_of(method)
        tuned = run_tuner(method, model, tok, pilots(tok), pilot_tokens=PILOT_TOKENS, reps=tuner.reps,
                          draft=draft, heads=heads or str(ASSETS / "heads" / method),
                          **({"pause": pause} if pause is not None else {}))
        params, res = tuned["params"], tuned["result"]
        measured = tuner.measured(res)
    else:
        params = dict(SHIPPED_CPU.get(method, {}))  # no tuner (prompt lookup, retrieval, self-speculative): its defaults
    if not save:
        return {"params": params, "source": "tuned in this session", "measured": measured}
    with _lock:
        stored = _read()
        stored.setdefault(f"{model_name}|{device_key(model)}", {})[method] = params
        _path().write_text(json.dumps(stored, indent=1))
    return {"params": params, "source": "tuned on this device just now", "measured": measured}


def tune_work(tok, method: str) -> int:
    """Tokens tuning `method` processes (pilot prompt + pilot tokens, per pilot run): a Tune's share of the
    work budget, like a race's runs."""
    from decoding.tuning.tune import pilot_runs, tuner_of
    t = tuner_of(method)
    if t is None:
        return 0
    prompts = pilots(tok)
    per_run = PILOT_TOKENS + max(len(tok(p)["input_ids"]) for p in prompts)
    return pilot_runs(method, len(prompts), t.reps) * per_run


def resolve(model_name: str, model, tok, method: str, draft=None, heads: str | None = None) -> dict:
    """The preset: cached or shipped, else tuned now."""
    return cached(model_name, model, method) or tune(model_name, model, tok, method, draft, heads=heads)


def describe(method: str, params: dict) -> str:
    """'W1 N3 G1', 'tree 2,1,1', 'chain K4', 'max n-gram 3, copy 10', 'block 8', 'tree budget 8': a method's
    shape in the words of its parameters (read from its spec: its knobs and what it needs); a shape sized per
    step by the row-cost curve (adaptive) says so: 'tree budget 8, sized per step'."""
    words = _shape(method, params)
    return f"{words}, sized per step" if words and params.get("adaptive") else words


def _shape(method: str, params: dict) -> str:
    sp = spec(method)
    if sp is None or is_baseline(method):
        return ""
    names = {k.name for k in sp.knobs()}
    if {"window", "ngram", "guesses"} <= names:
        return f"W{params['window']} N{params['ngram']} G{params['guesses']}"
    if has_shape(sp):
        shape = f"tree {','.join(map(str, params['tree']))}" if "tree" in params else \
            f"chain K{params.get('draft_tokens', 4)}"
        return ("staged " if params.get("staged") else "") + shape
    if {"max_ngram", "num_tokens"} <= names:
        return f"max n-gram {params['max_ngram']}, copy {params['num_tokens']}"
    if "block" in names:
        return f"block {params['block']}"
    if "heads" in sp.needs:
        from decoding.methods.resources import heads_label
        return f"tree {heads_label(params)}"  # the words --auto prints
    if "adapter" in sp.needs:
        return f"depth {params.get('depth', 6)}" + (f", stop {params['stop']}" if "stop" in params else "")
    if "datastore" in names:
        return f"budget {params.get('budget', 64)}"
    return ", ".join(f"{k} {v}" for k, v in params.items())


PILOT_TOKENS = 32
