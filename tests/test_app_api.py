"""The app's scriptable API, driven by keyword through gradio_client: every model endpoint's parameters are
the Settings fields (plus the event's extras), returns are labelled, an API call without a preset runs the
values it sends, and bad input is an exception the client sees while the page shows the message."""
import json
from pathlib import Path

import jsonschema
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from appkit.run.settings import FIELDS
from test_app import PROMPT, cache_dir, client, dirs, reference, server  # noqa: F401 - shared fixtures

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = {"/run": (), "/race": ("methods", "repeats", "earlier_runs"), "/profile": (), "/sweep": ("sweep_n", "sweep_w", "sweep_max_new", "sweep_heads",
                                                                                     "sweep_budgets"),
          "/tune": ()}


def base(dirs, **kw) -> dict:
    return {"target": dirs["target"], "draft": dirs["draft"], "prompt": PROMPT, "max_new": 12, **kw}


def test_endpoints_have_named_parameters_and_labelled_returns(client):
    api = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for name, extras in EXTRAS.items():
        names = [p["parameter_name"] for p in api[name]["parameters"]]
        assert names == [*FIELDS, *extras], name
        labels = [r["label"] for r in api[name]["returns"]]
        assert labels[0] == "message" and not any(label.startswith("value_") for label in labels), (name, labels)
        preset = next(p for p in api[name]["parameters"] if p["parameter_name"] == "preset")
        assert preset["parameter_has_default"] and preset["parameter_default"] is None


def test_run_by_keyword_uses_the_values_sent(client, dirs):
    """No preset named: W/N/G as sent (manual); the trace says which configuration ran."""
    out = client.predict(**base(dirs, method="lookahead", window=2, ngram=3, guesses=1), api_name="/run")
    msg, status, text, html, path = out[:5]
    assert msg == "" and text == reference(dirs, "greedy", n=12).text
    doc = json.loads(open(path).read())
    cfg = doc["config"]
    assert (cfg["window"], cfg["ngram"], cfg["guesses"]) == (2, 3, 1)
    jsonschema.validate(doc, json.loads((ROOT / "decoding" / "trace" / "schema.json").read_text()))  # the one format


def test_other_endpoints_by_keyword(client, dirs):
    msg, summary, table, fig, lat, sbs = client.predict(**base(dirs, method="greedy"), methods=["prompt_lookup"],
                                                        repeats=1, api_name="/race")
    assert [r[0] for r in table["data"]][:2] == ["greedy", "prompt_lookup"] and "identical" in summary
    msg, summary, roof, flops, lat, files, ops = client.predict(**base(dirs, method="prompt_lookup", max_ngram=2,
                                                                       num_tokens=4), api_name="/profile")
    assert len(files) == 5 and "GFLOP/s" in summary  # the method's and greedy's trace + Perfetto, the report
    assert ops["type"] == "plotly"  # the operator breakdown figure
    msg, status, fig, table = client.predict(**base(dirs), sweep_n=[3], sweep_w=[1], sweep_max_new=8,
                                             api_name="/sweep")
    assert [r[0] for r in table["data"]] == ["greedy", 3] and status.startswith("done")
    msg, line, W, N, G, preset = client.predict(**base(dirs, method="lookahead"), api_name="/tune")
    assert preset == "auto" and W >= 1 and line.startswith("Tuned")


@pytest.mark.parametrize("endpoint,kw,needle", [
    ("/run", dict(max_new=0), "max new tokens"),
    ("/run", dict(method="lookahead", window=0), "W window"),
    ("/race", dict(methods=[]), "at least one"),
    ("/profile", dict(prompt="  "), "prompt"),
    ("/sweep", dict(sweep_n=[], sweep_w=[1], sweep_max_new=8), "at least one N"),
    ("/tune", dict(target="/no/such/model"), "does not exist"),
])
def test_bad_input_is_an_error_the_client_sees_and_the_page_shows(server, dirs, endpoint, kw, needle):
    c = Client(server[0], verbose=False)
    extra = {"methods": ["lookahead"]} if endpoint == "/race" else {}
    job = c.submit(**{**base(dirs), **extra, **kw}, api_name=endpoint)
    with pytest.raises(AppError, match=needle):
        job.result(timeout=120)
    shown = job.outputs()[-1][0]  # the message output beside the controls
    assert needle in shown.replace("**", "")
