"""The trade-off a user chooses from: the FP32 cost of a passing set against the tolerance, not only one point.

A set whose worst element uses a share s of the tolerance passes at any multiple m >= s of it and fails below
(for every check statistic: an element fails at m x (atol, rtol) exactly when min(abs/atol, rel/rtol) > m;
`measure/tolerance.py`). So the search's own evaluations already give points for free: every passing set,
with its share, is a set that holds from `s` x the tolerance up (`frontier`: the cheapest of them at each
share). A failing verdict says only that the set fails at multiples below its share on the sample it stopped at.

For the multipliers a user is likely to weigh (0.5x, 2x, 4x) the answer is also pruned again at that
tolerance: a fresh oracle on the same backend and samples with the tolerance scaled, its memo seeded with
what the search's verdicts decide at that multiple (not counted as evaluations), starting from the answer
(2x, 4x: it passes there) or from the known set with the fewest FP32 FLOPs that passes at 0.5x (else the
answer grown), each on a small evaluation and time budget (BUDGET_EACH evaluations; all of them together at
most TIME_SHARE of the search's time), then refined as the answer was (`search/refine.py`). The trade-off
ranks sets by what it shows, their FP32 FLOPs: at 2x and 4x the answer itself stands where the pruned set
keeps more. A point whose prune ran out of budget is an upper bound (`complete` false).
"""

from __future__ import annotations

import time

from precision_doctor.costs import FrontierPoint, Tradeoff, TradeoffPoint
from precision_doctor.search.auto import grow, prune
from precision_doctor.search.oracle import Budget, BudgetExhausted, Oracle, Verdict
from precision_doctor.search.space import SearchSpace
from precision_doctor.search.units import UnitOracle

MULTIPLIERS = (0.5, 2.0, 4.0)
BUDGET_EACH = 12  # evaluations for each multiplier's prune
TIME_SHARE = 0.25  # all the prunes together take at most this share of the search's time (at least MIN_TIME_S)
MIN_TIME_S = 3.0


def seeded_verdict(v: Verdict, multiplier: float) -> Verdict | None:
    """What a verdict at the tolerance decides at `multiplier` x it: pass, fail, or None (not decided)."""
    share = v.tol_used
    if share != share:  # NaN: not recorded
        return None
    if v.passed:  # every sample was checked: the share is exact
        return Verdict(share <= multiplier, {}, None if share <= multiplier else v.failed_sample)
    if share > multiplier:  # the sample it stopped at fails at the multiple too
        return Verdict(False, {}, v.failed_sample)
    return None


def _flops_of(space: SearchSpace):
    """What the trade-off ranks sets by: the FLOPs they keep in FP32 (what it shows), else their size."""
    cm = space.cost_model
    return (lambda fb: float(cm.fp32_flops(fb))) if cm is not None else (lambda fb: float(len(fb)))


def frontier(oracle: Oracle, space: SearchSpace) -> list[FrontierPoint]:
    """The passing sets of a search, cheapest first at each share: each point keeps fewer FP32 FLOPs than every
    point with a smaller share."""
    cost = _flops_of(space)
    passing = sorted(((v.tol_used, cost(fb), fb) for fb, v in oracle.memo.items()
                      if v.passed and v.tol_used == v.tol_used), key=lambda x: (x[0], x[1]))
    out, best = [], float("inf")
    cm = space.cost_model
    for share, cost, fb in passing:
        if cost < best:
            best = cost
            out.append(FrontierPoint(share, len(fb), cm.fp32_flop_share(fb) if cm else None,
                                     cm.deploy_us(fb) if cm else None))
    return out


def tradeoff(searched: Oracle, space: SearchSpace, answer: frozenset[str],
             multipliers: tuple[float, ...] = MULTIPLIERS, budget_each: int = BUDGET_EACH,
             time_s: float | None = None) -> Tradeoff:
    """The trade-off around `answer`, a passing set of the oracle `searched` (its backend, samples, references
    and tolerance are used again; its verdicts seed each multiple's memo). `time_s`: the prunes' time in all
    (default: TIME_SHARE of the time since the search began, at least MIN_TIME_S), shared out equally."""
    points = [_point(1.0, answer, space, True, 0)]
    spent = 0
    if time_s is None:
        time_s = max(MIN_TIME_S, TIME_SHARE * (time.monotonic() - searched.started))
    for m in multipliers:
        budget = Budget(max_evaluations=budget_each, time_s=time_s / max(len(multipliers), 1))
        o = Oracle(searched.backend, searched.samples, searched.references, searched.tolerance.scaled(m),
                   cost_of=_flops_of(space), budget=budget, stop=searched.stop)
        for fb, v in searched.memo.items():
            seeded = seeded_verdict(v, m)
            if seeded is not None:
                o.memo[fb] = seeded
        complete, found = True, None
        try:
            found = _search_at(o, space, answer, m)
        except BudgetExhausted:
            complete, found = False, o.best()
        if found is not None and m >= 1 and _flops_of(space)(answer) < _flops_of(space)(found):
            found = answer  # a prune over units may end costlier than the answer (its split groups, a spent budget)
        spent += o.evaluations
        points.append(_point(m, found, space, complete, o.evaluations) if found is not None
                      else TradeoffPoint(m, False, complete=complete, evaluations=o.evaluations))
    return Tradeoff(sorted(points, key=lambda p: p.multiplier), frontier(searched, space), spent)


def _search_at(o: Oracle, space: SearchSpace, answer: frozenset[str], m: float) -> frozenset[str] | None:
    """Prune from the answer (m >= 1) or from the cheapest known set passing at m (else the answer grown)."""
    o.phase = f"tradeoff-{m:g}x"
    grouping = space.grouping
    view = UnitOracle(o, space) if grouping is not None else o
    start = answer if m >= 1 else o.best()
    units = grouping.units(start if start is not None else answer) if grouping is not None else \
        frozenset(start if start is not None else answer)
    if start is None or not view.passes(units):
        units = grow(view, space, units)  # type: ignore[arg-type]
        if units is None:
            return None
    found = space.expand(prune(view, space, units))  # type: ignore[arg-type]
    if grouping is not None:  # split groups and close gaps as the search's answer did
        from precision_doctor.search.refine import refine

        found = refine(o, space, found).answer
    return found


def _point(m: float, fb: frozenset[str], space: SearchSpace, complete: bool, evaluations: int) -> TradeoffPoint:
    cm = space.cost_model
    return TradeoffPoint(m, True, len(fb), cm.fp32_flop_share(fb) if cm else None, cm.deploy_us(fb) if cm else None,
                         complete, evaluations, sorted(fb))
