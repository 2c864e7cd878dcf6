"""One trace format: the CLI's --json, Trace.save and the app's download are one versioned document that
decoding/trace/schema.json describes; Trace.load reads it and the older shipped files; `python -m viz report`."""
import json
from pathlib import Path

import jsonschema
import pytest

from decoding.cli.main import main as decoding_main
from decoding.trace import SCHEMA, Trace
from viz.__main__ import main as viz_main

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DOC = json.loads((ROOT / "decoding" / "trace" / "schema.json").read_text())
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.json")) + sorted(
    p for p in (ROOT / "tests" / "fixtures").glob("*.json") if not p.name.startswith("profile_"))


def test_schema_is_valid_and_names_the_current_version():
    jsonschema.Draft202012Validator.check_schema(SCHEMA_DOC)
    assert SCHEMA in SCHEMA_DOC["properties"]["schema"]["enum"] and SCHEMA_DOC["$id"] == SCHEMA


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_traces_validate_and_load(path):
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, SCHEMA_DOC)
    tr = Trace.load(path)
    again = tr.to_dict()
    assert again["schema"] == SCHEMA and again["stats"]["steps"] == len(doc["steps"])
    jsonschema.validate(again, SCHEMA_DOC)  # what saving it again writes is v2 and valid


def test_cli_json_is_the_trace_document_and_reports(tiny_dir, tmp_path, capsys):
    out, html = tmp_path / "run.json", tmp_path / "r" / "report.html"
    assert decoding_main(["generate", "--model", tiny_dir, "--prompt", "def x ( y ) : return y", "--method",
                          "lookahead", "--max-new-tokens", "10", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA_DOC)
    tr = Trace.load(out)
    assert doc["schema"] == SCHEMA and tr.output_ids == doc["output_ids"] and len(tr.output_ids) == 10
    assert json.loads(tr.to_json()) == doc  # CLI output and Trace.save are the same document
    capsys.readouterr()
    assert viz_main(["report", str(out), "-o", str(html)]) == 0
    page = html.read_text()
    assert "ds-stepper" in page and "lookahead" in page and str(html) in capsys.readouterr().out


def test_pre_v2_cli_wrapper_still_loads(tmp_path):
    inner = json.loads((ROOT / "tests" / "fixtures" / "lookahead.json").read_text())
    agreement = {"reference": "hf_greedy", "identical": True, "first_divergence": None, "compared": 3}
    old = {"method": inner["method"], "config": inner["config"], "output_ids": inner["output_ids"],
           "text": inner["text"], "steps": len(inner["steps"]), "compression": 1.0, "stats": {},
           "trace": inner, "agreement": agreement}
    (tmp_path / "old.json").write_text(json.dumps(old))
    tr = Trace.load(tmp_path / "old.json")
    assert tr.output_ids == inner["output_ids"] and len(tr.steps) == len(inner["steps"])
    assert tr.agreement == agreement


@pytest.mark.parametrize("text,needle", [
    ('{"method": "greedy", "steps": []}', 'no "schema" field'),
    ('{"schema": "decodescope.trace/7", "method": "greedy"}', "another version of DecodeScope"),
    ('{"schema": "other/1"}', "not a DecodeScope trace"),
    ('[1, 2]', "expected a JSON object"),
    ('{"schema": "decodescope.trace/2"', "not valid JSON"),
    ('{"schema": "decodescope.trace/2", "method": "greedy"}', "missing config, prompt_ids"),
])
def test_bad_trace_files_get_a_plain_sentence(tmp_path, capsys, text, needle):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(ValueError, match=needle) as e:
        Trace.load(bad)
    assert "None" not in str(e.value)
    assert viz_main(["report", str(bad), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]
    assert not (tmp_path / "x.html").exists()
