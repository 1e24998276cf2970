"""What n samples no search saw, k of which failed, say about the failure rate on new inputs of the same kind.

The exact one-sided Clopper-Pearson upper bound: the largest failure rate p at which seeing at most k failures in
n samples still has probability at least 1 - confidence. It holds for any k (the rule of three, 3/n, is its
k = 0 approximation) and is computed from the binomial CDF by bisection (no SciPy): 0 of 60 -> 4.87%,
1 of 100 -> 4.66%, n of n -> 100%.
"""

from __future__ import annotations

import math

METHOD = "one-sided Clopper-Pearson (exact binomial)"
CONFIDENCE = 0.95  # the confidence every held-out bound is stated at


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (exact for the n of calibration sets)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)
    logs = [lgn - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq for i in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(x - top) for x in logs))


def failure_rate_upper(failures: int, n: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson upper bound on the failure rate after `failures` failures in `n` samples
    (1.0 with no samples or when all failed)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if failures < 0 or failures > n:
        raise ValueError(f"failures must lie in [0, n], got {failures} of {n}")
    if n == 0 or failures == n:
        return 1.0
    alpha = 1.0 - confidence
    lo, hi = failures / n, 1.0  # binomial_cdf(failures, n, p) falls from >= alpha at lo to 0 at 1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if binomial_cdf(failures, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def samples_for_bound(rate: float, confidence: float = 0.95) -> int:
    """How many samples, all passing, bound the failure rate at `rate`: the smallest n with (1 - rate)^n <=
    1 - confidence (59 for 5% at 95%)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate must lie in (0, 1), got {rate}")
    n = math.ceil(math.log(1.0 - confidence) / math.log1p(-rate))
    while n > 1 and failure_rate_upper(0, n - 1, confidence) <= rate:  # guard the rounding of the logarithms
        n -= 1
    while failure_rate_upper(0, n, confidence) > rate:
        n += 1
    return n
