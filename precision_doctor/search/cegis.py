"""Counterexample-guided search: many samples at the cost of a few.

Evaluating every candidate set on every sample makes N samples cost N times. Most samples never decide a
verdict: an answer that passes the hardest samples usually passes the rest. So (pipeline/search_loop.py runs
the loop; this module holds its parts, which touch no files):

- `score_samples`: every search sample is scored once by the share of the tolerance the all-low-precision
  configuration uses on it (one cheap run per sample), with its worst output and its shape group;
- `hardest`: the working set starts with the START hardest, spread over (shape group, worst output) buckets
  so that one kind of input cannot crowd out another;
- the strategy searches on the working set (and its perturbed copies) through an ordinary oracle;
- `counterexamples`: the answer is then run on the other search samples, hardest first, until `per_round` of
  them fail (or none does); the failing ones join the working set (`Oracle.tighten`: failing verdicts stay,
  passing ones are forgotten) and the search continues from the previous answer, until the answer passes
  every search sample or MAX_ROUNDS rounds (or the budget) end it.

Why these numbers: START = 4 keeps the first round as cheap as today's 2-4 sample search (with 4 or fewer
search samples the loop is that search, in one round). A check stops after COUNTEREXAMPLES = 3 failing samples, or
as many as the working set holds where that is more (`per_round`): one would need a round per failing sample, all
of them would grow the working set to N after one bad answer; so the working set at most doubles in a round, and k
counterexamples join in about log2(1 + k / 4) rounds, not k / 3 (whisper-base on the H200: 14 counterexamples, 3 a
round, took 217 s of rounds after the first, each attributing, growing and pruning again). The last round's check
and the check of a polished answer stop sooner (3 and 1 failing samples: nothing joins after them). MAX_ROUNDS = 8
allows the working set to grow to 4 x 2^7 samples before the loop says it stopped.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from precision_doctor.backends.base import Backend
from precision_doctor.backends.registry import on_gpu
from precision_doctor.data.inputs import Sample
from precision_doctor.measure.checked import checked_runs
from precision_doctor.measure.tolerance import Tolerance

START = 4  # the working set starts with this many search samples
COUNTEREXAMPLES = 3  # a check of an answer stops after this many failing samples, or `per_round`'s
MAX_ROUNDS = 8  # rounds of search + check, at most


def per_round(working: int) -> int:
    """How many failing samples a check collects before it stops, for a working set of `working` search samples:
    COUNTEREXAMPLES, or `working` where that is more (the working set at most doubles in a round)."""
    return max(COUNTEREXAMPLES, working)


@dataclass(frozen=True)
class SampleScore:
    """One search sample under the all-low-precision configuration: the share of the tolerance its worst
    output uses (inf: inf or NaN), which output that is, and its shape group (every input's shape)."""

    index: int
    share: float
    worst_output: str | None
    group: str

    @property
    def hardness(self) -> float:
        """The share, NaN counted as the hardest."""
        return math.inf if math.isnan(self.share) else self.share


def shape_group(sample: Sample) -> str:
    """The sample's shape group: every input's shape, e.g. "x:1x3x48x192"."""
    return ";".join(f"{k}:{'x'.join(map(str, np.shape(v)))}" for k, v in sorted(sample.items()))


def score_samples(backend: Backend, samples: Sequence[Sample], refs: Sequence[dict], tol: Tolerance,
                  check: Callable[[], None] | None = None) -> list[SampleScore]:
    """Each sample's score: one run of the all-low-precision configuration on `backend` (`check` is called
    before each run: a stop or a budget ends the scoring)."""
    runner = backend.prepare(frozenset())
    out = []
    for i, checks in checked_runs(runner, samples, refs, range(len(samples)), tol, on_gpu(backend.name), check):
        worst = max(checks.items(), key=lambda kv: np.nan_to_num(kv[1].tol_used, nan=np.inf), default=None)
        share = float(worst[1].tol_used) if worst is not None else 0.0
        out.append(SampleScore(i, share, worst[0] if worst is not None else None, shape_group(samples[i])))
    return out


def hardness_order(scores: Sequence[SampleScore]) -> list[int]:
    """Every sample's index, hardest first (ties: in the samples' order)."""
    return [s.index for s in sorted(scores, key=lambda s: (-s.hardness, s.index))]


def hardest(scores: Sequence[SampleScore], k: int) -> list[int]:
    """k samples, hardest first within each (shape group, worst output) bucket, taken from the buckets in turn
    (the bucket with the hardest sample first): every kind of input gets into the working set before a second
    one of any kind."""
    buckets: dict[tuple[str, str | None], list[SampleScore]] = {}
    for s in sorted(scores, key=lambda s: (-s.hardness, s.index)):
        buckets.setdefault((s.group, s.worst_output), []).append(s)
    queues = list(buckets.values())  # in the order of their hardest sample
    out: list[int] = []
    while len(out) < k and any(queues):
        for q in queues:
            if q and len(out) < k:
                out.append(q.pop(0).index)
    return out


@dataclass(frozen=True)
class Check:
    """An answer checked on samples outside the working set: how many ran and which failed."""

    checked: int
    failing: list[int]


def counterexamples(backend: Backend, fallback: frozenset[str], samples: Sequence[Sample], refs: Sequence[dict],
                    order: Sequence[int], tol: Tolerance, limit: int = COUNTEREXAMPLES,
                    check: Callable[[], None] | None = None) -> Check:
    """Run `fallback` on the samples `order` names, in that order (hardest first), until `limit` of them fail;
    `check` is called before each run (a stop or a budget ends it)."""
    runner = backend.prepare(frozenset(fallback))
    failing: list[int] = []
    checked = 0
    with contextlib.closing(checked_runs(runner, samples, refs, order, tol, on_gpu(backend.name), check)) as runs:
        for i, checks in runs:
            checked += 1
            if not all(c.passed for c in checks.values()):
                failing.append(i)
                if len(failing) >= limit:
                    break
    return Check(checked, failing)
