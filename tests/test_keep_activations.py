"""`--keep-activations none|summary|all` (capture.keep, pipeline/keep.py): what activations.h5 keeps once the
report is written, and that `report`, `rerender` and `--resume` work with each."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from precision_doctor import api
from precision_doctor.control import EvaluationEvent, StopToken
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, ActivationStore, whole
from precision_doctor.measure.analysis import MEMO
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline import diagnose as diagnose_module
from precision_doctor.pipeline.compare import reanalyse
from precision_doctor.spec import CaptureSpec, InputSpec, RunSpec, SearchSpec


def _spec(case, path, files, keep: str, **search) -> RunSpec:
    return RunSpec(str(path), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(case.atol, case.rtol),
                   capture=CaptureSpec(keep=keep), search=SearchSpec(**search))


def _evaluations(run) -> int:
    return (run / "search.jsonl").read_text().count("\n")


@pytest.mark.parametrize("keep", ["all", "summary", "none"])
def test_each_value_keeps_report_rerender_and_resume_working(planted_file, tmp_path, keep):
    case, path, files = planted_file("three_defects", n=4)
    spec = _spec(case, path, files, keep)
    run = tmp_path / "run"
    first = api.diagnose(spec, run)
    store = run / "activations.h5"
    assert first.passed
    key = {"all": "activations", "summary": "activations_summary"}.get(keep)
    assert {k for k in first.artifacts if k.startswith("activations")} == ({key} if key else set())
    assert store.is_file() == (keep != "none") and whole(store) == (keep == "all")
    assert not (run / ".activations.h5.summary").exists()

    again = api.rerender(run)  # report/rerender read report.json only
    assert again.fallback_nodes == first.fallback_nodes and (run / "report.html").is_file()

    evaluations = _evaluations(run)
    captured = []
    real = diagnose_module.capture_and_analyse
    diagnose_module.capture_and_analyse = lambda *a, **k: captured.append(1) or real(*a, **k)
    try:
        resumed = api.diagnose(spec, run, resume=True)
    finally:
        diagnose_module.capture_and_analyse = real
    assert resumed.fallback_nodes == first.fallback_nodes and resumed.passed
    assert _evaluations(run) == evaluations  # the search replayed, nothing evaluated again
    assert captured == ([] if keep == "all" else [1])  # a summary or no file: captured again
    assert store.is_file() == (keep != "none") and whole(store) == (keep == "all")


def test_summary_keeps_the_analysis_and_every_runs_outputs(planted_file, tmp_path):
    case, path, files = planted_file("three_defects", n=4)
    full, brief = tmp_path / "all", tmp_path / "summary"
    api.diagnose(_spec(case, path, files, "all"), full)
    api.diagnose(_spec(case, path, files, "summary"), brief)
    big, small = (full / "activations.h5").stat().st_size, (brief / "activations.h5").stat().st_size
    assert small < big / 3, (small, big)
    outputs = [o.name for o in case.model.graph.output]
    with ActivationStore(brief / "activations.h5") as s, ActivationStore(full / "activations.h5") as f:
        assert s.read_text(MEMO) == f.read_text(MEMO)
        assert set(s.runs()) == set(f.runs()) == {REFERENCE, LOWP, LOCAL, "fixed"}
        for run in s.runs():
            kept = [n for n in outputs if f.has(run, n)]
            assert s.tensor_names(run) == kept
            for name in kept:
                np.testing.assert_array_equal(s.read(run, name), f.read(run, name))  # NaN where it was
        assert set(s.file.attrs) - set(f.file.attrs) == {"kept"}
    # the kept analysis and the output verdict read from the summary are the whole store's
    tol = Tolerance(case.atol / 2, case.rtol / 2)
    kept, every = (json.dumps(reanalyse(d / "activations.h5", tol).to_dict(), sort_keys=True) for d in (brief, full))
    assert kept == every  # (as JSON: NaN where the outputs overflow)


def test_a_run_cut_off_keeps_its_whole_capture_until_it_completes(planted_file, tmp_path):
    """Interrupted (a stop after two evaluations): the whole capture stays and --resume uses it; the run that
    completes then keeps what `keep` says. A run whose budget ran out keeps what `keep` says and, continued with
    a larger budget, captures again."""
    case, path, files = planted_file("three_defects", n=4)
    run = tmp_path / "run"
    stop = StopToken()

    def progress(event) -> None:
        if isinstance(event, EvaluationEvent) and event.step >= 2:
            stop.stop("test")

    report = api.diagnose(_spec(case, path, files, "none"), run, progress=progress, stop=stop)
    assert report.status == "interrupted"
    assert whole(run / "activations.h5") and "activations" in report.artifacts
    finished = api.diagnose(_spec(case, path, files, "none"), run, resume=True)
    assert finished.status == "complete" and not (run / "activations.h5").exists()

    budget = tmp_path / "budget"
    short = api.diagnose(_spec(case, path, files, "summary", max_evaluations=2), budget)
    assert short.status == "budget_exhausted" and not whole(budget / "activations.h5")
    evaluations = _evaluations(budget)
    more = api.diagnose(_spec(case, path, files, "summary", max_evaluations=500), budget, resume=True)
    assert more.status == "complete" and more.passed and _evaluations(budget) > evaluations


def test_bad_value_is_one_line_naming_the_flag(planted_file, run_cli, tmp_path):
    case, path, files = planted_file("three_defects", n=2)
    code, _, err = run_cli("diagnose", path, "--inputs", files[0], "--keep-activations", "some", "--out", tmp_path / "r")
    assert code == 2 and "--keep-activations must be one of none, summary, all, got 'some'" in err, err
    assert not (tmp_path / "r").exists()


def test_summary_file_is_readable_without_precision_doctor(planted_file, tmp_path):
    """A summary is a plain HDF5 file: the per-layer analysis as JSON, the outputs as datasets."""
    case, path, files = planted_file("three_defects", n=2)
    api.diagnose(_spec(case, path, files, "summary"), tmp_path / "run")
    with h5py.File(tmp_path / "run" / "activations.h5", "r") as f:
        assert f.attrs["kept"] == "summary"
        layers = json.loads(f[MEMO][()])["layers"]
        assert {row["name"] for row in layers} >= {n.name for n in case.model.graph.node if n.op_type == "Exp"}
