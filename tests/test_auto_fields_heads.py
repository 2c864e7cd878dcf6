"""Auto fields show what runs for the methods that share controls (medusa, eagle: one heads tree budget).

Under "auto" the heads tree budget kept its default while medusa ran budget 4 with a cut and eagle budget 8
sized per step; "auto chose:" left both out, and "manual" then ran the shown default. The presets here are
written where the tuner writes them (the presets cache file) for a tiny model loaded through the app's cache.
"""
from __future__ import annotations

import json
import os

from conftest import save_tiny_dir
from appkit.models.model_cache import ModelCache
from appkit.page import autofields
from appkit.public.limits import Limits
from appkit.run import presets
from appkit.run.handlers import Handlers
from appkit.run.settings import FIELDS, Settings
from decoding.tuning.device_presets import device_key

MEDUSA, EAGLE = {"budget": 4, "confidence": 0.1}, {"budget": 8, "adaptive": 1, "draft_vocab": 4096}


def values(target: str, **kw) -> list:
    s = Settings(**{"target": target, "preset": "auto", **kw})
    return [getattr(s, f) for f in FIELDS]


def test_shared_heads_fields_show_the_selected_methods_auto_preset(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    target = save_tiny_dir(tmp_path / "target", "llama", seed=0)
    h = Handlers(Limits(public=False), ModelCache())
    model, _ = h.cache.get(target, "auto", "auto")
    presets._path().write_text(json.dumps({f"{target}|{device_key(model)}": {"medusa": MEDUSA, "eagle": EAGLE}}))

    def shown(**kw) -> dict:
        return dict(zip(autofields.FIELDS + ("note",), autofields.shown(h, *values(target, **kw))))

    med, eag = shown(method="medusa"), shown(method="eagle")
    assert med["heads_budget"]["value"] == 4 and eag["heads_budget"]["value"] == 8, (med, eag)
    for note in (med["note"], eag["note"]):  # auto chose: every method, per-step sizing and the cut included
        assert "medusa **tree budget 4, cut 0.1**" in note and "eagle **tree budget 8, sized per step**" in note, note
    # manual runs the fields as shown, and says what of auto's no field carries
    manual = shown(method="eagle", preset="manual")["note"]
    assert "per-step sizing" in manual and "draft vocabulary of 4,096 tokens" in manual and "without them" in manual
    assert "cut 0.1" in shown(method="medusa", preset="manual")["note"]
    assert "not fields" not in shown(method="lookahead", preset="manual")["note"]
    assert os.environ["DECODESCOPE_CACHE"] == str(tmp_path / "cache")
