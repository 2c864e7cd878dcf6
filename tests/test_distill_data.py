"""The self-distillation data's requests (assets/heads/distill_requests.py, smollm2_distill.py) hold the bench's
held-out prompts out: built here without the model, checked with plain substring tests of their own (not the
builder's filter), so a leak in either the builder or its filter fails."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "assets" / "heads"))
sys.path.insert(0, str(ROOT / "scripts" / "assets"))

import distill_requests as dr  # noqa: E402
import smollm2_distill as sd  # noqa: E402
from stdlib_corpus import is_heldout  # noqa: E402

# what the held-out sets are about, written out here so that a change to the builder's own list cannot hide a leak
KEY_PHRASES = ["palindrome", "list and a tuple", "each word appears", "404", "bank account", "commit message",
               "merge two sorted", "merges two sorted", "csv", "inventory", "binary_search", "linked list",
               "top_words", "column_totals"]


def words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9_]+", text.lower()))


@pytest.fixture(scope="module")
def heldout() -> dict:
    chat, code = [], []
    for f in sorted((ROOT / "bench" / "prompts").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            (chat if "chat" in row else code).append(row.get("chat") or row["prompt"])
    assert len(chat) >= 8 and len(code) >= 8  # the held-out chat set and the code prompts were found
    return {"chat": chat, "code": code}


@pytest.fixture(scope="module")
def built() -> dict:
    """The request lists the generator's default command answers (same seed, same window count)."""
    return {"templates": dr.template_requests(0), "code": dr.code_windows(3000, 0)}


def test_template_requests_hold_out_every_heldout_request_and_key_phrase(built, heldout):
    reqs = built["templates"]
    assert len(reqs) > 1500 and len(set(reqs)) == len(reqs)
    norm = [words(r) for r in reqs]
    for h in heldout["chat"]:
        assert words(h) not in norm, h
        # no run of 6 words of a held-out request inside a training request
        w = words(h).split()
        for i in range(len(w) - 5):
            gram = " ".join(w[i:i + 6])
            assert not any(gram in n for n in norm), gram
    for p in KEY_PHRASES:
        assert not any(p in r.lower() for r in reqs), p


def test_code_windows_hold_out_the_heldout_files_and_the_bench_prompts(built, heldout):
    windows = built["code"]
    assert len(windows) > 500
    sources = {json.loads(line)["source"] for f in (ROOT / "bench" / "prompts").glob("*.jsonl")
               for line in f.read_text().splitlines()}
    lines = {ln.strip() for p in heldout["code"] + heldout["chat"] for ln in p.splitlines() if len(ln.strip()) >= 24}
    for rel, text in windows:
        assert not is_heldout(rel) and rel not in sources, rel
        assert not any(ln.strip() in lines for ln in text.splitlines()), rel
        assert not any(p in text.lower() for p in KEY_PHRASES), rel


def test_the_filter_drops_heldout_requests_paraphrases_and_shared_runs(heldout):
    held = dr.Heldout()
    assert held.keep(heldout["chat"] + heldout["code"]) == []
    assert held.why("Can you write a palindrome checker in Java?")  # a key phrase
    assert held.why("please: write a python function that checks whether a string is a palindrome!!")
    assert held.why("Tell me, what is a HTTP status code and when is it used?")  # key phrase 'status code'
    kept = ["Explain recursion in simple terms.", "Write a haiku about autumn."]
    assert held.keep(kept) == kept


def test_model_written_requests_are_filtered_and_deduplicated(tmp_path, heldout):
    """asked_requests: what answers a sampled ask unit gets (held out, duplicates of templates or of earlier
    units dropped)."""
    (tmp_path / "records").mkdir()
    rows0 = [{"request": "How do I bake bread?"}, {"request": None}]
    rows1 = [{"request": heldout["chat"][0]}, {"request": "how do i BAKE bread"}, {"request": "Explain recursion."},
             {"request": "What is a rainbow?"}, {"request": "What is a rainbow ?"},
             {"request": "Write a Python function that merges two sorted lists"}]
    for i, rows in enumerate((rows0, rows1)):
        (tmp_path / "records" / f"ask-{i:05d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen = {dr.dedupe_key("Explain recursion.")}
    assert sd.asked_requests(tmp_path, 0, seen, dr.Heldout()) == ["How do I bake bread?"]
    assert sd.asked_requests(tmp_path, 1, seen, dr.Heldout()) == ["What is a rainbow?"]


def test_clean_asked_takes_the_request_not_the_template():
    assert dr.clean_asked(" How does a meteor work?<|im_end|>") == "How does a meteor work?"
    assert dr.clean_asked("Hi") is None
    assert dr.clean_asked("What is <|im_start|>assistant here") is None


def test_plan_answers_an_ask_unit_a_round_after_it_is_sampled():
    a = SimpleNamespace(chat_shard=10, code_shard=5, ask=25, ask_shard=10)
    plan = [u.name for u in sd.units(35, 7, a)]
    assert len(plan) == len(set(plan))
    assert plan[:4] == ["ask-00000", "template-00000", "code-00000", "ask-00001"]
    for i in range(3):
        assert plan.index(f"asked-{i:05d}") > plan.index(f"ask-{i:05d}") + 1
    assert sum(n.startswith("template") for n in plan) == 4 and sum(n.startswith("code") for n in plan) == 2


def test_batched_answers_equal_the_engines_int8_greedy_one_at_a_time():
    """Sequences sharing llama_step calls (joining as others finish, the store compacted) answer exactly what
    the engine's greedy answers alone on the int8 kernel; a seeded sampled job draws the same tokens at any
    width."""
    from distill_batch import Batcher, Job
    from test_cpu_int8 import models

    from decoding import generate, make_drafter
    _, model, _ = models(hidden=64, layers=2)
    prompts = [[5, 6, 7, 8], list(range(40, 60)), [3] * 9, [11, 12, 13, 11, 12], [40, 41, 42, 7, 8, 9],
               [40, 41, 42, 7, 1, 2]]
    lengths = [30, 12, 25, 7, 18, 22]
    want = [generate(model, p, make_drafter("greedy"), max_new_tokens=n).output_ids for p, n in zip(prompts, lengths)]

    def batched(width: int, temperature: float = 0.0, prefix=None) -> tuple[dict, Batcher]:
        jobs = iter([Job(i, list(p), n, frozenset(), temperature=temperature, top_p=0.9, seed=i)
                     for i, (p, n) in enumerate(zip(prompts, lengths))])
        got: dict[int, list[int]] = {}
        b = Batcher(model, width, slack=0, prefix=prefix)
        b.run(lambda: next(jobs, None), lambda j: got.__setitem__(j.key, j.out))
        return got, b

    got, b = batched(3)
    assert [got[i] for i in range(len(prompts))] == want
    assert b.compactions > 0 and b.rows > b.steps  # steps shared rows, and the store was compacted
    assert len({tuple(w) for w in want}) > 1
    # a shared opening of the last two prompts: computed once, when the first of them joins (after other jobs'
    # keys), read by both
    shared, b = batched(3, prefix=[40, 41, 42, 7])
    assert [shared[i] for i in range(len(prompts))] == want and b.prefix_slots
    one, _ = batched(1, temperature=1.0)
    three, _ = batched(3, temperature=1.0, prefix=[40, 41, 42, 7])
    assert one == three and one != got
