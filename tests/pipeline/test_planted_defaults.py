"""Issue 33: the default pipeline gives the planted suite's certified minima (8 of 8) where the objective counts nodes;
under the default `deploy` objective it may keep a cheap node more where its Casts would cost more (three_defects)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from precision_doctor import api, planted
from precision_doctor.spec import InputSpec, RunSpec, Tolerance


def _spec(tmp_path, name: str, **settings) -> RunSpec:
    case = planted.CASES[name]()
    model = tmp_path / f"{name}.onnx"
    onnx.save(case.model, str(model))
    files = []
    for i, s in enumerate(case.samples(8)):
        files.append(tmp_path / f"{name}_{i}.npz")
        np.savez(files[-1], **s)
    spec = RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))),
                   tolerance=Tolerance(atol=case.atol, rtol=case.rtol))
    return spec.with_settings({"backends.backend": "emulate", **settings})


@pytest.mark.parametrize("name", sorted(planted.CASES))
def test_defaults_give_the_certified_minimum(name, tmp_path):
    """8 samples (2 held out), the default margin, no perturbed copies: the answer is the case's certified minimum
    and the held-out samples pass it."""
    report = api.diagnose(_spec(tmp_path, name, **{"search.cost": "nodes"}), tmp_path / "run")
    assert set(report.answer.fallback_nodes) == planted.CASES[name]().expected
    assert report.passed and report.promise.validation is not None and report.promise.validation.passed


def test_the_deploy_objective_keeps_more_only_as_closed_gaps(tmp_path):
    """three_defects under `deploy` keeps the minimum plus only nodes of the FP16 gaps it closed (their FP32
    arithmetic costs less than the Casts around them in FP16: search/refine.py) and of the fusion groups it keeps
    whole (a softmax runs as one kernel), each listed in report.json's `pricing`."""
    report = api.diagnose(_spec(tmp_path, "three_defects"), tmp_path / "run")
    minimum = planted.three_defects().expected
    extra = set(report.answer.fallback_nodes) - minimum
    assert set(report.answer.fallback_nodes) >= minimum and report.pricing is not None
    closed = {n for gap in report.pricing.gaps_closed for n in gap}
    whole = {n for g in report.pricing.groups if not g.released for n in g.kept}
    assert extra and extra <= closed | whole
