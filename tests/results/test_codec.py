"""The dataclass <-> JSON codec (codec.py), and report.json read and written through it: a stored report and a
real diagnose run's report load and serialize to the same text."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from precision_doctor.codec import BadValue, Codec, Hook, from_json, to_json
from precision_doctor.errors import UserError
from precision_doctor.outcome import RunStatus
from precision_doctor.results.report import Report

FIXTURES = Path(__file__).parents[1] / "fixtures"


@dataclass(frozen=True)
class Inner:
    n: int
    share: float | None = None


@dataclass
class Outer:
    name: str
    status: RunStatus
    inner: Inner
    items: list[Inner] = field(default_factory=list)
    by_name: dict[str, list[int]] = field(default_factory=dict)
    dims: tuple[int | None, ...] = ()
    pair: tuple[str, float] | None = None
    note: str | None = None
    ok: bool = False

    def __post_init__(self):
        if self.name == "refused":
            raise UserError("name must not be 'refused'")


def _outer() -> Outer:
    return Outer("m", RunStatus.NO_SOLUTION, Inner(1, math.inf), [Inner(2, math.nan), Inner(3)], {"x": [1, 2]},
                 (None, 3), ("a", 0.5), None, True)


def test_round_trip_through_the_field_types():
    data = to_json(_outer())
    assert data == {"name": "m", "status": "no_solution", "inner": {"n": 1, "share": "inf"},
                    "items": [{"n": 2, "share": "nan"}, {"n": 3, "share": None}], "by_name": {"x": [1, 2]},
                    "dims": [None, 3], "pair": ["a", 0.5], "note": None, "ok": True}
    back = from_json(Outer, json.loads(json.dumps(data)))
    assert back.status is RunStatus.NO_SOLUTION and back.dims == (None, 3) and back.pair == ("a", 0.5)
    assert back.inner.share == math.inf and math.isnan(back.items[0].share) and to_json(back) == data
    assert from_json(Inner, {"n": 1, "share": 2}).share == 2 and isinstance(from_json(Inner, {"n": 1, "share": 2}).share, int)


def test_missing_keys_take_the_field_defaults_and_extra_keys_are_ignored():
    back = from_json(Outer, {"name": "m", "status": "complete", "inner": {"n": 0}, "changed": 1})
    assert back == Outer("m", RunStatus.COMPLETE, Inner(0))


@pytest.mark.parametrize("data, message", [
    ({"status": "complete", "inner": {"n": 0}}, "missing key 'name'"),
    ({"name": "m", "status": "complete", "inner": {}}, "missing key 'inner.n'"),
    ({"name": "m", "status": "done", "inner": {"n": 0}},
     "bad key 'status': expected one of complete, no_solution, budget_exhausted, interrupted, skipped, stopped, got 'done'"),
    ({"name": "m", "status": "complete", "inner": {"n": 0}, "items": [{"n": 1}, {"n": "x"}]},
     "bad key 'items[1].n': expected an integer, got 'x'"),
    ({"name": "m", "status": "complete", "inner": {"n": 0}, "by_name": {"x": [1, True]}},
     "bad key 'by_name.x[1]': expected an integer, got True"),
    ({"name": "m", "status": "complete", "inner": {"n": 0, "share": "big"}}, "bad key 'inner.share': expected a number"),
    ({"name": "m", "status": "complete", "inner": [0]}, "bad key 'inner': expected an object, got list"),
    ({"name": "m", "status": "complete", "inner": {"n": 0}, "items": {}}, "bad key 'items': expected a list, got dict"),
    ({"name": None, "status": "complete", "inner": {"n": 0}}, "bad key 'name': expected a string, got None"),
    ({"name": "m", "status": "complete", "inner": {"n": 0}, "ok": 1}, "bad key 'ok': expected true or false, got 1"),
    ({"name": "m", "status": "complete", "inner": {"n": 0}, "pair": ["a"]}, "bad key 'pair': expected a list of 2"),
    ({"name": "refused", "status": "complete", "inner": {"n": 0}}, "bad key 'run': name must not be 'refused'"),
])
def test_errors_name_the_key_path(data, message):
    with pytest.raises(BadValue) as exc:
        from_json(Outer, data, "run" if data.get("name") == "refused" else "")
    assert str(exc.value).startswith(message)


def test_hooks_say_where_the_json_is_not_the_plain_mapping():
    codec = Codec({
        Inner: Hook(out=lambda i, d: {**d, "double": 2 * i.n}, into=lambda d, path: {"n": d.get("count", 0), **d}),
        RunStatus: Hook(encode=lambda s: s.value.upper(), decode=lambda v, path: RunStatus(v.lower())),
    })
    assert codec.to_json(Inner(2)) == {"n": 2, "share": None, "double": 4}
    assert codec.from_json(Inner, {"count": 5}) == Inner(5) and codec.from_json(Inner, codec.to_json(Inner(2))) == Inner(2)
    assert codec.to_json([RunStatus.COMPLETE]) == ["COMPLETE"] and codec.from_json(RunStatus, "SKIPPED") is RunStatus.SKIPPED


def test_a_lenient_hook_reads_json_that_is_not_the_class_as_its_fallback():
    codec = Codec({Inner: Hook(otherwise=lambda: None)})
    assert codec.from_json(Inner, "x") is None and codec.from_json(Inner, {"share": 1.0}) is None
    assert codec.from_json(list[Inner], [{"n": 1}, []]) == [Inner(1), None]
    with pytest.raises(BadValue, match="bad key 'x.n': expected an integer"):  # a bad value stays an error
        codec.from_json(Inner, {"n": "1"}, "x")


def test_the_service_job_json_as_the_daemon_always_sent_it_read_leniently():
    """service/schema.py's JOB_JSON: the wire form the client and the pages read (a Result's non-finite numbers
    null, `spec` only in the detailed view), and a newer daemon's unknown keys, states, statuses and forms read
    without an error."""
    from precision_doctor.service.schema import CaptureProgress, JobView, Progress, Result

    job = JobView("a1", "done", "m", progress=Progress("search", 3, capture=CaptureProgress("reference", 1, 2),
                                                       phase_s={"load": 0.5}),
                  result=Result(RunStatus.COMPLETE, True, 2, math.inf, elapsed_s=math.nan), links={"self": "/jobs/a1"})
    text = json.dumps(job.to_json())
    assert text == (
        '{"id": "a1", "state": "done", "name": "m", "created": null, "started": null, "finished": null, "attempts": 0, '
        '"worker_pid": null, "cancel_requested": false, "progress": {"phase": "search", "evaluations": 3, '
        '"best_size": null, "search_phase": null, "search_round": 0, "last_size": null, "last_passed": null, '
        '"capture": {"stage": '
        '"reference", "done": 1, "total": 2}, "phase_s": {"load": 0.5}, "warnings": [], "phase_for_s": null}, '
        '"result": {"status": '
        '"complete", "passed": true, "fallback_size": 2, "fp32_flop_share": null, "evaluations": null, '
        '"elapsed_s": null, "reason": null, '
        '"capture_reused": false, "capture_s": null, "verdict": null, "label": null, "tone": null, "headline": null, '
        '"qualifiers": []}, '
        '"error": null, "links": {"self": "/jobs/a1"}, "files_removed": null}')
    assert json.dumps(JobView.from_json(json.loads(text)).to_json()) == text
    assert JobView("b", "queued", "m", spec={"search": {"budget": 3}}).to_json()["spec"] == {"search": {"budget": 3}}
    newer = JobView.from_json({"id": "c", "state": "paused", "name": "m", "progress": "later", "added": 1,
                               "result": {"status": "deferred", "passed": False}})
    assert newer.state == "paused" and newer.progress == Progress() and newer.result.status == "deferred"
    assert JobView.from_json({"id": "c", "state": "done", "name": "m", "result": {"status": "stopped"}}).result is None
    assert Result.from_json({"status": "stopped", "passed": False}).status is RunStatus.STOPPED
    assert Progress.from_json({"capture": ["x"]}).capture is None
    assert Progress.from_json({"phase": "search"}).warnings == []  # an older daemon's progress: no warnings key
    with pytest.raises(BadValue, match="bad key 'progress.evaluations': expected an integer, got 'x'"):
        JobView.from_json({"id": "c", "state": "done", "name": "m", "progress": {"evaluations": "x"}})
    with pytest.raises(BadValue, match="missing key 'id'"):
        JobView.from_json({"state": "done", "name": "m"})


def _text(data) -> str:
    return json.dumps(data, indent=2) + "\n"


def test_a_stored_report_serializes_as_before():
    """report_example.json (schema version 3) reads back to the same text, `verdict` right after `passed`."""
    text = (FIXTURES / "report_example.json").read_text()
    assert _text(Report.from_json(json.loads(text)).to_json()) == text
    assert list(json.loads(text)).index("verdict") == list(json.loads(text)).index("passed") + 1


def test_a_diagnose_runs_report_reads_back_to_the_same_text(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("cancellation", n=6)
    args = [a for f in files for a in ("--inputs", f)] + ["--atol", str(case.atol), "--rtol", str(case.rtol)]
    code, _, err = run_cli("diagnose", path, *args, "--confirm-backend", "ort-cpu", "--out", tmp_path / "run")
    assert code == 0, err
    text = (tmp_path / "run" / "report.json").read_text()
    rep = Report.load(tmp_path / "run")
    assert rep.checks.confirm is not None and rep.promise.validation is not None and rep.invocation is not None
    assert _text(rep.to_json()) == text
