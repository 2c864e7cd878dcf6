"""Check every lesson stop on the real models, as the page runs it, and say what its opening step shows.

    python scripts/lesson_check.py                         # the lesson on the default model (SmolLM2-135M-Instruct)
    python scripts/lesson_check.py --default assets/target # the fallback lesson (the embedded pair)
    python scripts/lesson_check.py --out docs/lesson-stops.md

Why a script and not a test: the default model is fetched on first use (the test suite never downloads) and
a lesson takes a minute on a CPU. Each stop runs through the app's own handlers (appkit.run.handlers: the page's
settings, the teaching preset, the same drafters), then viz.teach picks the opening step. Per stop it prints
the model, the prompt, the step the view opens on and what that step shows (the tokens the method's guesses
got accepted), the views against the stop's `expect`, and OK or MISSING. Exit status 1 when a stop's run has
no step that shows what its narration promises, or its views differ from `expect`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from appkit.page import lesson  # noqa: E402
from appkit.models.default_model import DefaultModel  # noqa: E402
from appkit.models.drafts import draft_for  # noqa: E402
from appkit.public.limits import Limits  # noqa: E402
from appkit.models.model_cache import ModelCache  # noqa: E402
from appkit.run.settings import Settings  # noqa: E402
from appkit.race.tabs import Tabs  # noqa: E402
from decoding.models import DEFAULT_MODEL, EMBEDDED_DRAFT, EMBEDDED_TARGET  # noqa: E402
from decoding.methods.registry import SPECS  # noqa: E402
from viz.counts import run_counts, step_counts  # noqa: E402
from viz.steps.stepper import views_for  # noqa: E402
from viz.exports.teach import teaching_step  # noqa: E402


def handlers(default: str) -> Tabs:
    """The app's handlers as build_demo makes them for a page whose default target is `default`."""
    dm = DefaultModel(fetch=False)
    if default == lesson.DEFAULT and dm.path is None:
        raise SystemExit(f"the default model is not in the cache: {dm.why or 'fetch it'} "
                         "(python -m decoding fetch-model), or check the fallback lesson with --default assets/target")
    aliases = {lesson.DEFAULT: DEFAULT_MODEL, lesson.TARGET: EMBEDDED_TARGET, lesson.DRAFT: EMBEDDED_DRAFT}
    if lesson.shipped_draft():  # the default model's shipped draft, by the name the page's dropdown gives it
        aliases[lesson.shipped_draft()] = draft_for(DEFAULT_MODEL)
    return Tabs(Limits(False, aliases[default], EMBEDDED_DRAFT), ModelCache(loader=dm.loader), aliases=aliases)


def shown(tok, ids: list[int]) -> str:
    return repr(tok.decode(ids))[1:-1]


def check(h: Tabs, stop: lesson.Stop, default: str) -> tuple[bool, list[str]]:
    """Run one stop as the page does; (ok, markdown lines)."""
    v = lesson.values(stop, default)
    t0 = time.perf_counter()
    p = h.plan(Settings(**v), [stop.method])
    tr = p.run(stop.method)
    wall = time.perf_counter() - t0
    pick, rc = teaching_step(tr), run_counts(tr)
    s = tr.steps[pick["k"]]
    c = step_counts(s)
    views = views_for(tr)
    comp = rc.tokens / max(1, rc.passes)  # the stats line's compression: tokens per target forward pass
    ok = pick["found"] and views == stop.expect.get("views", views)
    if "compression" in stop.expect:
        ok = ok and round(comp, 2) == stop.expect["compression"]
    target, draft, why = lesson.where(stop, default)
    model = f"{target} + {draft}" if "draft_model" in SPECS[stop.method].needs else target
    prompt = stop.request if not why and stop.request else stop.prompt
    guessed = [t for t, o in zip(s.accepted, s.origins) if o != "target"]
    lines = [f"- **model** `{model}`" + (f" ({lesson.WHY[why]})" if why else " (chat template applied)"),
             f"- **prompt** `{prompt.splitlines()[0][:100]}`" + (" …" if "\n" in prompt else ""),
             f"- **run** {rc.words()}, {wall:.1f} s wall here; "
             f"views {views}" + ("" if views == stop.expect.get("views", views) else f" (expected {stop.expect['views']})"),
             f"- **opens on** step {s.index}: {pick['shows']}",
             f"- **that step shows** {c.new} new token{'s' if c.new != 1 else ''} `{shown(p.tok, s.accepted)}`: {c.guessed} guessed by the "
             f"method (`{shown(p.tok, guessed)}`), {c.own} the model's own"
             + (f"; first rejected draft node {s.info['first_rejected']}" if isinstance(s.info.get("first_rejected"), int)
                and s.info["first_rejected"] >= 0 else "")
             + (f"; stage-2 tokens accepted: {sum(o == 'stage2' for o in s.origins)}" if "stage2" in s.origins else ""),
             f"- **output** `{shown(p.tok, tr.output_ids)[:160]}`",
             f"- **check** {'OK' if ok else 'MISSING: the run does not show what the narration promises'}"]
    return ok, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--default", default=lesson.DEFAULT, choices=[lesson.DEFAULT, lesson.TARGET],
                    help="the page's default target (the lesson teaches on it)")
    ap.add_argument("--stop", type=int, action="append", help="only these stops (1-based; repeatable)")
    ap.add_argument("--out", help="also write the report (markdown) here")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    h = handlers(a.default)
    all_stops = lesson.stops(a.default)
    out = [f"# Lesson stops on `{a.default}`", "",
           f"`python scripts/lesson_check.py --default {a.default}` (max new tokens {lesson.MAX_NEW}, fp32, greedy, "
           f"{a.threads} CPU thread{'s' if a.threads > 1 else ''}, torch {torch.__version__}). Each stop runs through "
           "the app's handlers with the teaching preset; viz.teach picks the step the view opens on. Wall times "
           f"include loading the models; machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at "
           "the start.", ""]
    hidden = [s for s in lesson.ALL if s not in all_stops]
    bad = done = 0
    for k, stop in enumerate(all_stops):
        if a.stop and k + 1 not in a.stop:
            continue
        ok, lines = check(h, stop, a.default)
        bad, done = bad + (not ok), done + 1
        block = [f"## Stop {k + 1}: {stop.title} (`{stop.method}`)", "", *lines, ""]
        print("\n".join(block), flush=True)
        out += block
    if hidden:
        out += ["## Not in this build", ""] + [f"- {s.title} (`{s.method}`): " + (
            "its method is not in decoding.api.METHODS" if s.method not in lesson.METHODS else
            "no shipped self-speculation adapter, or the page's default is not the model it was trained for")
            for s in hidden] + [""]
        print("\n".join(out[-len(hidden) - 2:]))
    if a.out:
        Path(a.out).write_text("\n".join(out))
    print(f"{done - bad} of {done} stops show what their narration promises", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
