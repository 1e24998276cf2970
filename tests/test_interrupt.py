"""Ctrl-C during the search leaves a valid partial report with the best passing set so far."""

from __future__ import annotations

import json

from precision_doctor import planted
from precision_doctor.diagnose import DiagnoseOptions, run_diagnose
from precision_doctor.model import from_proto
from precision_doctor.tolerance import Tolerance
from precision_doctor.workload import InputOptions, Workload


def test_interrupt_keeps_best_passing_set(tmp_path):
    case = planted.three_defects()
    work = Workload(from_proto(case.model), case.samples(2), InputOptions())
    seen = []

    def on_eval(ev):
        seen.append(ev)
        if any(e.verdict.passed for e in seen) and len(seen) >= 4:
            raise KeyboardInterrupt

    opts = DiagnoseOptions(tolerance=Tolerance(case.atol, case.rtol))
    outcome = run_diagnose(work, [], opts, tmp_path, on_evaluation=on_eval)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert outcome.interrupted and rep["status"] == "interrupted"
    best = min((e for e in seen if e.verdict.passed), key=lambda e: len(e.fallback))
    assert sorted(rep["fallback_nodes"]) == sorted(best.fallback)
    assert rep["evaluations"] == len(seen)
    assert (tmp_path / "report.html").exists() and (tmp_path / "fixed.onnx").exists()
    assert len((tmp_path / "search.jsonl").read_text().splitlines()) == len(seen)
