"""The teaching preset shows what the lesson shows: a method's first lesson stop that sets its controls runs
exactly the method's teaching preset (Jacobi's was block 1, one guess a step: nothing to see; the lesson uses 5)."""
from __future__ import annotations

from appkit.page import lesson
from appkit.run.method_fields import field_values


def test_each_methods_first_lesson_stop_is_its_teaching_preset():
    seen = set()
    for stop in lesson.STOPS:
        shown = {k: v for k, v in stop.settings.items() if k not in ("confidence", "datastore")}
        if not shown or stop.method in seen:
            continue
        seen.add(stop.method)
        assert stop.method in lesson.TEACHING, f"{stop.method}: the lesson sets {shown}, no teaching preset does"
        assert field_values(stop.method, lesson.TEACHING[stop.method]) == shown, (stop.method, shown)
    assert {"jacobi", "lookahead", "prompt_lookup", "speculative"} <= seen
