"""The heads' training losses: Medusa's per-head cross-entropy, EAGLE's feature regression + token loss,
and EAGLE unrolled over drafting levels as it drafts (training-time test); EAGLE-3's token-only loss of a
head over fused features (eagle3_loss). train_heads.py and eagle3.py run them."""
from __future__ import annotations

import torch
from torch import nn


def head_loss(kind: str, module: nn.Module, model, ids: torch.Tensor, feats: torch.Tensor, arg: torch.Tensor,
              noise: float = 0.0, ce_weight: float = 0.1, start: int = 0,
              unroll: int = 1) -> tuple[torch.Tensor, list[float]]:
    """Loss and top-1 accuracy per head (Medusa) / of the next-feature guess (EAGLE) on one batch.

    Medusa head k at position t guesses arg[t + k + 1] (the target's choice k + 2 tokens after t), weighted
    0.8^k. EAGLE at t reads [emb(ids[t + 1]); feats[t]] and predicts feats[t + 1]: SmoothL1 on the feature
    + ce_weight (EAGLE's 0.1) x cross-entropy of lm_head(prediction) against arg[t + 1]. Only guesses of
    positions >= start count (self-distilled rows: the model's own text, not the prompt it continues); the
    earlier pairs still sit in the head's attention context, as the prompt does at decode time."""
    lm = model.get_output_embeddings()
    if kind == "medusa":
        K = len(module.blocks)
        logits = module(feats, lm)  # [K, B, T, V]
        loss, acc = 0.0, []
        for k in range(K):
            f0 = max(start - k - 2, 0)  # head k at t guesses position t + k + 2
            lg, y = logits[k][:, f0:-(k + 1)], arg[:, f0 + k + 1:]
            loss = loss + 0.8 ** k * nn.functional.cross_entropy(lg.flatten(0, 1).float(), y.flatten())
            acc.append(float((lg.argmax(-1) == y).float().mean()))
        return loss, acc
    emb = model.get_input_embeddings()(ids).detach()
    f_in = feats[:, :-1]
    if noise:
        f_in = f_in + (torch.rand_like(f_in) - 0.5) * 2 * noise
    return eagle_unrolled(module, lm, emb, f_in, feats, arg, unroll, ce_weight, start)


def eagle_unrolled(module: nn.Module, lm: nn.Module, emb: torch.Tensor, f_in: torch.Tensor, feats: torch.Tensor,
                   arg: torch.Tensor, unroll: int, ce_weight: float, start: int) -> tuple[torch.Tensor, list[float]]:
    """EAGLE trained as it drafts (EAGLE-3's training-time test): the mean over levels 1..unroll of the
    one-level loss, level j > 1 reading level j-1's predictions (unrolled_features; unroll 1 = plain
    EAGLE). Why: drafting feeds the head its own guesses from the second level on, where a head trained on
    real features only lost most (the shipped 12-epoch head: 79% accepted at depth 1, 59% at depth 2)."""
    T, loss, acc = feats.shape[1], 0.0, []
    for j, x in enumerate(unrolled_features(module, emb, f_in, unroll)):
        f0 = max(start - 2 - j, 0)  # pair t at level j + 1 guesses the token at t + j + 2
        pred = x[:, f0:T - 1 - j]   # rows with a target
        lg = lm(pred)
        y = arg[:, f0 + 1 + j:]
        loss = loss + nn.functional.smooth_l1_loss(pred.float(), feats[:, f0 + 1 + j:].float()) + \
            ce_weight * nn.functional.cross_entropy(lg.flatten(0, 1).float(), y.flatten())
        acc.append(float((lg.argmax(-1) == y).float().mean()))
    return loss / unroll, acc


def unrolled_features(module: nn.Module, emb: torch.Tensor, f_in: torch.Tensor, unroll: int) -> list[torch.Tensor]:
    """Predicted features of drafting levels 1..unroll for every start t at once, [B, L, h] each.

    emb: embeddings of the row's tokens [B, T, h]; f_in: the target's features [B, L = T - 1, h]. Level 1 at
    t is the real pair [emb(x_{t+1}); f_t] (position t); level j's pair at t is [emb(x_{t+j}); level j-1's
    prediction at t] at position t + j - 1, and sees, through one KV cache, the real pairs up to t - 1 and
    its ancestors (the same t at levels 1..j-1): the tree mask drafting uses (tests/test_heads.py checks it
    against EagleLayer). The last j - 1 rows of level j have no token: zero inputs, never scored."""
    from transformers import DynamicCache
    B, L, _ = f_in.shape
    dev = f_in.device
    causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril(-1)  # real pairs before t
    eye = torch.eye(L, dtype=torch.bool, device=dev)
    cache, x, out = DynamicCache(), f_in, []
    for j in range(unroll):
        e = emb[:, 1 + j:]
        if j:
            e = torch.cat([e, e.new_zeros(B, j, e.shape[-1])], dim=1)
        mask = None if j == 0 else torch.cat([causal | eye] + [eye] * j, dim=1)[None, None]
        x = module(e, x, position_ids=(torch.arange(L, device=dev) + j)[None], attention_mask=mask,
                   past_key_values=cache, use_cache=True)
        out.append(x)
    return out


def eagle3_loss(module: nn.Module, draft_lm: nn.Module, emb: torch.Tensor, states: torch.Tensor,
                labels: torch.Tensor, unroll: int, decay: float = 0.8) -> tuple[torch.Tensor, list[float]]:
    """EAGLE-3's loss on one batch: the token loss only (no feature regression: a fused head's output need not
    be any target feature), over drafting levels 1..unroll on the head's own outputs (training-time test),
    level j weighted decay**(j-1) as the paper's recipe.

    emb [B, T, h]: embeddings of the row's tokens; states [B, T, layers, h]: the target's hidden states of the
    card's layers; labels [B, T]: the target's greedy choice after position t as an index into the draft
    vocabulary (draft_lm's rows), OUT_OF_VOCAB where it is not in it, UNSCORED where the position is not
    trained (prompt, padding). Level j's pair t guesses labels[t + j] (pair t reads emb(x_{t+1}) and the
    feature at t). Returns the loss and top-1 per level; a label outside the draft vocabulary is no loss term
    but counts as a miss (drafting cannot propose it)."""
    T, loss, acc = emb.shape[1], 0.0, []
    f_in = module.feature(states[:, :-1])
    norm = sum(decay ** j for j in range(unroll))
    for j, x in enumerate(unrolled_features(module, emb, f_in, unroll)):
        lg = draft_lm(x[:, :T - 1 - j]).float()
        y = labels[:, 1 + j:]
        fit, scored = y >= 0, y >= OUT_OF_VOCAB
        if fit.any():
            loss = loss + decay ** j / norm * nn.functional.cross_entropy(lg[fit], y[fit])
        acc.append(float((lg.argmax(-1) == y)[scored].float().mean()) if scored.any() else 0.0)
    return loss, acc


OUT_OF_VOCAB, UNSCORED = -1, -2  # eagle3_loss's label codes besides draft-vocabulary indices
