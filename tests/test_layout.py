"""The engine's CPU weight layouts: the same values, stored column-major or also packed for the skinny-GEMM
kernel (decoding/fast/cpu_gemm.py), and still exactly HF greedy's tokens on stock weights."""
import pytest
import torch

from conftest import hf_greedy, save_tiny_dir
from decoding import ModelError, generate, load, make_drafter
from decoding.models import describe
from decoding.fast.layout import apply_layout, is_column_major


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return save_tiny_dir(tmp_path_factory.mktemp("layout") / "llama", "llama", seed=4)


def linears(model):
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def test_column_layout_keeps_values_column_major(llama_dir):
    stock, _ = load(llama_dir, device="cpu", layout="stock")
    col, _ = load(llama_dir, device="cpu", layout="column")
    assert describe(col)["weight_layout"] == "column" and describe(stock)["weight_layout"] == "stock"
    assert all(is_column_major(w) for w in linears(col)) and not any(is_column_major(w) for w in linears(stock))
    for a, b in zip(linears(stock), linears(col)):
        assert torch.equal(a, b)
    # tied LM head and embedding stay one tensor
    assert col.lm_head.weight is col.model.embed_tokens.weight or not col.config.tie_word_embeddings


@pytest.mark.parametrize("method,params", [("greedy", {}), ("lookahead", dict(window=3, ngram=4, guesses=3)),
                                           ("prompt_lookup", {})])
@pytest.mark.parametrize("layout", ["column", "packed"])
def test_layout_output_equals_hf_greedy_on_stock_weights(llama_dir, method, params, layout):
    stock, tok = load(llama_dir, device="cpu", layout="stock")
    col, _ = load(llama_dir, device="cpu", layout=layout)
    prompt = tok("def f ( x ) : return x + 1 def g ( y ) : return f ( y )")["input_ids"]
    tr = generate(col, prompt, make_drafter(method, **params), max_new_tokens=40)
    assert tr.output_ids == hf_greedy(stock, prompt, 40)


def test_layout_rules_and_bad_value(llama_dir):
    model, _ = load(llama_dir, device="cpu", layout="stock")
    assert apply_layout(model.to(torch.bfloat16), "auto") == "stock"  # measured on fp32 only: left alone
    assert apply_layout(model, "column") == "column" and all(is_column_major(w) for w in linears(model))
    with pytest.raises(ValueError, match="float32 models on CPU"):
        apply_layout(model, "packed")
    with pytest.raises(ModelError, match="layout must be one of"):
        load(llama_dir, device="cpu", layout="sideways")
    with pytest.raises(ValueError, match="layout must be one of"):
        apply_layout(model, "sideways")
