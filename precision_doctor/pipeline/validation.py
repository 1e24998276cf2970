"""Checking one fallback set on samples (held-out ones, or every sample on another backend)."""

from __future__ import annotations

from precision_doctor.backends.base import Backend
from precision_doctor.data.inputs import Sample
from precision_doctor.measure.tolerance import Tolerance, check_all, merge


def check_on_samples(backend: Backend, fallback: frozenset[str], samples: list[Sample], refs: list[dict],
                     tol: Tolerance) -> dict:
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
    outs = {k: merge(v) for k, v in per.items()}
    return {
        "passed": not failing,
        "samples": len(samples),
        "failing_samples": failing,
        "outputs": {k: v.to_dict() for k, v in outs.items()},
    }
