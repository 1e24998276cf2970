"""The lifecycle of what holds ONNX Runtime sessions (backends/base.SessionHolder, after polygraphy's runners): active
from construction until `close()`, a ResourceWarning when one is garbage-collected while active, and a diagnose that
leaves none of its own active."""

from __future__ import annotations

import gc
import warnings

import pytest

from precision_doctor import api, planted
from precision_doctor.backends.base import active_holders
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.ort_gated import OrtGatedBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.spec import BackendSpec, InputSpec, RunSpec

LEAK = "garbage-collected while active"


def _leaks(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning) and LEAK in str(w.message)]


@pytest.fixture
def model():
    return from_proto(planted.CASES["three_defects"]().model)


def test_a_holder_is_active_until_closed_and_closing_twice_is_silent(model):
    cpu = ["CPUExecutionProvider"]
    holders = [EmulateBackend(model), OrtBackend(model, providers=cpu), OrtGatedBackend(model, providers=cpu),
               ReferenceRunner(model)]
    assert all(h.is_active for h in holders) and set(holders) <= set(active_holders())
    gated = holders[2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for h in holders:
            h.close()
            h.close()
    assert not caught
    assert not any(h.is_active for h in holders) and not gated.mixed.is_active  # the gated one closes its mixed backend
    assert not set(holders) & set(active_holders())
    assert holders[0].session is None and holders[3].session is None  # the sessions are released
    with EmulateBackend(model) as backend:
        assert backend.is_active
    assert not backend.is_active


def test_a_leaked_active_holder_warns_when_collected(model):
    with pytest.warns(ResourceWarning, match=f"EmulateBackend 'emulate' was {LEAK}"):
        EmulateBackend(model)  # never closed: collected at once (no other reference)
        gc.collect()
    with pytest.warns(ResourceWarning, match=f"ReferenceRunner 'reference' was {LEAK}"):
        runner = ReferenceRunner(model)
        del runner
        gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        EmulateBackend(model).close()
        gc.collect()
    assert not _leaks(caught)  # a closed one is quiet


def test_diagnose_leaves_no_session_holder_active(planted_file, tmp_path):
    case, path, files = planted_file("three_defects", n=4)
    spec = RunSpec(str(path), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(case.atol, case.rtol),
                   backends=BackendSpec(backend="emulate", confirm_backend="ort-cpu"))
    gc.collect()  # what earlier tests leaked goes now, not inside the run
    before = set(active_holders())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        report = api.diagnose(spec, tmp_path / "run")
        gc.collect()
    assert report.checks.confirm is not None and report.checks.confirm.backend == "ort-cpu"
    # emulate, ort-cpu and the reference ran
    assert not _leaks(caught)
    assert not set(active_holders()) - before
