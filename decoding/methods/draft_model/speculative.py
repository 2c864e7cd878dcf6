"""Speculative decoding as a drafter on the shared engine: a draft model proposes a chain or a token tree,
the target verifies it in the runner's one forward (decoding/engine/runner.py), optionally staged (an n-gram
stage 2 drafts for the draft model, decoding/methods/draft_model/stage2.py). Draft-side machinery:
decoding/methods/draft_model/draft_tree.py (+ draft_core.py, tree_shape.py, tree_replay.py); its tuner: shape_tune.py.

Modes: chain (draft_tokens=K: K tokens, the target checks K + 1 positions), tree (widths per depth, e.g.
[3, 2, 1]) and dynamic (tree_budget=B: the B best nodes by cumulative draft probability, depth <= K).
Greedy: the target's argmax decides (verify.greedy), so the output equals plain greedy decoding.
Sampling: chain and fixed-width trees draw children from the draft's warped distribution q and are
verified by verify.speculative (min(1, p/q), residual norm(max(p - q, 0)), bonus from the target);
dynamic trees pick children deterministically and use verify.sampled (point-mass multi-candidate rule).
Both rules keep the output distribution exactly that of sampling from the target.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import time

import torch

from decoding.methods.draft_model.draft_core import DraftCore
from decoding.methods.draft_model.draft_tree import TreeBuilder
from decoding.methods.draft_model.tree_shape import make_shape, speculative_query_tokens
from decoding.engine.drafter import Abilities, Plan, tree_record
from decoding.models import ModelError, check_window
from decoding.engine.sampling import Sampling, make_generator, warp
from decoding.methods.draft_model.stage2 import NGramStage2, Table, load_table
from decoding.engine.verify import Verdict
from decoding.params import LIMITS
from decoding.methods.draft_model.shipped_draft import NO_DRAFT, load_draft
from decoding.methods.spec import MethodSpec, PilotKit, Tuner, knob
from decoding.methods.draft_model.shape_tune import (SHAPES, autotune_speculative, label as shape_label,
                                                     measured as measured_shapes)

def check_compatible(target, draft, target_tok=None, draft_tok=None) -> bool:
    """Refuse a draft that does not share the target's tokenizer (one clear message). What is compared is
    what the two models can emit: their logit rows. Row counts may differ (Qwen2.5-0.5B pads to 151,936
    rows, Qwen2.5-7B to 152,064, one tokenizer): the draft's logits are cut or padded to the target's rows
    (draft_core.fit_vocab). A tokenizer may also hold MORE tokens than a model has rows (a Qwen2 tokenizer
    with an added token the embedding never got): no model can emit those ids, greedy decoding runs such a
    target, and so does speculative decoding. So the tokenizers must agree on the ids below both models'
    row counts, nothing else. Without both tokenizers only equal row counts can be trusted. Returns True
    when the tokenizers were compared."""
    tv, dv = _vocab_size(target), _vocab_size(draft)
    if target_tok is None or draft_tok is None:
        if tv != dv:
            raise ModelError(f"draft vocabulary ({dv} rows) differs from the target's ({tv} rows): speculative "
                             "decoding needs a draft that shares the target's tokenizer (give both tokenizers "
                             "to check that they agree; then padded embeddings are fine)")
        return False
    shared = min(tv, dv)  # ids both models can emit
    tvoc, dvoc = target_tok.get_vocab(), draft_tok.get_vocab()
    emits = lambda voc: {t: i for t, i in voc.items() if i < shared}  # noqa: E731
    if tvoc != dvoc and emits(tvoc) != emits(dvoc):
        raise ModelError(f"draft tokenizer's vocabulary ({len(draft_tok)} tokens) differs from the target's "
                         f"({len(target_tok)} tokens) on the {shared} ids both models can emit: speculative "
                         "decoding needs a shared tokenizer")
    return True


def _vocab_size(model) -> int:
    emb = model.get_output_embeddings()
    return int(emb.weight.shape[0]) if emb is not None else int(model.config.vocab_size)


class Speculative:
    """Drafter: the draft model (and optionally stage 2) proposes, the runner's target forward verifies."""
    name = "speculative"
    abilities = Abilities(binds_target=True, wants_tracing=True)

    @classmethod
    def from_params(cls, **p) -> "Speculative":
        """With target_model (and the tokenizers), the draft is checked against the target here, once."""
        if p.get("draft_model") is None:
            raise ValueError(NO_DRAFT)
        d = cls(p.get("draft_model"), p.get("draft_tokens"), p.get("tree"), p.get("tree_budget"),
                bool(p.get("staged", False)), ngram_table=p.get("ngram_table"), confidence=p.get("confidence"),
                adaptive=bool(p.get("adaptive", False)))
        if p.get("target_model") is not None:
            d.vocab_checked = check_compatible(p["target_model"], d.draft, p.get("tokenizer"),
                                               p.get("draft_tokenizer"))
        return d
    tracing = True  # set by the runner: the target probabilities of the tree are read only for the trace

    def __init__(self, draft_model, draft_tokens: int | None = None, tree=None, tree_budget: int | None = None,
                 staged: bool = False, ngram: int = 3, ngram_table: Table | None = None,
                 confidence: float | None = None, adaptive: bool = False):
        self.shape = make_shape(draft_tokens, tree, tree_budget, staged, confidence)
        self.adaptive = bool(adaptive)
        if draft_model is None:
            raise ValueError("speculative decoding needs a draft model")
        self.draft = draft_model
        self.staged, self.ngram = staged, ngram
        self.stage2 = NGramStage2(ngram, ngram_table) if staged else None
        self.sampling, self.gen = Sampling(), None
        self.vocab_checked = False  # set by api.make_drafter once both tokenizers were compared
        self.vocab = None  # the target's logit rows (bind)

    def config(self) -> dict:
        cfg = self.draft.config
        return {"mode": self.shape.mode, "draft_tokens": self.shape.depth, "tree": self.shape.widths,
                "tree_budget": self.shape.budget or None, "staged": self.staged,
                "confidence": self.shape.confidence, "adaptive": self.adaptive,
                "stage2": self.stage2.config() if self.stage2 else None,
                "draft": {"name": getattr(self.draft, "name_or_path_", getattr(cfg, "_name_or_path", "")),
                          "model_type": cfg.model_type,
                          "n_params": sum(p.numel() for p in self.draft.parameters())}}

    def max_depth(self) -> int:
        return self.shape.depth + 1

    def bind(self, target, sampling: Sampling) -> None:
        """Called by the runner with the target: check the vocabulary, learn the sampling settings."""
        if not self.vocab_checked:
            check_compatible(target, self.draft)
        self.vocab = _vocab_size(target)
        self.sampling = sampling
        self.gen = None if sampling.greedy else make_generator(Sampling(seed=sampling.seed + 7919))

    def start(self, prompt_ids: list[int]) -> None:
        self.core = DraftCore(self.draft)
        self.core.vocab = self.vocab
        self.core.prefill(list(prompt_ids))
        self.core.commit(list(range(len(prompt_ids))))
        if self.stage2 is not None:
            self.stage2.start(list(prompt_ids))
        self.builder = TreeBuilder(self.core, self.shape, self.sampling, self.gen, self.stage2)
        self._ema: dict[str, float] = {}  # adaptive: tokens and ms per drafted step, ms per plain step
        self._drafted, self._plain_run = 0, 0

    def _draft_now(self) -> bool:
        """Adaptive mode: draft only while drafted steps yield more tokens per second than plain target
        steps (both measured as they run; a plain step is probed after 3 drafted ones, a drafted step after
        8 plain ones). Timing-driven, so a sampling seed no longer reproduces a run exactly; the output law
        and greedy exactness are unaffected (the choice never looks at the current step's verification)."""
        if not self.adaptive:
            return True
        e = self._ema
        if "plain_ms" not in e:
            return self._drafted < 3
        if "spec_ms" not in e or self._plain_run >= 8:
            return True
        return e["gain"] / e["spec_ms"] >= 1.0 / e["plain_ms"]

    def _update(self, key: str, value: float) -> None:
        self._ema[key] = value if key not in self._ema else 0.7 * self._ema[key] + 0.3 * value

    def plan(self, context: list[int]) -> Plan:
        t0 = time.perf_counter()
        if not self._draft_now():  # a plain target step: the draft catches up later in one forward
            self._plain_run += 1
            self._keep = None
            info = {"tree": tree_record([context[-1]], [-1], [0], ["target"], [None]), "drafted": False,
                    "draft_forwards": 0,
                    "draft_ms": 0.0, "target_forwards": 1, "mode": self.shape.mode}
            self._t_plan_end = time.perf_counter()
            return Plan([context[-1]], [-1], [0], ["x0"], [[0, 0]], [False], origin="draft", info=info,
                        origins=["target"])
        self._drafted += 1
        self._plain_run = 0
        if self.stage2 is not None:
            self.stage2.update(context)
        nodes, n_catch, st = self.builder.build(context)
        n = len(nodes)
        parents = [nd.parent for nd in nodes]
        depths = [nd.depth for nd in nodes]
        origins = [nd.origin for nd in nodes]
        roles = ["x0"] + ["stage2" if o == "stage2" else "draft" for o in origins[1:]]
        q = None
        if self.gen is not None and self.shape.mode != "dynamic":
            d0 = nodes[0].dist
            q = torch.zeros((n, d0.shape[-1]), dtype=d0.dtype, device=d0.device)  # where the draft's dists live
            for i, nd in enumerate(nodes):
                if nd.kids:
                    q[i] = nd.dist
        self._keep = list(range(n_catch - 1)) + [nodes[0].spec]
        self._spec = [nd.spec for nd in nodes]
        draft_ms = (time.perf_counter() - t0) * 1e3
        info = {"tree": tree_record([nd.token for nd in nodes], parents, depths, origins, [nd.prob for nd in nodes]),
                **st, "drafted": True, "draft_ms": draft_ms, "target_forwards": 1, "mode": self.shape.mode}
        if self.stage2 is None:
            info.pop("stage2_proposed"), info.pop("stage2_accepted")
        else:
            info["stage2"] = {"proposed": st["stage2_proposed"], "accepted_by_draft": st["stage2_accepted"]}
        self._t_plan_start, self._t_plan_end = t0, time.perf_counter()
        return Plan([nd.token for nd in nodes], parents, depths, roles, [[i, d] for i, d in enumerate(depths)],
                    [False] + [True] * (n - 1), origin="draft", info=info, q=q, origins=origins)

    def observe(self, plan: Plan, preds: list[int], verdict: Verdict, context: list[int]) -> None:
        t0 = time.perf_counter()
        info = plan.info
        info["target_ms"] = (t0 - self._t_plan_end) * 1e3
        path = verdict.path
        if self._keep is None:  # plain step
            info["accepted_path"], info["first_rejected"] = list(path), None
            self._update("plain_ms", info["target_ms"])
            return
        keep = self._keep + [self._spec[i] for i in path[1:] if self._spec[i] >= 0]
        self.core.settle(keep)
        self._update("gain", len(verdict.tokens))
        self._update("spec_ms", (t0 - self._t_plan_start) * 1e3)
        kids = [i for i in range(1, len(plan.tokens)) if plan.parents[i] == path[-1]]
        info["accepted_path"] = list(path)
        info["first_rejected"] = kids[0] if kids else None
        if self.tracing and verdict.logits is not None and len(plan.tokens) > 1:  # one transfer, trace only
            lg = verdict.logits[plan.parents[1:]]
            p = lg.softmax(-1) if self.sampling.greedy else warp(lg, self.sampling)
            idx = torch.tensor(plan.tokens[1:], dtype=torch.long, device=p.device)[:, None]  # CUDA: same device
            tp = p.gather(-1, idx)[:, 0].tolist()
            info["tree"]["target_prob"] = [None] + [round(x, 6) for x in tp]
        info["settle_ms"] = (time.perf_counter() - t0) * 1e3


@dataclass
class SpeculativeParams:
    draft_model: object = knob(None, cli="--draft", kind="model",
                               help="speculative: draft model, a path or hub id sharing the target's tokenizer, or a "
                                    "draft folder (default: the draft shipped for the target)")
    # the draft's own options before the shape: the CLI names the shape flags last when it refuses them
    ngram_table: object = knob(None, cli="--ngram-table", kind="file",
                               help="staged: JSON n-gram table (decoding.methods.draft_model.stage2.save_table)")
    adaptive: bool = knob(False, shared=True, cli="--adaptive",
                          help="speculative: skip drafting while plain target steps are faster (measured online)")
    draft_tokens: int = knob(None, lo=LIMITS["draft_tokens"][0], hi=LIMITS["draft_tokens"][1], cli="--draft-tokens",
                             ui=True, label="K draft tokens", help="speculative: chain length K (default 4)")
    tree: object = knob(None, cli="--tree", kind="widths", ui=True, label="tree widths", page_field="widths",
                        help="speculative: token tree widths per depth, e.g. 3,2,1")
    tree_budget: int = knob(None, lo=LIMITS["tree_budget"][0], hi=LIMITS["tree_budget"][1], cli="--tree-budget",
                            page_field="budget",
                            ui=True, label="tree budget",
                            help="speculative: dynamic tree of the B best nodes by draft probability")
    staged: bool = knob(False, cli="--staged", ui=True, label="staged",
                        help="speculative: an n-gram stage 2 drafts for the draft")
    confidence: float = knob(None, shared=True, lo=0.0, hi=1.0, cli="--draft-confidence", ui=True, label="draft cutoff",
                             help="speculative: do not extend a draft token below this draft probability "
                                  "(default 0.4)")
    target_model: object = knob(None, internal=True, help="the target, to check the draft against it once")
    tokenizer: object = knob(None, shared=True, internal=True, help="the target's tokenizer")
    draft_tokenizer: object = knob(None, internal=True, help="the draft's tokenizer, compared with the target's")


def check(p: dict) -> None:
    make_shape(p.get("draft_tokens"), p.get("tree"), p.get("tree_budget"), bool(p.get("staged", False)),
               p.get("confidence"))
    if isinstance(p.get("ngram_table"), (str, Path)):  # a bad file is refused before any model loads
        read_table(p["ngram_table"])


def read_table(table: str | Path) -> Table:
    """An n-gram table file (--ngram-table), validated by load_table; one line whatever is wrong with it."""
    try:
        return load_table(table)
    except (TypeError, RecursionError) as e:  # load_table catches the rest: one line either way
        raise ValueError(f"cannot read n-gram table {table}: {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:200]}") from None


def prepare(p: dict, model, tokenizer) -> dict:
    """The draft: a model object as is, else loaded for this target (the shipped one by default), and checked
    against the target with both tokenizers, once; an n-gram table given as a file is read."""
    table = p.get("ngram_table")
    if isinstance(table, (str, Path)):  # a JSON file (--ngram-table): read here (check read it to refuse early)
        p = {**p, "ngram_table": read_table(table)}
    draft, dtok = load_draft(model, p.get("draft_model"))
    p = {"target_model": model, "tokenizer": tokenizer, **p, "draft_model": draft}
    if dtok is not None and p.get("draft_tokenizer") is None:
        p["draft_tokenizer"] = dtok
    return p


def _tune(kit: PilotKit, model, tok, prompts, *, method, pilot_tokens, reps, draft=None, heads=None,
          draft_tokenizer=None, **fixed) -> dict:
    """The tuner's run (shape_tune.py): the draft is checked against the target before piloting (a clear
    error, not a crash mid-tune)."""
    if draft is None:
        raise ValueError("tuning speculative decoding needs a draft model")
    if draft_tokenizer is not None:
        check_compatible(model, draft, tok, draft_tokenizer)
    res = autotune_speculative(kit, model, draft, tok, prompts, pilot_tokens=pilot_tokens, reps=reps, **fixed)
    return {"params": res["best"], "label": shape_label(res["best"]), "result": res}


def check_run(drafter: "Speculative", prompt_tokens: int, max_new_tokens: int) -> None:
    """The draft model's window must hold the run too (it reads the same positions as the target)."""
    if drafter.draft is not None:
        check_window(drafter.draft.config, prompt_tokens, max_new_tokens, drafter.max_depth(), drafter.name)


TUNER = Tuner(_tune, ("draft_tokens", "tree", "tree_budget", "staged"), "shape",
              pilot_runs=lambda prompts, reps: (len(SHAPES) + 1) * prompts * reps, measured=measured_shapes)


def words(c: dict) -> str:
    """The shape in words (the draft's name is added by the report, which hides server paths)."""
    mode, tree = c.get("mode") or "chain", c.get("tree")
    if c.get("tree_budget"):
        shape = f"dynamic tree, budget {c['tree_budget']}"
    elif mode == "tree" and tree:
        shape = "tree " + ",".join(str(w) for w in tree)
    else:
        shape = f"chain {c.get('draft_tokens')}"
    parts = [f"speculative {shape}"]
    if c.get("confidence"):
        v = c["confidence"]
        parts.append(f"cutoff {v:.2f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"cutoff {v}")
    if c.get("staged"):
        parts.append("staged (stage-2 n-grams)")
    if c.get("adaptive"):
        parts.append("adaptive depth")
    return " · ".join(parts)


SPEC = MethodSpec(
    name="speculative", drafter=Speculative, params=SpeculativeParams, label="speculative", colour="#d94801",
    summary="a smaller draft model proposes a chain or a token tree; the target verifies it in one forward",
    explain=(
    "### Speculative decoding\n"
    "A small **draft model** (same tokenizer) guesses ahead; the big **target** checks all guesses in one "
    "forward pass (see the *tree* view: orange = drafted, the path the target accepted, and the first "
    "rejected node).\n"
    "\n"
    "- **chain**: **K** draft tokens in a row, the target checks K+1 positions;\n"
    "- **tree**: **widths** per depth, e.g. `3,2,1` = 3 alternatives at depth 1, 2 under each at depth 2, 1 "
    "under each at depth 3 — branching early catches the draft's 2nd and 3rd choices;\n"
    "- **budget**: the B most probable nodes by cumulative draft probability;\n"
    "- **staged**: a cheap n-gram model drafts for the draft model too (stage 2);\n"
    "- **draft cutoff**: a drafted token whose draft probability is below it is not extended, so a `3,2,1` "
    "tree drafts fewer than its 15 nodes when the draft is unsure; the tree view draws the pruned nodes faint"
    " with their probability.\n"
    "\n"
    "Greedy output equals the target's own greedy output; with sampling, accept/reject keeps the target's "
    "distribution exactly."),
    paper="Leviathan et al. 2023 (arXiv 2211.17192), Chen et al. 2023 (arXiv 2302.01318); SpecInfer's token tree "
          "(Miao et al. 2024, arXiv 2305.09781); staged (Spector & Re 2023, arXiv 2308.04623)",
    needs=("draft_model",), prepare=prepare, check=check, check_run=check_run, tuner=TUNER,
    presets={"cpu_embedded": {"tree": [2, 1, 1, 1, 1], "staged": True}, "cpu_default": {"tree": [3, 2, 1]},
             "teaching": {"draft_tokens": 4, "staged": False}},
    pictures=("mask", "tree"), words=words, capabilities=("tree_shape",),
    query_tokens=lambda p: speculative_query_tokens(make_shape(p.get("draft_tokens"), p.get("tree"),
                                                               p.get("tree_budget"), bool(p.get("staged")))),
    examples=({"draft_tokens": 4, "confidence": 0.0}, {"tree": [3, 2, 1], "confidence": 0.0},))
