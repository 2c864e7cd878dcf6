"""Token Recycling's own promises beyond the conformance test (tests/test_every_method.py holds it to every
surface): the prompt's forward seeds the matrix, keep=True carries it into the next run, and the trace says
which step's logits recycled each drafted token."""
from __future__ import annotations


import pytest

from conftest import hf_greedy, tiny
from decoding import build, generate

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]


pytestmark = pytest.mark.usefixtures("no_cpu_kernel")


def first_tree(tr) -> dict:
    return tr.steps[1].info["tree"]


def test_the_prefill_seeds_the_matrix():
    model = tiny("llama")
    seeded = generate(model, PROMPT, build("token_recycling", {}, model), max_new_tokens=12)
    cold = generate(model, PROMPT, build("token_recycling", {"seed_prefill": False}, model), max_new_tokens=12)
    assert seeded.output_ids == cold.output_ids == hf_greedy(model, PROMPT, 12)
    # x0 (the first output token) may be new, but the seeded matrix holds every prompt token's row
    assert len(first_tree(cold)["tokens"]) == 1, "without the prefill nothing is known before the first step"
    assert len(first_tree(seeded)["tokens"]) > 1 or PROMPT.count(seeded.output_ids[0]) == 0
    assert all(s == 0 for s in first_tree(seeded)["from_step"][1:]), "step 1 can only recycle the prompt's forward"


def test_keep_carries_the_matrix_into_the_next_run():
    model = tiny("llama")
    d = build("token_recycling", {"keep": True, "seed_prefill": False}, model)
    one = generate(model, PROMPT, d, max_new_tokens=16)
    two = generate(model, PROMPT, d, max_new_tokens=16)
    assert one.output_ids == two.output_ids == hf_greedy(model, PROMPT, 16)
    assert one.config["rows_at_start"] == 0 < two.config["rows_at_start"]
    assert len(first_tree(two)["tokens"]) > 1 and first_tree(two)["from_step"][1] is None  # an earlier run's row
    assert len(two.steps) <= len(one.steps)
    fresh = build("token_recycling", {"seed_prefill": False}, model)
    generate(model, PROMPT, fresh, max_new_tokens=16)
    assert generate(model, PROMPT, fresh, max_new_tokens=16).config["rows_at_start"] == 0


def test_each_drafted_token_names_the_step_that_recycled_it():
    model = tiny("qwen2")
    tr = generate(model, PROMPT, build("token_recycling", {"successors": 4, "nodes": 12}, model), max_new_tokens=24)
    for s in tr.steps[1:]:
        came = s.info["tree"]["from_step"]
        assert len(came) == len(s.tokens) and came[0] is None
        assert all(c is not None and 0 <= c < s.index for c in came[1:])
