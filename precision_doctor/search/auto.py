"""`auto`: sensitivity first, search second.

1. The empty set (everything in low precision) passes: done.
2. Galloping then binary search on k, over the union of the islands of the k top-ranked nodes
   (an island is a node plus the nodes it needs: across tensors out of the format's range, and
   the producers of its inputs when its error comes from rounded inputs).
3. Pruning to a 1-minimal set: first drop, in one evaluation, every member whose own error is
   rounding noise; then try removing members one at a time (the cheapest-to-lose first).
"""

from __future__ import annotations

from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace


def _prefix(space: SearchSpace, ranking: list[str], k: int) -> frozenset[str]:
    out: set[str] = set()
    for name in ranking[:k]:
        out |= space.unit(name)
    return frozenset(out)


def auto(oracle: Oracle, space: SearchSpace) -> frozenset[str] | None:
    oracle.phase = "baseline"
    if oracle.passes(()):
        return frozenset()
    ranking = list(space.ranking) or list(space.universe)
    ranking += [n for n in space.universe if n not in set(ranking)]
    n = len(ranking)

    oracle.phase = "gallop"
    lo, hi, k = 0, None, 1
    while hi is None:
        k = min(k, n)
        if oracle.passes(_prefix(space, ranking, k)):
            hi = k
        elif k == n:
            return None  # even every node in FP32 fails
        else:
            lo, k = k, 2 * k
    oracle.phase = "bisect-rank"
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _prefix(space, ranking, mid) == _prefix(space, ranking, hi):
            hi = mid
            continue
        if oracle.passes(_prefix(space, ranking, mid)):
            hi = mid
        else:
            lo = mid
    return prune(oracle, space, _prefix(space, ranking, hi))


def prune(oracle: Oracle, space: SearchSpace, current: frozenset[str]) -> frozenset[str]:
    """Remove members while the set still passes, until every member is needed (1-minimal)."""
    oracle.phase = "prune"
    noise = [x for x in current if space.scores.get(x, float("inf")) <= space.noise]
    if len(noise) >= 2 and len(noise) < len(current) and oracle.passes(current - set(noise)):
        current = current - set(noise)

    def order(x: str) -> tuple:
        # With a cost model, try to drop the expensive members first; otherwise the least sensitive.
        return (-space.costs.get(x, 1.0), space.scores.get(x, 0.0), x)

    # Repeat until a whole pass removes nothing: without monotonicity (seen on silero-vad, where a
    # node is needed only while another is in FP32) one pass is not 1-minimal. When the first
    # pass removes nothing, the check costs nothing more.
    changed = True
    while changed:
        changed = False
        for x in sorted(current, key=order):
            if x in current and oracle.passes(current - {x}):
                current = current - {x}
                changed = True
    return current
