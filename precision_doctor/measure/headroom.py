"""How far an answer is from the tolerance on inputs it has not seen.

The search ends at the edge of the tolerance on the samples it searched (each removal spends some of
it), and the share of the tolerance an answer uses is an extreme over many output elements, tuned by
the search to those samples: on new inputs it is larger (docs/BENCHMARKS.md, "Generalization"). So
the figure worth reporting is the share on samples the search did not see: held-out user samples
when there are any, and fresh perturbed copies of the search samples (`data/augment.py`) always, which
move the share as much as new inputs do. From those:

- `sample_shares`: the share of the tolerance each sample uses for one fallback set, and whether it passed;
- `log_spread`, `margin_from_spread`: the margin that keeps a new input inside the tolerance with
  a given risk, from how much the share varies between samples (log-normal);
- `predicted_share`: the share a new input exceeds with that risk, from shares on unseen samples
  (bench/generalization.py compares these remedies; the pipeline's probe is pipeline/probe.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from precision_doctor.backends.registry import on_gpu
from precision_doctor.measure.checked import checked_runs
from precision_doctor.measure.tolerance import OutputCheck, Tolerance


@dataclass(frozen=True)
class SampleShare:
    """One sample checked with one fallback set: the share of the tolerance its worst output element
    uses (inf: NaN), and whether every output passed (a cosine floor or error statistic can fail below 1)."""

    share: float
    passed: bool


def sample_checks(backend, fallback: frozenset[str], samples: Sequence[dict], refs: Sequence[dict],
                  tol: Tolerance) -> list[dict[str, OutputCheck]]:
    """Each sample checked with `fallback` in FP32, output by output, every sample run (no early stop);
    nothing is prepared when there are no samples."""
    if not samples:
        return []
    runner = backend.prepare(frozenset(fallback))
    n = min(len(samples), len(refs))
    return [checks for _, checks in checked_runs(runner, samples, refs, range(n), tol, on_gpu(backend.name))]


def shares_of(checks: Sequence[dict[str, OutputCheck]]) -> list[SampleShare]:
    """Each sample's share (its worst output) and whether every output passed, from `sample_checks`."""
    return [SampleShare(max((c.tol_used for c in per.values()), default=0.0), all(c.passed for c in per.values()))
            for per in checks]


def sample_shares(backend, fallback: frozenset[str], samples: Sequence[dict], refs: Sequence[dict],
                  tol: Tolerance) -> list[SampleShare]:
    """Each sample's share with `fallback` in FP32, every sample run (no early stop)."""
    return shares_of(sample_checks(backend, fallback, samples, refs, tol))


def log_spread(shares: Sequence[float]) -> tuple[float, float] | None:
    """Mean and standard deviation of log(share) over the samples with a finite, positive share (None
    with fewer than two). Shares of one answer across inputs look log-normal: a sample's share is
    the product of its sensitivity and of which rounding errors line up, not a sum."""
    x = np.asarray([v for v in shares if np.isfinite(v) and v > 0], dtype=float)
    if x.size < 2:
        return None
    logs = np.log(x)
    return float(logs.mean()), float(logs.std(ddof=1))


def expected_max_z(n: int) -> float:
    """The expected largest of n standard normal draws (Blom's approximation; 0 for n = 1)."""
    return 0.0 if n <= 1 else NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def margin_from_spread(shares: Sequence[float], n_searched: int, risk: float,
                       cap: float = 0.6) -> float | None:
    """The search margin m under which a new input's share exceeds 1 with probability about `risk`,
    given the spread of log(share) over `shares` (one configuration, many samples) and a search that
    checks `n_searched` samples. The search ends where the largest of its n samples uses 1 - m, which
    for log-normal shares with deviation s sits about s * z_max(n) above their median; a new input
    exceeds 1 with probability `risk` at s * z_(1-risk) above it; so m = 1 - exp(-s (z_(1-risk) - z_max(n))),
    at most `cap`. None when the spread cannot be measured (fewer than two positive shares)."""
    spread = log_spread(shares)
    if spread is None:
        return None
    z_gap = NormalDist().inv_cdf(1 - risk) - expected_max_z(n_searched)
    return float(min(cap, max(0.0, 1.0 - np.exp(-spread[1] * z_gap))))


def predicted_share(shares: Sequence[float], risk: float, floor: float = 0.0) -> float | None:
    """The share a new input exceeds with probability `risk`, from the log-normal fitted to `shares` of
    inputs the search did not see (held-out samples, fresh perturbed copies); None without two. Shares
    below `floor` stay out of the fit: an input whose outputs saturate (a classifier sure of its class)
    uses next to none of the tolerance whatever runs in FP16, and says nothing about the inputs that do."""
    spread = log_spread([v for v in shares if v >= floor])
    if spread is None:
        return None
    mean, sd = spread
    return float(np.exp(mean + sd * NormalDist().inv_cdf(1 - risk)))
