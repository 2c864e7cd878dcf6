"""Real model pairs: a draft whose embedding is padded to another row count but shares the target's
tokenizer decodes exactly (logits cut to the shared rows); sliding-window models decode exactly while the
run fits the window and are refused with the numbers otherwise."""
import pytest
import torch
from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

from conftest import hf_greedy, other_tokenizer, save_tiny_dir, tiny
from decoding import ModelError, Sampling, load, make_drafter, run

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return AutoTokenizer.from_pretrained(save_tiny_dir(tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def padded_pair():
    """Target 8,192 rows, draft 8,292 rows (like Qwen2.5-0.5B vs -7B: one tokenizer, padded embeddings)."""
    return tiny("llama", vocab=8192, seed=0), tiny("llama", vocab=8292, seed=1)


@pytest.mark.parametrize("shape", [dict(draft_tokens=4), dict(tree=[3, 2, 1]), dict(tree_budget=8),
                                   dict(draft_tokens=3, staged=True)], ids=str)
def test_padded_draft_decodes_exactly(padded_pair, tok, shape):
    target, draft = padded_pair
    tr = run(target, tok, PROMPT, "speculative", max_new_tokens=24, draft_model=draft, draft_tokenizer=tok,
             confidence=0.0, **shape)
    assert tr.output_ids == hf_greedy(target, PROMPT, 24)
    drafted = [t for s in tr.steps for t in s.tokens]
    assert max(drafted) < 8192  # padding rows are never proposed


def test_padded_draft_samples_within_the_target_vocabulary(padded_pair, tok):
    target, draft = padded_pair
    tr = run(target, tok, PROMPT, "speculative", max_new_tokens=16, draft_model=draft, draft_tokenizer=tok,
             sampling=Sampling(temperature=1.0, seed=3))
    assert len(tr.output_ids) == 16 and max(tr.output_ids) < 8192


def test_padded_draft_needs_the_tokenizers_and_they_must_agree(padded_pair, tok, tmp_path):
    target, draft = padded_pair
    with pytest.raises(ModelError, match="give both tokenizers"):
        make_drafter("speculative", draft_model=draft, target_model=target)
    with pytest.raises(ModelError, match="give both tokenizers"):
        run(target, None, PROMPT, "speculative", max_new_tokens=4, draft_model=draft)
    other_tokenizer(tmp_path)
    with pytest.raises(ModelError, match="shared tokenizer"):
        make_drafter("speculative", draft_model=draft, target_model=target, tokenizer=tok,
                     draft_tokenizer=AutoTokenizer.from_pretrained(tmp_path))


@pytest.fixture(scope="module")
def mistral():
    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, sliding_window=48,
                        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    return MistralForCausalLM(cfg).eval()


@pytest.mark.parametrize("method,params", [("greedy", {}), ("lookahead", dict(window=4, ngram=3, guesses=4)),
                                           ("prompt_lookup", dict(num_tokens=4)), ("speculative", {})])
def test_sliding_window_model_inside_its_window_is_exact(mistral, method, params):
    if method == "speculative":
        params = dict(draft_model=mistral, draft_tokens=3)
    tr = run(mistral, None, PROMPT, method, max_new_tokens=20, **params)
    assert tr.output_ids == hf_greedy(mistral, PROMPT, 20)


def test_sliding_window_run_past_the_window_is_refused_with_numbers(mistral):
    with pytest.raises(ModelError, match=r"window 48\).*prompt \(19 tokens\) \+ max-new-tokens \(40\).*"
                                         r"lower max-new-tokens to"):
        run(mistral, None, PROMPT, "lookahead", max_new_tokens=40)


def test_sliding_window_model_loads(mistral, tmp_path):
    mistral.save_pretrained(tmp_path)
    save_tiny_dir(tmp_path / "t")
    AutoTokenizer.from_pretrained(tmp_path / "t").save_pretrained(tmp_path)
    model, _ = load(str(tmp_path), device="cpu")
    assert model.config.sliding_window == 48
