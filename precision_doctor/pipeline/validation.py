"""Checking one fallback set on samples (held-out ones, or every sample on another backend)."""

from __future__ import annotations

from precision_doctor.backends.base import Backend
from precision_doctor.data.inputs import Sample
from precision_doctor.measure.tolerance import Tolerance, check_all, merge
from precision_doctor.results.report import Validation


def check_on_samples(backend: Backend, fallback: frozenset[str], samples: list[Sample], refs: list[dict],
                     tol: Tolerance) -> Validation:
    """Run `fallback` on every sample (no early stop) and check each output against its reference."""
    runner = backend.prepare(fallback)
    per: dict[str, list] = {}
    failing = []
    for i, (s, r) in enumerate(zip(samples, refs)):
        checks = check_all(runner.run(s, list(r)), r, tol)
        for k, c in checks.items():
            per.setdefault(k, []).append(c)
        if not all(c.passed for c in checks.values()):
            failing.append(i)
    return Validation(not failing, len(samples), failing, {k: merge(v) for k, v in per.items()})


def check_on_samples_as_dict(backend: Backend, fallback: frozenset[str], samples: list[Sample], refs: list[dict],
                             tol: Tolerance) -> dict:
    """`check_on_samples` as plain dicts ({"passed", "samples", "failing_samples", "outputs": {name: check
    as a dict}}), the form scripts written against the earlier API read (bench/gpu_fidelity.py)."""
    v = check_on_samples(backend, fallback, samples, refs, tol)
    return {"passed": v.passed, "samples": v.samples, "failing_samples": v.failing_samples,
            "outputs": {k: c.to_dict() for k, c in v.outputs.items()}}
