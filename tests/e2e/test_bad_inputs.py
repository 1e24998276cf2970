"""The bad-input replay (tests/badinputs) under pytest.

The default suite runs one representative case per failure class (traceback, exit code, not one
line, message unclear, user file changed, behaviour); a case that badinputs/known.py lists as
failing is xfail(strict), so the fix that makes it pass must also take it off the list (the list is
empty since phase 2 of issue #11). The whole catalogue (about 250 cases, 5-8 minutes on 2 cores) runs
with PD_REPLAY=full and must fail exactly the cases known.py lists:

    PD_REPLAY=full .venv/bin/python -m pytest -q tests/e2e/test_bad_inputs.py
"""

from __future__ import annotations

import os

import pytest
from badinputs.cases import catalogue
from badinputs.known import KNOWN_FAILING
from badinputs.replay import compare_known, replay

REPRESENTATIVES = [  # one per failure class the replay found (the module that fixed it)
    "model/custom-domain-op",  # traceback (graph/model.py)
    "model/dynamic-dim-fails-at-run-time",  # traceback (graph/ort_session.run_session)
    "out/parent-is-a-file",  # traceback (results/rundir.py)
    "diagnose/max-evaluations=0",  # exit code (spec.validate)
    "usage/unknown-option",  # not one line (cli main)
    "inputs/corrupt-npz",  # message unclear (data/inputs.py)
    "range/markup-name",  # message unclear (rich markup off)
    "refs/wrong-shape",  # message unclear (data/references.py)
    "out/cwd-with-user-inputs-json",  # user file changed (results/rundir.py + manifest)
    "diagnose/backend=ort-cuda-no-gpu",  # behaviour: no --out left behind (results/rundir.open_run_dir)
    "out/stale-lock-of-dead-process",  # behaviour: a dead run's lock is taken over (results/runlock.py)
]


def test_catalogue_covers_every_command_and_knows_its_failures():
    cases = catalogue()
    ids = {c.id for c in cases}
    assert len(cases) >= 120
    assert {"compare", "diagnose", "batch", "report", "emit", "zoo", "env"} <= {c.command for c in cases}
    assert set(KNOWN_FAILING) <= ids, f"known.py names cases that do not exist: {set(KNOWN_FAILING) - ids}"
    assert set(REPRESENTATIVES) <= ids


@pytest.fixture(scope="module")
def outcomes():
    return {o.case.id: o for o in replay(ids=REPRESENTATIVES, jobs=2)}


@pytest.mark.parametrize("case_id", [
    pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILING[i])) if i in KNOWN_FAILING else i
    for i in REPRESENTATIVES
])
def test_representative_case(outcomes, case_id):
    o = outcomes[case_id]
    assert o.passed, "; ".join(f"{cls}: {detail}" for cls, detail in o.failures)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("PD_REPLAY") != "full", reason="the full replay runs with PD_REPLAY=full")
def test_full_replay_fails_exactly_the_known_cases():
    new, fixed = compare_known(replay(jobs=2))
    assert not new, f"new failures (fix them, or list them in badinputs/known.py): {new}"
    assert not fixed, f"now passing: remove from badinputs/known.py: {fixed}"
