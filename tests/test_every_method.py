"""Every method held to every surface by one test, parametrised over the registry (as transformers'
GenerationTesterMixin holds every model class to assisted == greedy). A new method needs no line here: it
declares example parameters in its spec (MethodSpec.examples), and what it `needs` is stood in for by
resource (a tiny draft model, untrained heads, an untrained adapter), never by method name.

For every method: exact against HF greedy on three tiny architectures, on the dynamic and the static cache
path and on the virtual CUDA device; sampling keeps the target's distribution (chi-square; the statistic's
negative control is below); an out-of-range value is refused with one sentence by the API, the CLI, the app
and custom_generate; custom_generate accepts the method's own parameters; the trace round-trips, passes the
untrusted-trace checks and counts its drafts; the spec's query-token count bounds every step it runs; every
origin and role it writes has a colour and a legend word; every picture it declares finds the data it draws in
the trace; a method that declares it learns (MethodSpec.learns) drafts differently when observe() is skipped;
parameter names are unique unless declared shared; every number parameter has a range; method colours are CSS,
distinct and not a draft model's orange (the registry's load check). The runner itself refuses a plan deeper
than the drafter's max_depth(). The checks are plain functions, so test_planted_violations_are_caught runs them
on broken fake methods and sees each fail.
"""
from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest
import torch

from conftest import hf_greedy, tiny
from sampling_check import L, PROMPT as PROMPT_6, chi2_pvalue, exact_joint, peaky_model
from decoding import generate, run
from decoding.build import build
from decoding.engine.sampling import Sampling
from decoding.methods import registry
from decoding.methods.registry import BASELINE, SPECS, MethodSpec
from decoding.trace.stats import DRAFT_ROLES, kept_drafts, spec_decode_stats
from decoding.trace import Trace
from decoding.trace.check import check_document


ARCHS = ("llama", "qwen2", "gpt2")
PROMPTS = ([5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6, 7, 8, 12], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7])
N = 16
METHODS = list(SPECS)


pytestmark = pytest.mark.usefixtures("no_cpu_kernel")


class World:
    """Tiny targets and the stand-ins for what methods need, made once per (model, resource)."""

    def __init__(self, tmp):
        self.tmp, self.models, self.made = tmp, {}, {}

    def target(self, arch: str):
        if arch not in self.models:
            if arch == "peaky":  # a confident 6-token model: the sampling test enumerates its outputs
                m = peaky_model()
            else:
                m = tiny(arch)
            self.models[arch] = m
        return self.models[arch]

    def stand_ins(self, spec: MethodSpec, arch: str) -> dict:
        """Parameters standing in for the spec's needs on this target (by resource, not by method)."""
        out = {}
        for need in spec.needs:
            key = (arch, need, spec.name if need == "heads" else "")
            if key not in self.made:
                self.made[key] = self._make(need, spec, arch)
            if self.made[key] is not None:
                out[need] = self.made[key]
        return out

    def _make(self, need: str, spec: MethodSpec, arch: str):
        target = self.target(arch)
        if need == "draft_model":
            vocab = target.config.vocab_size
            return tiny("llama" if arch == "peaky" else arch, vocab=vocab, seed=1)
        if need == "heads":
            from decoding.methods.self_draft.heads import new_heads, save_heads
            module, cfg = new_heads(target, spec.name)
            path = self.tmp / f"{arch}-{spec.name}-heads"
            save_heads(module, cfg, path)
            return str(path)
        if need == "adapter":
            from decoding.methods.self_draft.self_spec_adapter import new_adapter, save_adapter
            layer, cfg = new_adapter(target, 1)
            path = self.tmp / f"{arch}-adapter"
            save_adapter(layer, cfg, path)
            return str(path)
        if need == "datastore":
            return None  # optional: without one, retrieval drafts from the suffix cache
        raise AssertionError(f"{spec.name} needs {need!r}, which tests/test_every_method.py cannot stand in for")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("every_method"))


def drafter(world: World, spec: MethodSpec, arch: str, example: dict):
    return build(spec, {**example, **world.stand_ins(spec, arch)}, world.target(arch), None)


# ---- the checks, one function each (run on the registry below, and on planted violations) ----

def check_names(specs: dict[str, MethodSpec]) -> None:
    """Names unique unless declared shared and colours CSS, distinct and not orange (the registry's own load
    checks), every number parameter ranged, at least one example, and the examples pass the spec's own checks."""
    registry.check_shared(specs)
    registry.check_colours(specs)
    for spec in specs.values():
        assert spec.examples, f"{spec.name} declares no example parameters"
        for f in dataclasses.fields(spec.params):
            k = next(k for k in spec.knobs(user=False) if k.name == f.name)
            if f.type in ("int", "float", int, float) and not k.internal:
                assert k.choices is not None or (k.lo is not None and k.hi is not None), \
                    f"{spec.name}.{k.name} is a number without a range (knob(lo=..., hi=...))"
        for ex in spec.examples:
            spec.check_values(ex)


def check_exact(world: World, spec: MethodSpec, arch: str, static: bool) -> int | None:
    """Every example on both prompts equals HF greedy; returns the draft tokens the target verified, or None
    where the method refuses this architecture at build time with one sentence (a ValueError)."""
    verified = 0
    model = world.target(arch)
    for ex in spec.examples:
        try:
            drafter(world, spec, arch, ex)
        except ValueError as e:
            assert one_sentence(str(e)), f"{spec.name} refuses {arch} with more than one sentence: {e}"
            return None
        for prompt in PROMPTS:
            tr = generate(model, prompt, drafter(world, spec, arch, ex), max_new_tokens=N, static=static)
            assert tr.config["static"] is static
            assert tr.output_ids == hf_greedy(model, prompt, N), \
                f"{spec.name} {ex} on {arch} ({'static' if static else 'dynamic'} cache) diverged from HF greedy"
            verified += sum(r in DRAFT_ROLES for s in tr.steps[1:] for r in s.roles)
    return verified


def check_trace(spec: MethodSpec, tr: Trace) -> None:
    """The trace survives JSON and the untrusted-trace checks unchanged; drafted tokens are counted: every
    accepted draft was a counted proposal (a role in DRAFT_ROLES), and a drafting method drafted."""
    text = tr.to_json()
    check_document(json.loads(text))
    back = Trace.from_json(text)
    assert back.to_dict() == tr.to_dict(), f"{spec.name}'s trace changes through JSON"
    for s in tr.steps[1:]:
        proposed = sum(r in DRAFT_ROLES for r in s.roles)
        assert kept_drafts(s) <= proposed, \
            f"{spec.name} step {s.index} kept {kept_drafts(s)} drafts but counts {proposed} proposals (roles {set(s.roles)})"
    stats = spec_decode_stats(tr)
    if spec.name != BASELINE:
        assert stats.get("num_draft_tokens"), f"{spec.name} drafted nothing the stats count: {stats}"


def check_query_count(spec: MethodSpec, params: dict, tr: Trace) -> None:
    """The spec's query-token count (what the app holds to its step budget) bounds every step the method
    really runs: a count that undercounts would let public mode run a step over its budget."""
    if spec.query_tokens is None:
        return
    most = spec.query_tokens({**spec.defaults(), **params})
    ran = max(s.n_query for s in tr.steps[1:])  # step 0 is the prompt's forward
    assert ran <= most, f"{spec.name} ran a step of {ran} query tokens; its spec counts at most {most}"


def check_palette(spec: MethodSpec, tr: Trace, palette) -> None:
    """Every origin (accepted tokens, tree nodes) and every role has a colour and legend words."""
    origins = {o for s in tr.steps for o in s.origins}
    origins |= {o for s in tr.steps for o in ((s.info or {}).get("tree") or {}).get("origin", [])}
    for o in origins:
        key = palette._origin_key(palette.token_origin(o))
        assert key in palette.ORIGIN_COLORS, f"{spec.name}'s origin {o!r} has no colour (declare it in the spec's origins)"
        assert palette.ORIGIN_LABELS.get(key), f"{spec.name}'s origin {o!r} has no legend words"
    for r in {r for s in tr.steps[1:] for r in s.roles}:
        assert r in palette.ROLE_COLORS, f"{spec.name}'s role {r!r} has no colour"
        assert palette.ROLE_LABELS.get(r), f"{spec.name}'s role {r!r} has no legend words"


# What each picture draws from. Per step that drafted (more than x0 in its query): the info keys the view reads
# (viz/steps/tree.py falls back to the step's kept nodes, and marks no rejected node, without accepted_path and
# first_rejected); over the run: something the view finds (viz's own test for it).
PICTURE_STEP_KEYS = {"tree": ("accepted_path", "first_rejected"), "heads": ("tree", "accepted_path"),
                     "retrieval": ("retrieval", "tree", "accepted_path"),
                     "draft_cost": ("self_spec", "draft_ms", "target_ms")}


def check_pictures(spec: MethodSpec, tr: Trace) -> None:
    """Every picture the spec declares is one the step view draws, and the trace holds what it draws."""
    from decoding.methods.spec import PICTURES
    from viz.steps import trajectory, window
    drafted = [s for s in tr.steps[1:] if len(s.tokens) > 1]
    for p in spec.pictures:
        assert p in PICTURES, f"{spec.name} declares a picture {p!r} the step view does not draw ({', '.join(PICTURES)})"
        for key in PICTURE_STEP_KEYS.get(p, ()):
            lacking = [s.index for s in drafted if key not in s.info]
            assert not lacking, f"{spec.name} declares the {p} picture, but steps {lacking[:5]} lack info[{key!r}], " \
                                "which it draws (record it in observe: decoding/methods/tree_verdict.py)"
    found = {"window": lambda: any(window.has_window(s) for s in tr.steps),
             "pool": lambda: any("candidates" in s.info for s in tr.steps),
             "trajectory": lambda: trajectory.has_trajectory(tr)}
    for p in spec.pictures:
        if p in found:
            assert found[p](), f"{spec.name} declares the {p} picture, but its trace holds nothing that view draws"


def check_learns(world: World, spec: MethodSpec, params: dict) -> None:
    """A method that declares it learns (MethodSpec.learns) drafts differently when its drafter never hears the
    target's answer: a run with observe() skipped plans other tokens, or cannot run at all."""
    if not spec.learns:
        return
    model = world.target("llama")
    full = {**params, **world.stand_ins(spec, "llama")}
    taught = generate(model, PROMPTS[0], build(spec, full, model, None), max_new_tokens=N)
    deaf = build(spec, full, model, None)
    deaf.observe = lambda plan, preds, verdict, context: None  # the target's answer never reaches it
    try:
        untaught = generate(model, PROMPTS[0], deaf, max_new_tokens=N)
    except Exception:  # it cannot draft without what observe() hands it: it depends on it
        return
    assert [s.tokens for s in taught.steps[1:]] != [s.tokens for s in untaught.steps[1:]], \
        f"{spec.name} drafts the same with observe() skipped: it never learns from the target's answer " \
        "(update its state in observe, or declare MethodSpec(learns=False))"


def out_of_range(spec: MethodSpec) -> list[tuple]:
    """(knob, a value it refuses, the builder's sentence) for each user parameter with a range or choices."""
    out = []
    for k in spec.knobs():
        if k.choices is not None:
            bad = "no-such-choice"
        elif k.lo is not None and k.hi is not None:
            bad = k.hi + 1 if isinstance(k.hi, int) else float(k.hi) * 2 + 1
        else:
            continue
        try:
            spec.check_values({k.name: bad})
        except ValueError as e:
            out.append((k, bad, str(e)))
            continue
        raise AssertionError(f"{spec.name} accepts {k.name}={bad!r}, outside its range")
    return out


def one_sentence(msg: str) -> bool:
    return "\n" not in msg.strip() and 0 < len(msg) < 300


def check_refusals(spec: MethodSpec, model) -> None:
    """An out-of-range value: the API, custom_generate, the CLI and the app refuse it with one sentence."""
    from appkit.public.limits import Limits
    from appkit.run.method_fields import SHAPE, SHAPE_MODES, field_of
    from appkit.run.settings import Settings, method_params
    from decodescope.cli import main as cli
    from decoding.hf_generate import OWN, decodescope_generate
    for k, bad, sentence in out_of_range(spec):
        assert one_sentence(sentence), sentence
        with pytest.raises(ValueError) as e:
            run(model, None, PROMPTS[0], spec.name, max_new_tokens=2, **{k.name: bad})
        assert str(e.value) == sentence, f"API: {e.value}"
        ids = torch.tensor([PROMPTS[0]])
        if k.name not in OWN:  # else custom_generate's own meaning of the name (seed= is the sampling seed there)
            with pytest.raises(ValueError) as e:
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=False,
                               pad_token_id=0, custom_generate=decodescope_generate, method=spec.name, **{k.name: bad})
            assert str(e.value) == sentence, f"custom_generate: {e.value}"
        if k.cli and not k.negate and k.kind is None:
            import contextlib
            import io
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = cli(["generate", "--prompt", "x", "--method", spec.name, k.cli, str(bad)])
            lines = err.getvalue().strip().splitlines()
            assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), f"CLI {k.cli} {bad}: rc {rc}, {lines}"
        if k.ui:
            problems: list[str] = []
            mode = next((m for m, names in SHAPE_MODES.items() if k.name in names), None)  # a tree shape's mode
            s = Settings(method=spec.name, **{field_of(k.name): bad}, **({SHAPE: mode} if mode else {}))
            method_params(s, spec.name, Limits(public=False), problems)
            assert len(problems) == 1 and one_sentence(problems[0]), f"app: {problems}"


def check_public_budget(spec: MethodSpec) -> None:
    """A method that counts its step's query tokens (MethodSpec.query_tokens) is held to public mode's step
    budget: its controls at their largest values are refused there when the step would exceed it."""
    from appkit.public.limits import Limits
    from appkit.run.method_fields import field_of
    from appkit.run.settings import PUBLIC_QUERY_BUDGET, Settings, method_params
    if spec.query_tokens is None:
        return
    big = {k.name: k.hi for k in spec.knobs() if k.ui and isinstance(k.hi, int) and not isinstance(k.default, bool)}
    problems: list[str] = []
    p = method_params(Settings(method=spec.name, **{field_of(n): v for n, v in big.items()}), spec.name,
                      Limits(public=True), problems)
    if spec.query_tokens({**spec.defaults(), **big}) > PUBLIC_QUERY_BUDGET:
        assert problems, f"public mode accepts {spec.name} at {big}: {spec.query_tokens({**spec.defaults(), **big})} " \
                         f"query tokens a step, over its budget of {PUBLIC_QUERY_BUDGET} ({p})"


def check_app_defaults(spec: MethodSpec) -> None:
    """The app takes the method with its defaults (local and public mode) without a problem."""
    from appkit.public.limits import Limits
    from appkit.run.settings import Settings, method_params
    for public in (False, True):
        problems: list[str] = []
        method_params(Settings(method=spec.name), spec.name, Limits(public=public), problems)
        assert not problems, f"the app refuses {spec.name}'s defaults (public={public}): {problems}"


# ---- the registry, every surface ----

def test_parameter_names_are_unique_unless_shared_and_ranged():
    check_names(SPECS)
    assert len(SPECS) >= 10


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method", METHODS)
def test_exact_against_hf_greedy_dynamic_and_static(world, method, arch):
    spec = SPECS[method]
    verified = [check_exact(world, spec, arch, static) for static in (False, True)]
    assert arch != "llama" or None not in verified, f"{method} refuses llama, the reference architecture"
    if spec.name != BASELINE and None not in verified:
        assert all(verified), f"{method} drafted nothing on {arch}: verification is not exercised"


@pytest.mark.parametrize("method", METHODS)
def test_exact_on_the_virtual_cuda_device(world, method):
    from decoding.testing.virtual_cuda import virtual_cuda
    import copy
    spec = SPECS[method]
    cpu = world.target("llama")
    ex = spec.examples[0]
    with virtual_cuda():
        dev = copy.deepcopy(cpu).to("cuda")
        extra = world.stand_ins(spec, "llama")
        extra = {k: (copy.deepcopy(v).to("cuda") if isinstance(v, torch.nn.Module) else v) for k, v in extra.items()}
        d = build(spec, {**ex, **extra}, dev, None)
        tr = generate(dev, PROMPTS[0], d, max_new_tokens=N, trace=False)
    assert tr.config["static"], "the device path is the static cache"
    assert tr.output_ids == hf_greedy(cpu, PROMPTS[0], N), f"{method} on the virtual CUDA device != HF greedy"


@pytest.mark.parametrize("method", METHODS)
def test_trace_round_trips_counts_drafts_fits_its_query_count_and_every_origin_has_a_colour(world, method):
    """... and holds the data of every picture the spec declares."""
    from viz import palette
    spec = SPECS[method]
    tr = run(world.target("llama"), None, PROMPTS[0], method, max_new_tokens=N,
             **{**spec.examples[0], **world.stand_ins(spec, "llama")})
    check_trace(spec, tr)
    check_query_count(spec, spec.examples[0], tr)
    check_palette(spec, tr, palette)
    check_pictures(spec, tr)


@pytest.mark.parametrize("method", METHODS)
def test_a_method_that_declares_it_learns_drafts_from_the_targets_answer(world, method):
    check_learns(world, SPECS[method], SPECS[method].examples[0])


@pytest.mark.parametrize("method", METHODS)
def test_out_of_range_is_refused_by_every_caller(world, method):
    check_refusals(SPECS[method], world.target("llama"))


@pytest.mark.parametrize("method", METHODS)
def test_the_app_accepts_the_defaults_and_holds_public_modes_step_budget(method):
    check_app_defaults(SPECS[method])
    check_public_budget(SPECS[method])


@pytest.mark.parametrize("method", METHODS)
def test_custom_generate_takes_the_methods_own_parameters(world, method):
    from decoding.hf_generate import decodescope_generate
    spec = SPECS[method]
    model = world.target("qwen2")
    ids = torch.tensor([PROMPTS[0]])
    params = {**spec.examples[0], **world.stand_ins(spec, "qwen2")}
    if "draft_model" in params:  # transformers' own name for a draft
        params["assistant_model"] = params.pop("draft_model")
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N, do_sample=False,
                             pad_token_id=0, custom_generate=decodescope_generate, method=method,
                             return_dict_in_generate=True, **params)
    assert out.trace.method == method
    assert out.sequences[0, ids.shape[1]:].tolist() == hf_greedy(model, PROMPTS[0], N)


# ---- sampling keeps the target's distribution ----

RUNS = 600
WARP = Sampling(1.0, 5, 0.95, 0)


@pytest.fixture(scope="module")
def joint(world):
    return exact_joint(world.target("peaky"), WARP)


def sampled(world: World, spec: MethodSpec, runs: int) -> tuple[dict[tuple, int], int]:
    model = world.target("peaky")
    params = {**spec.examples[0], **world.stand_ins(spec, "peaky")}
    counts: dict[tuple, int] = {}
    multi = 0
    for seed in range(runs):
        d = build(spec, params, model, None)
        tr = generate(model, PROMPT_6, d, max_new_tokens=L, sampling=Sampling(1.0, 5, 0.95, seed), trace=False)
        counts[tuple(tr.output_ids)] = counts.get(tuple(tr.output_ids), 0) + 1
        multi += any(len(s.accepted) > 1 for s in tr.steps)
    return counts, multi


@pytest.mark.parametrize("method", METHODS)
def test_sampling_keeps_the_targets_distribution(world, joint, method):
    counts, multi = sampled(world, SPECS[method], RUNS)
    assert chi2_pvalue(counts, joint, RUNS) > 1e-3, f"{method}'s samples are not the target's distribution"


def test_the_chi_square_rejects_a_slightly_wrong_distribution(world, joint):
    """Negative control at this file's sample size: draws from temperature 0.6 (top-k and top-p as above)
    fail against 1.0 for every seed tried (at 600 draws the largest p over 8 seeds was 3e-5; temperature
    0.7 is at the edge of what 600 draws can tell, 0.9 beyond it)."""
    wrong = exact_joint(world.target("peaky"), Sampling(0.6, 5, 0.95, 0))
    keys = list(wrong)
    for seed in range(3):
        draws = torch.multinomial(torch.tensor([wrong[k] for k in keys]), RUNS, replacement=True,
                                  generator=torch.Generator().manual_seed(seed))
        counts: dict[tuple, int] = {}
        for i in draws.tolist():
            counts[keys[i]] = counts.get(keys[i], 0) + 1
        assert chi2_pvalue(counts, joint, RUNS) < 1e-3


# ---- planted violations: each check fails on a broken fake method ----

FAKE = textwrap.dedent('''
    from dataclasses import dataclass

    from decoding.engine.drafter import Abilities, Plan, tree_record
    from decoding.engine.masks import chain_parents
    from decoding.methods.spec import MethodSpec, knob
    from decoding.methods.tree_verdict import record_verdict

    class Fake:
        name = "planted_fake"
        abilities = Abilities()
        origin, role, stale, forgetful, records, depth_limit = "draft", "draft", False, False, True, 8

        @classmethod
        def from_params(cls, **p):
            return cls()

        def config(self):
            return {}

        def start(self, prompt_ids):
            self.guess = prompt_ids[-1]

        def plan(self, context):
            k = 3
            x0 = context[-2] if self.stale else context[-1]  # stale: plans from the context before the last step
            tokens = [x0] + [self.guess] * k  # guesses: the target's last prediction (learnt in observe)
            tree = tree_record(tokens, chain_parents(k + 1), list(range(k + 1)), ["target"] + [self.origin] * k,
                               [None] * (k + 1))
            return Plan(tokens, chain_parents(k + 1), list(range(k + 1)), ["x0"] + [self.role] * k,
                        [[0, i] for i in range(k + 1)], [False] + [True] * k, origin=self.origin, info={"tree": tree})

        def observe(self, plan, preds, verdict, context):
            if not self.forgetful:  # forgetful: never learns from the target's answer
                self.guess = preds[-1]
            if self.records:  # the tree view's accepted path and first rejected node
                record_verdict(plan, verdict)

        def max_depth(self):
            return self.depth_limit  # the deepest node (3) plus the target's next token: 4 would do

    @dataclass
    class FakeParams:
        fake_span: int = knob(3, lo=1, hi=8, cli="--fake-span", help="fake: span")

    SPEC = MethodSpec(name="planted_fake", drafter=Fake, params=FakeParams, label="fake", colour="#123456",
                      summary="a planted violation", explain="### Fake", origins={"planted": ("#abcdef", "planted")},
                      examples=({"fake_span": 3},))
''')


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A registry copy with a fake method module in tmp_path; yields (module, its spec)."""
    import importlib
    import sys
    (tmp_path / "planted_fake.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("planted_fake")
    yield mod
    sys.modules.pop("planted_fake", None)


def with_params(mod, body: str) -> MethodSpec:
    ns: dict = {}
    exec(textwrap.dedent("""
        from dataclasses import dataclass
        from decoding.methods.spec import knob
        @dataclass
        class P:
    """) + textwrap.indent(textwrap.dedent(body), "    "), ns)
    return dataclasses.replace(mod.SPEC, params=ns["P"])


def test_planted_violations_are_caught(world, fake, monkeypatch):
    from viz import palette
    model = world.target("llama")
    good = fake.SPEC
    # the fake as written passes what it is held to here (so each failure below is its plant's)
    check_exact(world, good, "llama", False)
    # 1. a name another method uses (`budget`), not declared shared: the registry refuses to load
    stolen = with_params(fake, 'budget: int = knob(4, lo=1, hi=8, cli="--budget")')
    with pytest.raises(ValueError, match="not declared shared"):
        check_names({**SPECS, stolen.name: stolen})
    with pytest.raises(ValueError, match="not declared shared"):
        registry.check_shared({**SPECS, stolen.name: stolen})
    # 2. a number without a range
    with pytest.raises(AssertionError, match="without a range"):
        check_names({**SPECS, good.name: with_params(fake, "fake_size: int = knob(3)")})
    # 3. a drafter that plans from a stale context (x0 is not the last token): the output leaves HF greedy's
    fake.Fake.stale = True
    try:
        with pytest.raises(AssertionError, match="diverged from HF greedy"):
            check_exact(world, good, "llama", False)
    finally:
        fake.Fake.stale = False
    # 4. an origin the palette does not know (not declared in the spec): no colour
    fake.Fake.origin = "mystery"
    try:
        tr = generate(model, PROMPTS[0], build(good, {}, model), max_new_tokens=N)
        with pytest.raises(AssertionError, match="has no colour"):
            check_palette(good, tr, palette)
    finally:
        fake.Fake.origin = "draft"
    # 5. proposals under a role the stats do not count: the drafts are not counted
    fake.Fake.role = "guess"
    try:
        tr = generate(model, PROMPTS[0], build(good, {}, model), max_new_tokens=N)
        with pytest.raises(AssertionError, match="proposals|drafted nothing"):
            check_trace(good, tr)
        with pytest.raises(AssertionError, match="role 'guess' has no colour"):
            check_palette(good, tr, palette)
    finally:
        fake.Fake.role = "draft"
    # 6. a range the spec does not enforce (a check that accepts everything) is found
    loose = with_params(fake, 'fake_span: int = knob(3, cli="--fake-span")')
    assert out_of_range(loose) == []  # no range: nothing to refuse, which check_names reports (2.)
    # 7. a step over public mode's budget: refused while the app counts it with the spec's query_tokens, caught
    # when the app does not (as before the spec declared it)
    from appkit.run import settings
    # (a page field the app already has: the Settings fields are made from the registry at import)
    counted = dataclasses.replace(with_params(fake, 'nodes: int = knob(3, lo=1, hi=500, ui=True)'),
                                  query_tokens=lambda p: p["nodes"] + 1)
    monkeypatch.setattr(registry, "SPECS", {**SPECS, counted.name: counted})
    check_public_budget(counted)
    monkeypatch.setattr(settings, "query_tokens", lambda sp, p: None)
    with pytest.raises(AssertionError, match="over its budget"):
        check_public_budget(counted)
    monkeypatch.undo()
    # 9. a query-token count below what a step really runs (the fake's steps run 4 query tokens)
    tr = generate(model, PROMPTS[0], build(good, {}, model), max_new_tokens=N)
    check_query_count(dataclasses.replace(good, query_tokens=lambda p: 4), {}, tr)
    with pytest.raises(AssertionError, match="its spec counts at most 3"):
        check_query_count(dataclasses.replace(good, query_tokens=lambda p: 3), {}, tr)
    # 8. a sampler that is not the target's: the chi-square run on greedy "samples" fails
    counts = {tuple(hf_greedy(world.target("peaky"), PROMPT_6, L)): RUNS}
    assert chi2_pvalue(counts, exact_joint(world.target("peaky"), WARP), RUNS) < 1e-3
    # 10. a colour that is not CSS (plotly refuses "orange-ish" in `python -m viz report`), another method's
    # colour, orange (a draft model's): the registry refuses to load, naming the method and the rule
    modules = registry.MODULES + ("planted_fake",)
    assert "planted_fake" in registry.load_specs(modules)
    for plant, rule in ((dict(colour="orange-ish"), "planted_fake's colour 'orange-ish' is not a CSS colour"),
                        (dict(colour=SPECS["lookahead"].colour.upper()), "planted_fake's colour .* is lookahead's too"),
                        (dict(colour="#ff8c00"), "planted_fake's colour #ff8c00 is orange"),
                        (dict(origins={"planted": ("#fd8d3c", "planted")}), "planted_fake's origin 'planted' colour .* is orange")):
        fake.SPEC = dataclasses.replace(good, **plant)
        try:
            with pytest.raises(ValueError, match=rule):
                registry.load_specs(modules)
            with pytest.raises(ValueError, match=rule):
                check_names({**SPECS, good.name: fake.SPEC})
        finally:
            fake.SPEC = good
    registry.check_colours({**SPECS, good.name: dataclasses.replace(good, colour="#ff8c00", needs=("draft_model",))})
    # 11. a plan deeper than max_depth() (which the run's positions were checked against): the runner refuses it
    fake.Fake.depth_limit = 3
    try:
        with pytest.raises(RuntimeError, match="planted_fake planned a node 3 tokens past x0, too deep for its max_depth"):
            generate(model, PROMPTS[0], build(good, {}, model), max_new_tokens=N)
    finally:
        fake.Fake.depth_limit = 8
    # 12. declared pictures without their data: a tree without the verdict's path, a pool without candidates,
    # a picture the step view does not draw
    tree_spec = dataclasses.replace(good, pictures=("mask", "tree"))
    check_pictures(tree_spec, generate(model, PROMPTS[0], build(tree_spec, {}, model), max_new_tokens=N))
    fake.Fake.records = False
    try:
        tr = generate(model, PROMPTS[0], build(tree_spec, {}, model), max_new_tokens=N)
        with pytest.raises(AssertionError, match=r"declares the tree picture, but steps .* lack info\['accepted_path'\]"):
            check_pictures(tree_spec, tr)
    finally:
        fake.Fake.records = True
    with pytest.raises(AssertionError, match="declares the pool picture, but its trace holds nothing"):
        check_pictures(dataclasses.replace(good, pictures=("mask", "pool")), tr)
    with pytest.raises(AssertionError, match="declares a picture 'graph' the step view does not draw"):
        check_pictures(dataclasses.replace(good, pictures=("mask", "graph")), tr)
    # 13. a drafter that never learns from the target's answer, while its method declares it does
    check_learns(world, good, {})
    fake.Fake.forgetful = True
    try:
        with pytest.raises(AssertionError, match="drafts the same with observe\\(\\) skipped"):
            check_learns(world, good, {})
        check_learns(world, dataclasses.replace(good, learns=False), {})  # what a method that does not learn says
    finally:
        fake.Fake.forgetful = False
