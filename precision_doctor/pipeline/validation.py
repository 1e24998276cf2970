"""Checking one fallback set on samples (held-out ones, or every sample on another backend)."""

from __future__ import annotations

from precision_doctor.backends.base import Backend
from precision_doctor.data.inputs import Sample
from precision_doctor.measure.headroom import sample_checks
from precision_doctor.measure.tolerance import OutputCheck, Tolerance, merge
from precision_doctor.results.report import Validation


def check_on_samples(backend: Backend, fallback: frozenset[str], samples: list[Sample], refs: list[dict],
                     tol: Tolerance) -> Validation:
    """Run `fallback` on every sample (no early stop) and check each output against its reference."""
    return validation_of(sample_checks(backend, fallback, samples, refs, tol))


def validation_of(checks: list[dict[str, OutputCheck]]) -> Validation:
    """The Validation of per-sample checks (`measure.headroom.sample_checks`): outputs merged over samples."""
    per: dict[str, list] = {}
    for each in checks:
        for k, c in each.items():
            per.setdefault(k, []).append(c)
    failing = [i for i, each in enumerate(checks) if not all(c.passed for c in each.values())]
    return Validation(not failing, len(checks), failing, {k: merge(v) for k, v in per.items()})
