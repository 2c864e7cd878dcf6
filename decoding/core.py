"""The one place that runs a model: packed new tokens + position ids + 4D float mask against a KV cache.

Every method (greedy, lookahead, prompt lookup, speculative target and draft) calls `forward` with a
tree of new tokens and then `commit` with the tree nodes whose keys/values belong to the accepted text.
The cache always holds exactly the accepted prefix between steps.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from .masks import chain_parents, depths_of, step_mask


class Core:
    """A model plus its KV cache; `length` is the number of cached (accepted) tokens."""

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.device = model.get_input_embeddings().weight.device
        self.dtype = model.get_input_embeddings().weight.dtype
        self.cache = DynamicCache(config=model.config)
        self.length = 0
        self._pending = 0  # tokens appended by the last forward, not yet committed

    @torch.inference_mode()
    def forward(self, tokens: list[int], parents: list[int], depths: list[int] | None = None,
                rows: list[int] | None = None) -> torch.Tensor:
        """Run the model on a tree of new tokens; returns float logits [q, vocab].

        rows: the only nodes whose logits the caller reads; the LM head (a quarter of a small model's
        FLOPs per token) skips the others, whose rows come back as zeros."""
        if self._pending:
            raise RuntimeError("commit() the previous step before the next forward()")
        depths = depths_of(parents) if depths is None else depths
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        pos = torch.tensor([depths], dtype=torch.long, device=self.device) + self.length
        mask = step_mask(parents, self.length, self.dtype, self.device)
        keep = 0 if rows is None else torch.tensor(rows, dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=keep)
        self._pending = len(tokens)
        if rows is None:
            return out.logits[0].float()
        full = torch.zeros((len(tokens), out.logits.shape[-1]), dtype=torch.float32, device=self.device)
        full[keep] = out.logits[0].float()
        return full

    def prefill(self, tokens: list[int]) -> torch.Tensor:
        """Causal forward of the prompt (or any chain); the caller commits what it keeps."""
        return self.forward(tokens, chain_parents(len(tokens)))

    @torch.inference_mode()
    def commit(self, keep: list[int]) -> None:
        """Keep the KV entries of the last forward's nodes `keep` (ascending), drop the rest."""
        q, past = self._pending, self.length
        self._pending = 0
        k = len(keep)
        if keep != list(range(k)):  # not a prefix: move the kept rows down, then crop
            idx = torch.tensor(keep, dtype=torch.long, device=self.device) + past
            for layer in self.cache.layers:
                layer.keys[..., past:past + k, :] = layer.keys.index_select(-2, idx)
                layer.values[..., past:past + k, :] = layer.values.index_select(-2, idx)
        if k < q:
            self.cache.crop(-(q - k))  # transformers 5: a negative count removes tokens
        self.length = past + k

    def rollback(self, n: int) -> None:
        """Forget the last n committed tokens (a draft model's cache after a rejection)."""
        if n > 0:
            self.cache.crop(-n)
            self.length -= n
