"""What one trial of a fallback set costs on a backend that makes a session per set (ONNX Runtime on CUDA): the
session (the mixed graph's rewrite, the session, and its first run's one-time work: cuDNN's algorithm search, memory
planning) against one more sample's run. The confirmation's choice of oracle rests on it (pipeline/confirmation.py):
a passing trial runs every sample in its oracle, a failing one stops at its first failing sample."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from precision_doctor.backends.base import Backend

RUNS = 3  # runs of one sample: the first carries the session's one-time work, the fastest of the others is a run's


@dataclass(frozen=True)
class TrialCost:
    """A trial's cost on a backend, measured on one set: `session_s` (the session and its first run's one-time work),
    `sample_s` (one more sample); `others`: the search samples outside the working set, which the confirmation's
    oracle holds from the start when `every_sample`, else checks once its answer passes the working set."""

    session_s: float
    sample_s: float
    others: int

    @property
    def every_sample(self) -> bool:
        """Every search sample in the oracle from the start when a new session costs at least what the other samples'
        runs cost in each passing trial (a further round's trials are new sessions; the samples are run in every
        passing trial): true of a convolution network at 1024x1024 whose session searches cuDNN's algorithms, not of
        a transformer whose lean session costs a few samples' runs."""
        return self.session_s >= self.others * self.sample_s


def trial_cost(backend: Backend, fallback: frozenset[str], samples: Sequence, refs: Sequence[dict],
               others: int) -> TrialCost:
    """`fallback`'s trial on `backend` timed on the first of `samples`, run RUNS times (its outputs: `refs`' keys, as
    the oracle runs them; one sample, so that no run pays a new shape's one-time work). For a backend that keeps its
    runners by set (the ORT backends): the oracle's first evaluation of the same set makes no second session."""
    t0 = time.perf_counter()
    runner = backend.prepare(fallback)
    made = time.perf_counter() - t0
    runs = []
    for _ in range(RUNS if len(samples) else 0):
        t = time.perf_counter()
        runner.run(samples[0], list(refs[0]))
        runs.append(time.perf_counter() - t)
    sample_s = min(runs[1:]) if len(runs) > 1 else (runs[0] if runs else 0.0)
    first = runs[0] if runs else 0.0
    return TrialCost(session_s=made + max(first - sample_s, 0.0), sample_s=sample_s, others=others)
