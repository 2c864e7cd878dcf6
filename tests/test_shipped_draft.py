"""A draft that ships only its own layers (assets/drafts/smollm2 for the default model): saved as Q8_0 blocks,
loaded onto the target's embedding and head, picked for the target it was distilled for, exact under greedy,
and refused with one line when its folder does not fit."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from conftest import hf_greedy, tiny
from decoding import generate
from decoding.api import build_drafter, load_draft
from decoding.fast import blocks
from decoding.methods.draft_model import shipped_draft as sd

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]


def _draft_folder(target, folder, layers=(0,)):
    """A draft of `target`'s width with copies of some of its layers, saved the shipped way."""
    from transformers import LlamaForCausalLM
    d = LlamaForCausalLM(sd.draft_config(target.config, len(layers)))
    d.load_state_dict({f"model.layers.{i}.{k}": v for i, src in enumerate(layers)
                       for k, v in target.model.layers[src].state_dict().items()}, strict=False)
    d.model.norm.load_state_dict(target.model.norm.state_dict())
    sd.save_draft(d, folder, target, trained_with={"test": True})
    return folder


@pytest.fixture()
def target():
    return tiny("llama", hidden=64, layers=3)


def test_q8_0_blocks_round_trip_and_are_found_by_the_cpu_kernel():
    w = torch.randn(48, 96)
    q, d = sd.quantize_q8_0(w)
    assert q.dtype == torch.int8 and d.dtype == torch.float16 and d.shape == (48, 3)
    v = sd.dequantize_q8_0(q, d)
    assert (v - w).abs().max() <= d.float().max() / 2 + 1e-6  # half a step at most
    b = blocks.recover(v)
    assert b is not None and b.kind == "q8_0"  # exact blocks: the kernel streams them as 8.5-bit weights
    assert torch.equal(blocks.dequantize(b), v)


@pytest.mark.parametrize("shape", [dict(draft_tokens=4, confidence=0.0), dict(tree=[3, 2, 1], confidence=0.0),
                                   dict(staged=True, confidence=0.0)], ids=["chain", "tree", "staged"])
def test_a_layers_only_draft_is_exact_and_shares_the_targets_head(target, tmp_path, monkeypatch, shape):
    monkeypatch.setattr(sd, "SHIPPED", _draft_folder(target, tmp_path / "draft"))
    assert sd.fits(target)
    drafter = build_drafter(target, None, "speculative", **shape)  # no draft_model: the one shipped for it
    draft = drafter.draft
    assert draft.config.num_hidden_layers == 1
    assert draft.get_input_embeddings() is target.get_input_embeddings()
    assert draft.get_output_embeddings() is target.get_output_embeddings()
    tr = generate(target, PROMPT, drafter, max_new_tokens=30)
    assert tr.output_ids == hf_greedy(target, PROMPT, 30)
    assert sum(s.info["accepted_path"] != [] for s in tr.steps[1:] if s.info) > 0  # the draft got tokens accepted


def test_another_targets_draft_is_refused_and_none_is_guessed(target, tmp_path, monkeypatch):
    monkeypatch.setattr(sd, "SHIPPED", _draft_folder(target, tmp_path / "draft"))
    other = tiny("llama", hidden=64, layers=3, seed=5)
    assert not sd.fits(other)
    with pytest.raises(ValueError, match="none ships for this model"):
        load_draft(other, None)
    with pytest.raises(sd.DraftError, match="another base model"):
        load_draft(other, str(tmp_path / "draft"))


@pytest.mark.parametrize("damage", ["card_not_json", "card_list", "weights_cut", "missing_tensor", "wrong_shape",
                                    "layers_out_of_range"])
def test_a_damaged_draft_folder_is_one_line(target, tmp_path, damage):
    folder = _draft_folder(target, tmp_path / "draft")
    card, weights = folder / sd.CARD, folder / sd.WEIGHTS
    if damage == "card_not_json":
        card.write_text("{not json")
    elif damage == "card_list":
        card.write_text("[1, 2]")
    elif damage == "weights_cut":
        weights.write_bytes(weights.read_bytes()[:200])
    elif damage == "layers_out_of_range":
        c = json.loads(card.read_text())
        card.write_text(json.dumps(dict(c, layers=99)))
    else:
        from safetensors.torch import load_file, save_file
        t = load_file(str(weights))
        if damage == "missing_tensor":
            t.pop("model.norm.weight")
        else:
            t["model.norm.weight"] = torch.ones(7)
        save_file(t, str(weights))
    with pytest.raises(sd.DraftError) as e:
        sd.load_draft_folder(target, folder)
    assert "\n" not in str(e.value) and str(folder) in str(e.value)


def test_the_embedded_target_gets_the_embedded_draft():
    from decoding import load
    model, tok = load("assets/target", layout="stock")
    drafter = build_drafter(model, tok, "speculative", draft_tokens=3)
    assert drafter.draft.config.num_hidden_layers < model.config.num_hidden_layers
    assert drafter.draft.get_input_embeddings() is not model.get_input_embeddings()  # its own, a separate model


def test_the_shipped_smollm2_draft_is_layers_only_q8_0_blocks():
    """The shipped folder: a card for the default model, Q8_0 codes for every matrix of its layers, nothing of
    the embedding or head (borrowed from the target), and small enough for the 64 MiB a GPU machine gets."""
    card = json.loads((sd.SHIPPED / sd.CARD).read_text())
    assert card["format"] == sd.FORMAT and card["storage"] == "q8_0" and "SmolLM2-135M-Instruct" in card["base_model"]
    assert (sd.SHIPPED / sd.WEIGHTS).stat().st_size < 12 << 20
    with safe_open(str(sd.SHIPPED / sd.WEIGHTS), "pt") as f:
        keys = set(f.keys())
        assert not any(k.startswith(("model.embed_tokens", "lm_head")) for k in keys)
        assert {int(k.split(".")[2]) for k in keys if k.startswith("model.layers.")} == set(range(card["layers"]))
        for k in keys:
            if k.endswith(".q8_0"):
                q, d = f.get_tensor(k), f.get_tensor(k[:-5] + ".d")
                assert q.dtype == torch.int8 and q.shape[1] == 32 * d.shape[1] and q.shape[1] in (576, 1536)


def test_q4_1_blocks_round_trip_and_load():
    w = torch.randn(48, 96)
    packed, d, m = sd.quantize_q4_1(w)
    assert packed.dtype == torch.uint8 and packed.shape == (48, 48) and d.shape == m.shape == (48, 3)
    v = sd.dequantize_q4_1(packed, d, m)
    assert (v - w).abs().max() <= d.float().max() / 2 + 1e-3
    b = blocks.recover(v)
    assert b is not None and b.kind == "q4_1" and torch.equal(blocks.dequantize(b), v)


def test_a_q4_1_draft_folder_loads_and_stays_exact(target, tmp_path):
    from transformers import LlamaForCausalLM
    d = LlamaForCausalLM(sd.draft_config(target.config, 1))
    d.load_state_dict({f"model.layers.0.{k}": v for k, v in target.model.layers[0].state_dict().items()}, strict=False)
    sd.save_draft(d, tmp_path / "d4", target, trained_with={}, storage="q4_1")
    draft, _ = load_draft(target, str(tmp_path / "d4"))
    for name, p in draft.model.layers[0].named_parameters():
        if p.dim() == 2:
            assert blocks.recover(p.detach()).kind == "q4_1", name
    tr = generate(target, PROMPT, build_drafter(target, None, "speculative", draft_model=draft, draft_tokens=3),
                  max_new_tokens=20)
    assert tr.output_ids == hf_greedy(target, PROMPT, 20)
