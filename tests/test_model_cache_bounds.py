"""The shared model cache is keyed by what is loaded and bounded by memory, and every endpoint applies public
mode's dtype rule: "auto" then "fp32" on a CPU loaded a second fp32 copy, /load_models loaded bf16 and fp16 on
a CPU server (Run refuses them), and cycling dtypes evicted the page's default model."""
from __future__ import annotations

import pytest

from appkit.models.model_cache import ModelCache, _bytes
from appkit.public.limits import Limits
from appkit.race.tabs import Tabs
from decoding import load
from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET


def counting():
    calls = []

    def loader(name, device=None, dtype=None, kernel=None):
        calls.append((name, device, dtype))
        return load(name, device=device, dtype=dtype, kernel=kernel)
    return loader, calls


def test_auto_and_fp32_on_a_cpu_are_one_copy():
    loader, calls = counting()
    cache = ModelCache(loader=loader)
    a = cache.get(EMBEDDED_TARGET, "cpu", "auto")
    b = cache.get(EMBEDDED_TARGET, "cpu", "fp32")
    c = cache.get(EMBEDDED_TARGET, "auto", "float32")
    assert a is b is c and len(calls) == 1, calls


def test_the_cache_is_bounded_by_bytes_and_keeps_the_pinned_default_last():
    loader, calls = counting()
    target = load(EMBEDDED_TARGET, device="cpu")[0]
    cache = ModelCache(loader=loader, capacity=8, max_bytes=_bytes(target) + 2**20)  # room for one fp32 target
    cache.pinned = {EMBEDDED_TARGET}
    cache.get(EMBEDDED_TARGET, "cpu", "fp32")
    cache.get(EMBEDDED_DRAFT, "cpu", "fp32")  # over the bytes: the draft (not pinned) goes, the default stays
    assert cache.cached(EMBEDDED_TARGET, "cpu", "fp32")
    cache.get(EMBEDDED_TARGET, "cpu", "bf16")  # another copy of the default: the older one may go, one stays
    kept = sum(_bytes(m) for m, _ in cache._models.values())
    assert kept <= cache.max_bytes or len(cache._models) == 1, kept


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "bfloat16"])
def test_load_models_applies_the_dtype_rule_of_every_model_event(dtype):
    import torch
    if torch.cuda.is_available():
        pytest.skip("the rule refuses half precision on a CPU-only server")
    loader, calls = counting()
    h = Tabs(Limits(True, EMBEDDED_TARGET, EMBEDDED_DRAFT), ModelCache(loader=loader))
    msg = h.load_models(EMBEDDED_TARGET, EMBEDDED_DRAFT, "cpu", dtype)[0]
    assert "dtype" in msg and "fp32" in msg and calls == [], (msg, calls)
