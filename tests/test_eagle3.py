"""EAGLE-3 heads (fused low/mid/high hidden states, token loss only, trained unrolled on their own outputs):
the engine hands the card's layers from the verification forward it runs anyway, drafting stays exact, and
an untrusted card's fuse list is refused in one line. Trained for seconds on a tiny model's own greedy text."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import hf_greedy, tiny
from decoding.api import run
from decoding.methods.self_draft.heads import HeadsError, fused_layers, load_heads, new_heads
from decoding.training.eagle3 import Data, Doc, cache_unit, length_batches, train_eagle3
from decoding.training.head_loss import OUT_OF_VOCAB, UNSCORED, eagle3_loss

FUSE = [1, 2, 3]  # after layers 1 and 2, and the last, normed state of a 3-layer model


def _docs(model) -> list[Doc]:
    out = []
    for s in range(8):
        prompt = [s + 1, s + 2, s + 3]
        out.append(Doc(prompt + hf_greedy(model, prompt, 60), len(prompt)))
    return out


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    model = tiny("llama", layers=3)
    tmp = tmp_path_factory.mktemp("eagle3")
    unit = cache_unit(model, _docs(model), FUSE, tmp / "states", log=lambda *a: None)
    best = train_eagle3(model, [unit], tmp / "heads", fuse=FUSE, unroll=3, epochs=40, batch_tokens=256, lr=3e-3,
                        draft_vocab=32, val_every=20, log=lambda *a: None)
    return model, str(tmp / "heads"), unit, best


def test_cached_states_are_the_targets_hidden_states(head):
    model, _, unit, _ = head
    a, b = int(unit.offsets[2]), int(unit.offsets[3])
    ids = torch.tensor([unit.tokens[a:b].tolist()])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    want = torch.stack([out.hidden_states[k][0] for k in FUSE], dim=1)
    torch.testing.assert_close(torch.from_numpy(np.array(unit.states[a:b])).float(), want, rtol=2e-3, atol=2e-3)
    assert unit.argmax[a:b].tolist() == out.logits[0].argmax(-1).tolist()


def test_eagle3_head_drafts_exactly_and_accepts(head):
    model, path, _, best = head
    card = json.loads((Path(path) / "heads.json").read_text())
    assert card["eagle"]["fuse"] == FUSE and card["draft_vocab"] == 32 and fused_layers(path) == tuple(FUSE)
    assert best["acc"][0] > 0.3, best  # it learned something: the first level guesses the greedy choice
    multi = 0
    for prompt in ([2, 3, 4], [9, 9, 1, 30]):
        for static in (False, True):
            tr = run(model, None, prompt, "eagle", max_new_tokens=40, heads=path, static=static)
            assert tr.output_ids == hf_greedy(model, prompt, 40), (prompt, static)
            multi += sum(len(s.accepted) > 1 for s in tr.steps[1:])
    assert multi > 0


def test_loss_scores_answer_tokens_only_and_counts_out_of_vocabulary_as_misses():
    model = tiny("llama", layers=3)
    module, _ = new_heads(model, "eagle", fuse=FUSE)
    lm = model.get_output_embeddings()
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    states = torch.stack([hs[k] for k in FUSE], dim=2)
    emb = model.get_input_embeddings()(ids)
    unscored = torch.full((1, 6), UNSCORED)
    loss, acc = eagle3_loss(module, lm, emb, states, unscored, 2)
    assert loss == 0.0 and acc == [0.0, 0.0]  # nothing scored: no loss term, no accuracy
    oov = unscored.clone()
    oov[0, 3:] = OUT_OF_VOCAB
    loss, acc = eagle3_loss(module, lm, emb, states, oov, 2)
    assert loss == 0.0 and acc == [0.0, 0.0]  # scored, but the draft vocabulary cannot propose them
    labels = unscored.clone()
    labels[0, 3:] = torch.tensor([1, 2, 3])
    loss, _ = eagle3_loss(module, lm, emb, states, labels, 2)
    assert float(loss) > 0 and loss.requires_grad


def test_length_batches_bound_rows_times_longest():
    lens = np.array([5, 50, 7, 6, 300, 40])
    batches = length_batches(lens, 100)
    assert sorted(int(i) for b in batches for i in b) == list(range(6))
    assert all(len(b) == 1 or len(b) * int(lens[b].max()) <= 100 for b in batches)


@pytest.mark.parametrize("fuse, msg", [([0, 9], "eagle.fuse must list"), ([1, 1], "eagle.fuse must list"),
                                       (["1"], "eagle.fuse must list"), (list(range(4)) * 3, "eagle.fuse must list")])
def test_untrusted_fuse_lists_are_refused_in_one_line(head, tmp_path, fuse, msg):
    model, path, _, _ = head
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    card = json.loads((bad / "heads.json").read_text())
    card["eagle"]["fuse"] = fuse
    (bad / "heads.json").write_text(json.dumps(card))
    with pytest.raises(HeadsError, match=msg):
        load_heads(bad, model, "eagle")
    with pytest.raises(HeadsError, match=msg):
        run(model, None, [2, 3, 4], "eagle", max_new_tokens=4, heads=str(bad))


def test_data_keeps_validation_documents_out_of_training(head):
    model, _, unit, _ = head
    data = Data([unit], 64, 16, val_docs=4)
    assert len(data.val) >= 1 and not set(data.val) & set(data.fit)
    assert len(data.ids) == 16 and 0 < data.coverage <= 1
