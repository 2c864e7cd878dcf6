"""Out-of-range values are said as the user types (the line under the method's controls, app.py wires every
field's change to it), not only after Run: the shared fields too, and methods without a query-token formula."""
from __future__ import annotations

from appkit.public.limits import Limits
from appkit.run.settings import Settings, budget_line


def test_the_live_line_reports_every_out_of_range_value():
    lim = Limits(public=False)
    line = budget_line(Settings(method="medusa", max_new=99999, heads_budget=9999), lim)
    assert line.startswith("⚠️") and "**max new tokens**" in line and "**heads tree budget**" in line, line
    assert "**temperature**" in budget_line(Settings(method="greedy", temperature=9), lim)
    assert budget_line(Settings(method="greedy"), lim) == ""  # nothing wrong, nothing to say
    assert budget_line(Settings(method="lookahead"), lim).startswith("up to **")
