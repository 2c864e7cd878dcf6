"""Loading: local directories work offline; models one custom mask cannot drive are refused clearly."""
from pathlib import Path

import pytest
import torch
from transformers import (BertConfig, BloomConfig, FalconConfig, Gemma2Config, Llama4TextConfig, MistralConfig,
                          MptConfig, Qwen2Config, Qwen3NextConfig, RobertaConfig, T5Config)

from decoding import ModelError, load
from decoding.models import check_architecture, pick_dtype


def test_load_local_dir_fp32_on_cpu(tiny_dir):
    model, tok = load(tiny_dir, device="cpu")
    assert next(model.parameters()).dtype.is_floating_point
    assert str(next(model.parameters()).dtype) == "torch.float32"
    from decoding.fast import cpu_attention
    # SDPA: transformers' own, or on the CPU layouts the same SDPA call without the KV head copy
    assert model.config._attn_implementation in ("sdpa", cpu_attention.NAME)
    assert tok("def x")["input_ids"]


@pytest.mark.parametrize("config,needle", [
    (Qwen3NextConfig(), "linear_attention layers"),
    (Llama4TextConfig(), "chunked_attention layers"),
    (T5Config(), "encoder-decoder"),
    (BloomConfig(), "ALiBi"), (MptConfig(), "ALiBi"), (FalconConfig(alibi=True), "ALiBi"),
    (BertConfig(), "not a causal decoder"), (RobertaConfig(), "not a causal decoder"),
])
def test_refuses_models_one_mask_cannot_drive(config, needle, tmp_path):
    with pytest.raises(ModelError, match=needle):
        check_architecture(config)
    config.save_pretrained(tmp_path)
    with pytest.raises(ModelError, match=needle):
        load(str(tmp_path), device="cpu")


def test_accepts_full_attention_configs():
    check_architecture(Qwen2Config())          # sliding window present but switched off
    check_architecture(MistralConfig(sliding_window=None))
    check_architecture(FalconConfig(alibi=False))  # rotary Falcon: positions come from position_ids


def test_model_objects_given_directly_are_checked_too():
    """api.run with a model object skips load(): generate refuses an ALiBi model with the same one line
    instead of failing inside BLOOM's alibi builder (or, for MPT, decoding trees that are not exact)."""
    import torch
    from transformers import BloomForCausalLM
    from decoding.api import run
    cfg = BloomConfig(vocab_size=32, hidden_size=16, n_layer=1, n_head=2)
    model = BloomForCausalLM(cfg).eval()
    with pytest.raises(ModelError, match="ALiBi"):
        run(model, None, [1, 2, 3], "lookahead", max_new_tokens=4)


def test_accepts_sliding_window_configs_runs_are_checked_against_the_window():
    """Sliding layers are exactly causal while the run fits the window (tests/test_model_pairs.py decodes)."""
    for cfg in (MistralConfig(sliding_window=16), Gemma2Config(),
                Qwen2Config(use_sliding_window=True, sliding_window=32, max_window_layers=1, num_hidden_layers=2)):
        check_architecture(cfg)


def test_dtype_choice():
    import torch
    assert pick_dtype(None, "cpu") == torch.float32 and pick_dtype(None, "cuda") == torch.bfloat16
    with pytest.raises(ModelError):
        pick_dtype("int3", "cpu")


def test_missing_model_is_one_clear_error():
    with pytest.raises(ModelError, match="does not exist"):
        load("./no/such/model")


def test_an_architecture_without_sdpa_loads_with_eager_attention(tiny_dir, tmp_path):
    """Gemma 2 has no SDPA path in transformers (which refuses to load it with the default --attn sdpa):
    load() falls back to eager attention with a warning that says so, and the engine stays exact."""
    import shutil
    import warnings

    from transformers import Gemma2ForCausalLM

    from decoding import run
    from decoding.exactness import hf_greedy
    from decoding.models import load
    torch.manual_seed(0)
    Gemma2ForCausalLM(Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                   max_position_embeddings=128)).save_pretrained(tmp_path / "g2")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tiny_dir) / f, tmp_path / "g2" / f)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model, tok = load(str(tmp_path / "g2"))
    assert model.config._attn_implementation == "eager"
    assert any("no SDPA attention" in str(w.message) and "eager" in str(w.message) for w in seen)
    prompt = [5, 6, 7, 8, 5, 6, 7]
    for method in ("greedy", "lookahead"):
        assert run(model, tok, prompt, method, max_new_tokens=12).output_ids == hf_greedy(model, prompt, 12, None)
