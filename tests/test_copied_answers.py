"""Retrieval copying the visitor's earlier answer is said where its speed is, and a race does not crown it.

The same gradio_client session runs retrieval twice on one prompt: the second run's suffix cache copies the
first one's answer. Its status line must say how many tokens were copied and from where; a race afterwards
starts from a fresh history (the same numbers as a session that never ran), unless asked to read the earlier
runs, and then its verdict says what was copied.
"""
from __future__ import annotations

import pytest
from gradio_client import Client

from test_app import PROMPT, dirs, race_rows, race_settings, server, settings  # noqa: F401 - fixtures

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]

ASKED = "this session's earlier runs (asked for)"


def test_a_copied_answer_is_named_and_a_race_starts_fresh(server, dirs):  # noqa: F811
    prompt = PROMPT + " # copied"
    fresh, mine = Client(server[0], verbose=False), Client(server[0], verbose=False)
    first = mine.predict(*settings(dirs, method="retrieval", prompt=prompt, max_new=24), api_name="/run")
    assert "copied from" not in first[1], first[1]
    again = mine.predict(*settings(dirs, method="retrieval", prompt=prompt, max_new=24), api_name="/run")
    assert "tokens were copied from your earlier runs in this session** (run 1 of its history)" in again[1], again[1]
    n = int(again[1].split("⚠ **")[1].split(" of ")[0])
    assert n >= 12, again[1]  # the first run's answer, copied

    def race(client, *extra):
        _, md, table, *_ = client.predict(*race_settings(dirs, ["retrieval"], prompt=prompt, max_new=24), 1, *extra,
                                          api_name="/race")
        return md, race_rows(table)["retrieval"]

    md, row = race(mine)  # default: a fresh history, whatever this session ran before
    md0, row0 = race(fresh)
    assert "copied" not in md and (row["steps"], row["compression"]) == (row0["steps"], row0["compression"]), (row, row0)
    md, row = race(mine, True)  # asked: it reads the earlier runs, and the verdict says what that was
    verdict = md.split("\n\n")[1]
    assert f"retrieval: {n} of 24 tokens were copied from {ASKED}" in verdict.replace("⚠ **", ""), verdict
    assert row["steps"] < row0["steps"]
