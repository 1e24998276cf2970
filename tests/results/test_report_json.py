"""The typed Report: report.json's keys and values both ways; malformed files give one line naming the key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from precision_doctor.results.report import SCHEMA_VERSION, Report, ReportError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "report_example.json"
OLD = Path(__file__).parents[1] / "fixtures" / "report_example_v1.json"  # as schema_version 1 wrote it


def fixture() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def contains(big, small) -> bool:
    """Whether every key of `small` (at any depth) is in `big` with the same value."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and contains(big[k], v) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(big) == len(small) and all(map(contains, big, small))
    return big == small


def test_reads_a_current_report_and_keeps_its_values():
    data = fixture()
    rep = Report.from_json(data)
    assert rep.schema_version == SCHEMA_VERSION and rep.checks.confirm is None
    out = rep.to_json()
    assert contains(out, data) and out == data  # every key it had, with the same values ("inf" stays "inf")
    assert list(out)[0] == "schema_version"


@pytest.mark.parametrize("version, found", [(1, "schema_version 1"), (2, "schema_version 2"),
                                            (None, "no schema_version")])
def test_an_older_report_is_refused_in_one_line(version, found):
    """No reading of older files: one line naming the file, the version found, the one read and what to do (version 2
    had the same keys unnested: `fallback_nodes` at the top)."""
    data = json.loads(OLD.read_text(encoding="utf-8"))
    assert data["schema_version"] == 1 and "fallback_nodes" in data
    data["schema_version"] = version
    if version is None:
        del data["schema_version"]  # written before versions
    with pytest.raises(ReportError) as exc:
        Report.from_json(data, "run/report.json")
    assert str(exc.value) == (f"run/report.json: written by an earlier precision-doctor ({found}; this one reads "
                              f"{SCHEMA_VERSION} only): run the diagnosis again to write a current report")
    assert exc.value.reason == str(exc.value).removeprefix("run/report.json: ")
    with pytest.raises(ReportError, match="bad key 'schema_version': expected 3, got '3'"):
        Report.from_json({**fixture(), "schema_version": "3"})


@pytest.mark.parametrize("data, words", [
    ({}, "missing key 'status'"),
    ([1, 2], "expected a JSON object, got list"),
    ("report", "expected a JSON object, got str"),
])
def test_not_a_report(data, words):
    with pytest.raises(ReportError, match=words) as exc:
        Report.from_json(data, "run/report.json")
    assert str(exc.value).startswith("run/report.json: ") and "\n" not in str(exc.value)


@pytest.mark.parametrize("change, key", [
    (lambda d: d.pop("search"), "search"),
    (lambda d: d["answer"].pop("fallback_nodes"), "answer.fallback_nodes"),
    (lambda d: d["search"].pop("tolerance"), "search.tolerance"),
    (lambda d: d["search"].update(evaluations="many"), "search.evaluations"),
    (lambda d: d.update(passed="yes"), "passed"),
    (lambda d: d["search"]["tolerance"].update(atol=-1), "search.tolerance"),
    (lambda d: d["analysis"]["layers"][3].update(score=[1]), "analysis.layers[3].score"),
    (lambda d: d["search"]["trajectory"][2].pop("step"), "search.trajectory[2].step"),
    (lambda d: d["checks"]["outputs"]["logits"].update(max_abs="big"), "checks.outputs.logits.max_abs"),
    (lambda d: d["promise"].update(validation={"passed": True}), "promise.validation.samples"),
    (lambda d: d["answer"].update(fallback_nodes="a,b"), "answer.fallback_nodes"),
    (lambda d: d.update(answer=[]), "answer"),
])
def test_malformed_key_is_named(change, key):
    data = copy.deepcopy(fixture())
    change(data)
    with pytest.raises(ReportError) as exc:
        Report.from_json(data, "r.json")
    assert f"'{key}'" in str(exc.value) and "\n" not in str(exc.value)


def test_cli_reads_malformed_files_in_one_line(run_cli, tmp_path):
    cases = {"empty": "{}", "list": "[]", "truncated": FIXTURE.read_text()[:500], "missing": None, "old": OLD.read_text()}
    for name, text in cases.items():
        d = tmp_path / name
        d.mkdir()
        if text is not None:
            (d / "report.json").write_text(text)
        for cmd in (("report", d), ("emit", d, "--format", "json")):
            code, out, err = run_cli(*cmd)
            assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (name, cmd, err)
            assert str(d) in err
    code, _, err = run_cli("report", tmp_path / "truncated")
    assert "not valid JSON" in err
    code, _, err = run_cli("report", tmp_path / "empty")
    assert "missing key 'status'" in err
    code, _, err = run_cli("report", tmp_path / "old")
    assert "(schema_version 1; this one reads 3 only): run the diagnosis again" in err
    assert not (tmp_path / "old" / "report.md").exists()  # nothing rendered from a refused report
