"""Shared cases for the CPU stand-ins of the GPU stage (tests/test_capture_safety.py,
tests/test_emulated_graph.py, bench/gpu_run.py --rehearse): every method the static / graph path runs,
with tiny models and untrained self-drafting heads (exactness never depends on how good a drafter is)."""
from __future__ import annotations

from conftest import tiny

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12]
# id -> (method, params); speculative rows get the draft model, medusa / eagle rows their heads folder,
# self_speculative an untrained adapter after layer 1
CASES = {
    "greedy": ("greedy", {}),
    "lookahead": ("lookahead", dict(window=4, ngram=3, guesses=4)),
    "lookahead-W15N5G15": ("lookahead", dict(window=15, ngram=5, guesses=15)),
    "prompt_lookup": ("prompt_lookup", dict(num_tokens=4, candidates=2)),
    "chain": ("speculative", dict(draft_tokens=4, confidence=0.0)),
    "tree": ("speculative", dict(tree=[3, 2, 1], confidence=0.0)),
    "dynamic": ("speculative", dict(tree_budget=8)),
    "staged": ("speculative", dict(tree=[2, 2, 1], staged=True, confidence=0.0)),
    "jacobi": ("jacobi", dict(block=4)),
    "medusa": ("medusa", dict(budget=8)),
    "eagle": ("eagle", dict(budget=8)),
    "self_speculative": ("self_speculative", dict(depth=4)),
    "retrieval": ("retrieval", {}),  # the suffix cache: no datastore, no model
}


def heads_dir(model, kind: str, path) -> str:
    """Untrained heads of `kind` for `model`, saved as a heads folder."""
    from decoding.methods.self_draft.heads import new_heads, save_heads
    module, cfg = new_heads(model, kind)
    save_heads(module, cfg, path)
    return str(path)


class Models:
    """Target, draft and heads folders, built once per test module."""

    def __init__(self, tmp):
        self.target, self.draft = tiny("llama", seed=0), tiny("llama", seed=1)
        self.heads = {k: heads_dir(self.target, k, tmp / k) for k in ("medusa", "eagle")}
        from decoding.methods.self_draft.self_spec_adapter import new_adapter, save_adapter
        layer, cfg = new_adapter(self.target, 1)
        save_adapter(layer, cfg, tmp / "adapter")
        self.adapter = str(tmp / "adapter")

    def drafter(self, case: str):
        from decoding import make_drafter
        method, params = CASES[case]
        if method == "speculative":
            params = dict(params, draft_model=self.draft)
        if method in self.heads:
            params = dict(params, heads=self.heads[method])
        if method == "self_speculative":
            params = dict(params, adapter=self.adapter)
        return make_drafter(method, **params)
