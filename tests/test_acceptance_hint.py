"""A run whose drafts the target (almost) never accepts ends with one line saying why and what to try: Jacobi
on a model whose fixed-point guesses never settle accepted 0 of 47 drafts at 0.33x greedy, with no word.

The model that makes Jacobi miss every guess is built by hand: a tiny llama whose next token is a permutation
of its last token (embeddings one-hot, the layers' outputs zeroed, the LM head a permuted identity). Jacobi's
next guess at a position is the model's answer after the guess before it; once that guess is wrong, a
permutation's answer is wrong too, so after the first step no guess can match. A model whose next token is
always the same is the control: there every guess matches and nothing is said."""
from __future__ import annotations

import contextlib
import io
import re

import pytest
import torch

from conftest import save_tiny_dir
from decoding.cli.main import acceptance_hint, main as cli_main

PROMPT = "def f ( x ) : return x + 1"


def bigram_dir(path, answer) -> str:
    """A saved tiny llama (with the word tokenizer) whose next token is answer(last token), exactly."""
    save_tiny_dir(path)
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    old = AutoModelForCausalLM.from_pretrained(path)
    v = old.config.vocab_size
    cfg = LlamaConfig(vocab_size=v, hidden_size=v, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=0)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        m.model.embed_tokens.weight.copy_(torch.eye(v) * 4)
        for layer in m.model.layers:  # the residual stream stays the last token's one-hot row
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head = torch.zeros(v, v)
        for t in range(v):
            head[answer(t), t] = 10.0
        m.lm_head.weight.copy_(head)
    m.generation_config.eos_token_id = None
    m.save_pretrained(path)
    return str(path)


def generate(model_dir: str, *extra: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli_main(["generate", "--model", model_dir, "--prompt", PROMPT, "--max-new-tokens", "24",
                       "--layout", "stock", "--threads", "1", *extra])
    return rc, err.getvalue().splitlines()


@pytest.fixture(scope="module")
def permutation(tmp_path_factory):
    return bigram_dir(tmp_path_factory.mktemp("permutation"), lambda t: 2 + (5 * t + 3) % 56)  # never EOS (1)


@pytest.fixture(scope="module")
def constant(tmp_path_factory):
    return bigram_dir(tmp_path_factory.mktemp("constant"), lambda t: 5)


def test_jacobi_that_accepts_nothing_says_why_and_what_to_try(permutation):
    rc, lines = generate(permutation, "--method", "jacobi", "--block", "4")
    hints = [ln for ln in lines if ln.startswith("[hint]")]
    assert rc == 0 and len(hints) == 1, lines
    # (a first random guess may match by chance; after it, none can)
    assert re.match(r"\[hint\] jacobi accepted [01] of \d+ draft tokens in \d+ drafting steps", hints[0]), hints[0]
    assert "fixed-point guesses" in hints[0] and "--method lookahead" in hints[0], hints[0]


def test_a_method_whose_drafts_are_accepted_gets_no_hint(constant, permutation):
    rc, lines = generate(constant, "--method", "jacobi", "--block", "4")
    assert rc == 0 and not [ln for ln in lines if ln.startswith("[hint]")], lines
    rc, lines = generate(permutation, "--method", "greedy")  # greedy drafts nothing: nothing to say
    assert rc == 0 and not [ln for ln in lines if ln.startswith("[hint]")], lines


def test_the_hint_waits_for_enough_drafting_steps_and_has_a_generic_line():
    from decoding import Step, Trace
    steps = [Step(0, "prefill", 0, 3, [1], ["target"])]
    for i in range(1, 10):
        s = Step(i, "decode", 3 + i, 3, [1], ["target"])
        s.tokens, s.parents, s.roles, s.kept = [1, 2, 3], [-1, 0, 1], ["x0", "draft", "draft"], [0]
        steps.append(s)
    tr = Trace(method="planted", config={}, prompt_ids=[1, 2, 3], steps=steps, output_ids=[1] * 10)
    hint = acceptance_hint(tr)
    assert hint is not None and hint.startswith("[hint] planted accepted 0 of 18 draft tokens in 9 drafting steps")
    assert "--compare greedy" in hint
    tr.steps = steps[:5]  # 4 drafting steps prove little
    assert acceptance_hint(tr) is None
