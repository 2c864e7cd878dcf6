"""The draft model's KV cache for speculative decoding: a Core whose region of tree nodes persists across
forwards until the target's verdict settles it (decoding/methods/draft_model/draft_tree.py grows the tree in
it), and the draft's logits fitted to the target's vocabulary.
"""
from __future__ import annotations

import torch

from decoding.engine.core import Core


class DraftCore(Core):
    """A Core whose region of tree nodes persists across forwards until `settle`."""
    role = "draft"
    vocab: int | None = None  # the target's logit rows (set by Speculative.start); None = the draft's own

    def grow(self, tokens: list[int], parents: list[int], skip: int = 0) -> torch.Tensor:
        """Run new region nodes (parents index the region, earlier nodes or this batch); logits [q - skip, V]
        for all but the first `skip` nodes (catch-up tokens whose predictions nobody reads)."""
        return fit_vocab(self._run(tokens, parents, rows=len(tokens) - skip if skip else None), self.vocab)

    def grow_ids(self, ids: torch.Tensor, parents: list[int]) -> torch.Tensor:
        """grow() for tokens that live on the device (a level's top-k, never read by the host): the forward
        takes them from `ids` (placeholders go through the host side). Logits [len(parents), V]."""
        ids = ids.clamp(max=self.model.get_input_embeddings().weight.shape[0] - 1)  # a padded id: prob 0, dropped
        self._ids = ids
        if self.static:
            self.cache.ids_in = ids
        try:
            return fit_vocab(self._run([0] * len(parents), parents), self.vocab)
        finally:
            self._ids = None
            if self.static:
                self.cache.ids_in = None

    def grow_rows(self, ids: torch.Tensor, anc: torch.Tensor, depth: int) -> torch.Tensor:
        """grow_ids() whose parents (region rows `anc`) were chosen on the device too: the tree mask is
        built there (Core._run_rows). Logits [len(anc), V]."""
        ids = ids.clamp(max=self.model.get_input_embeddings().weight.shape[0] - 1)
        self._ids = ids
        if self.static:
            self.cache.ids_in = ids
        try:
            return fit_vocab(self._run_rows(anc, depth), self.vocab)
        finally:
            self._ids = None
            if self.static:
                self.cache.ids_in = None

    _ids: torch.Tensor | None = None

    def _dynamic(self, tokens, *args, **kwargs):
        """The dynamic path with device ids (grow_ids): the step's first upload (ids and depths) gets its
        id row from the device tensor."""
        if self._ids is None:
            return super()._dynamic(tokens, *args, **kwargs)
        real = self.uploads
        self.uploads = _IdsFirst(real, self._ids)
        try:
            return super()._dynamic(tokens, *args, **kwargs)
        finally:
            self.uploads = real

    def settle(self, keep: list[int]) -> None:
        """Keep region nodes `keep` (a root-first chain, ascending) as accepted text; drop the rest."""
        self.commit(keep)


class _IdsFirst:
    """Uploads whose next longs([ids, depths]) takes its id row from a device tensor (DraftCore.grow_ids)."""

    def __init__(self, uploads, ids: torch.Tensor):
        self.up, self.ids = uploads, ids

    def longs(self, values) -> torch.Tensor:
        out = self.up.longs(values)
        if self.ids is not None:
            out = out.clone() if out.device != self.ids.device or not out.is_contiguous() else out
            out[0].copy_(self.ids)
            self.ids = None
        return out

    def upload(self, *args, **kwargs):
        return self.up.upload(*args, **kwargs)


def fit_vocab(logits: torch.Tensor, vocab: int | None) -> torch.Tensor:
    """Draft logits over the target's rows: a draft padded to more rows (same tokenizer) never proposes a
    padding id; a draft with fewer rows gives the target's extra ids probability 0 (-inf logits)."""
    n = logits.shape[-1]
    if vocab is None or vocab == n:
        return logits
    if n > vocab:
        return logits[..., :vocab]
    pad = logits.new_full((*logits.shape[:-1], vocab - n), float("-inf"))
    return torch.cat([logits, pad], -1)
