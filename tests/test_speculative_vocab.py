"""A tokenizer with more tokens than the model has rows (a Qwen2 target whose tokenizer holds an added
token the embedding never got: 385 tokens, 384 rows). Greedy runs it; speculative decoding must accept it
too: what the draft and the target must agree on is what they can emit (their logit rows), not
len(tokenizer). The run equals HF greedy."""
import pytest
from transformers import AutoTokenizer

from conftest import hf_greedy, save_tiny_dir, tiny
from decoding import ModelError, load, make_drafter, run
from decoding.methods.draft_model.speculative import check_compatible

PROMPT = "def x ( y ) : return x ( y ) + x ( y ) + x ( y"


@pytest.fixture(scope="module")
def qwen_dirs(tmp_path_factory):
    """Target and draft directories: tiny Qwen2 models with 58 embedding rows, one tokenizer of 59 tokens
    (the 58 words + an added token beyond the embedding)."""
    dirs = {}
    for role, seed in (("target", 0), ("draft", 1)):
        path = tmp_path_factory.mktemp(role)
        save_tiny_dir(path, arch="qwen2", seed=seed)
        tok = AutoTokenizer.from_pretrained(path)
        model = tiny("qwen2", vocab=len(tok), seed=seed)
        model.config.eos_token_id = model.generation_config.eos_token_id = None
        model.save_pretrained(path)
        tok.add_tokens(["<|extra|>"])
        tok.save_pretrained(path)
        dirs[role] = str(path)
    return dirs


def test_tokenizer_with_a_token_beyond_the_embedding_runs_speculative_exactly(qwen_dirs):
    target, tok = load(qwen_dirs["target"])
    draft, dtok = load(qwen_dirs["draft"])
    rows = target.get_output_embeddings().weight.shape[0]
    assert len(tok) == rows + 1 and len(dtok) == rows + 1
    assert check_compatible(target, draft, tok, dtok) is True
    ids = tok(PROMPT)["input_ids"]
    want = hf_greedy(target, ids, 24)
    assert run(target, tok, PROMPT, "greedy", max_new_tokens=24).output_ids == want
    for shape in (dict(draft_tokens=4), dict(tree=[3, 2, 1]), dict(tree_budget=8), dict(staged=True)):
        tr = run(target, tok, PROMPT, "speculative", max_new_tokens=24, draft_model=draft, draft_tokenizer=dtok,
                 confidence=None if "tree_budget" in shape else 0.0, **shape)
        assert tr.output_ids == want, shape


def test_tokenizers_that_differ_on_emittable_ids_are_still_refused(qwen_dirs, tmp_path):
    from conftest import other_tokenizer
    target, tok = load(qwen_dirs["target"])
    draft = tiny("qwen2", vocab=len(tok) - 1, seed=1)
    other_tokenizer(tmp_path)
    with pytest.raises(ModelError, match="shared tokenizer"):
        make_drafter("speculative", draft_model=draft, target_model=target, tokenizer=tok,
                     draft_tokenizer=AutoTokenizer.from_pretrained(tmp_path))
