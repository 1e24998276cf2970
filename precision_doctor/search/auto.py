"""`auto`: sensitivity first, search second.

1. The empty set (everything in low precision) passes: done.
2. A starting set. When the capture's ranking carries information (some node's own error is above
   rounding noise): galloping then binary search on k, over the union of the islands of the k
   top-ranked nodes (an island is a node plus the nodes it needs: across tensors out of the format's
   range, and the producers of its inputs when its error comes from rounded inputs). When every node
   is noise (error spread over the whole network), the ranking is no better than a coin: start from
   every candidate in FP32.
3. Pruning to a 1-minimal set, in topological order so that what runs in low precision forms
   contiguous regions (a region's error enters at its borders; scattered single nodes each pay
   their own input and output rounding):
   - drop, in one evaluation, every member whose own error is rounding noise (informative case);
   - coarse: halve the members breadth-first (onnxconverter-common's segment order) and convert
     each block that passes, while blocks are large; this finds the long convertible runs first;
   - sweep: walk the rest in topological order, removing runs whose length doubles after a streak
     of successes and halves on failure, so dense regions cost one evaluation per node and long
     convertible runs a logarithmic number;
   - repeat single-node sweeps until nothing changes (the oracle need not be monotone), for sets of
     up to CERTIFY_MAX members; above that, 1-minimality rests on monotonicity, and the report says
     whether every member's removal was seen to fail.
"""

from __future__ import annotations

from collections.abc import Callable

from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace

COARSE_MIN = 16  # coarse blocks are at least this long
COARSE_ALWAYS = 32  # levels with blocks at least this long are always tried
GROW_AFTER = 3  # a run doubles after this many removals in a row
CERTIFY_MAX = 64  # re-sweep until stable only for answers up to this size


def _prefix(space: SearchSpace, ranking: list[str], k: int) -> frozenset[str]:
    out: set[str] = set()
    for name in ranking[:k]:
        out |= space.unit(name)
    return frozenset(out)


def auto(oracle: Oracle, space: SearchSpace) -> frozenset[str] | None:
    oracle.phase = "baseline"
    if oracle.passes(()):
        return frozenset()
    if space.informative:
        start = ranked_prefix(oracle, space)
    else:
        oracle.phase = "all-fp32"
        start = frozenset(space.universe) if oracle.passes(space.universe) else None
    return None if start is None else prune(oracle, space, start)


def ranked_prefix(oracle: Oracle, space: SearchSpace) -> frozenset[str] | None:
    """The shortest passing prefix of the ranking (as islands): gallop on k, then bisect."""
    ranking = list(space.ranking) or list(space.universe)
    ranking += [n for n in space.universe if n not in set(ranking)]
    return shortest_passing(oracle, lambda k: _prefix(space, ranking, k), len(ranking), ("gallop", "bisect-rank"))


def shortest_passing(
    oracle: Oracle, make: Callable[[int], frozenset[str]], n: int, phases: tuple[str, str],
) -> frozenset[str] | None:
    """make(k) for the smallest k in 1..n that passes, assuming larger k pass once one does: gallop on
    k, then bisect. None when make(n) fails."""
    oracle.phase = phases[0]
    lo, hi, k = 0, None, 1
    while hi is None:
        k = min(k, n)
        if oracle.passes(make(k)):
            hi = k
        elif k >= n:
            return None
        else:
            lo, k = k, 2 * k
    oracle.phase = phases[1]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if make(mid) == make(hi):
            hi = mid
            continue
        if oracle.passes(make(mid)):
            hi = mid
        else:
            lo = mid
    return make(hi)


def repair(oracle: Oracle, space: SearchSpace, start: frozenset[str], prune_after: bool = True,
           keep_start: bool = False, keep_if_passes: bool = False) -> frozenset[str] | None:
    """Carry a set of nodes found with another oracle (the emulator) over to this one (a real backend): keep it
    if it passes here, else add the fewest further nodes that make it pass (`grow`); then prune to a
    1-minimal set on this oracle (`prune_after`; off where this oracle may only check, never remove a node),
    only what was added when `keep_start` (each removal tried costs one evaluation there); `keep_if_passes`:
    a `start` that passes here as it is is not pruned (it is 1-minimal already on kernels like these), one that
    had to grow is. Over units (fusion groups, search/units.py): a group partly in `start` stays as it is while
    `start` passes, and counts whole once the set has to grow."""
    oracle.phase = "confirm"
    if oracle.passes(start) and (not prune_after or keep_start or keep_if_passes):
        return start
    if space.grouping is not None:
        from precision_doctor.search.units import UnitOracle

        units = space.grouping.units(start)
        found = _repair(UnitOracle(oracle, space), space, units, prune_after, keep_start)  # type: ignore[arg-type]
        return None if found is None else space.expand(found)
    return _repair(oracle, space, start, prune_after, keep_start)


def _repair(oracle: Oracle, space: SearchSpace, start: frozenset[str], prune_after: bool,
            keep_start: bool) -> frozenset[str] | None:
    current = start
    if not oracle.passes(start):
        current = grow(oracle, space, start)
        if current is None:
            return None
    if not prune_after or (keep_start and current == start):
        return current
    return prune(oracle, space, current, keep=start if keep_start else frozenset())


def polish(oracle: Oracle, space: SearchSpace, current: frozenset[str]) -> frozenset[str]:
    """Single-member removals over all of `current` until none goes (1-minimal; above CERTIFY_MAX members one
    pass): what a set grown with only its additions pruned (`repair`'s `keep_start`) still owes. Over units
    where the space has them. Each removal that fails costs one evaluation stopped at its first failing sample."""
    if space.grouping is not None:
        from precision_doctor.search.units import UnitOracle

        units = space.grouping.units(current)
        return space.expand(_polish(UnitOracle(oracle, space), space, units))  # type: ignore[arg-type]
    return _polish(oracle, space, current)


def _polish(oracle: Oracle, space: SearchSpace, current: frozenset[str]) -> frozenset[str]:
    if space.objective == "flops":
        return _prune_by_cost(oracle, space, current)
    oracle.phase = "certify"
    current, removed = sweep(oracle, space, current, grow=False)
    while removed and len(current) <= CERTIFY_MAX:
        current, removed = sweep(oracle, space, current, grow=False)
    return current


def grow(oracle: Oracle, space: SearchSpace, start: frozenset[str]) -> frozenset[str] | None:
    """`start` plus the shortest passing prefix of the other nodes (ranked islands when the ranking is
    informative, else topological order; only the ranking's members where the space says `growth_only`: growth by
    attribution, search/attributed.py); None when even every node added fails."""
    if space.growth_only:
        order = list(space.ranking)
    else:
        order = (list(space.ranking) + list(space.universe)) if space.informative else list(space.universe)
    rest = list(dict.fromkeys(n for n in order if n not in start))
    return shortest_passing(oracle, lambda k: start | _prefix(space, rest, k), len(rest), ("grow", "bisect-grow"))


def prune(oracle: Oracle, space: SearchSpace, current: frozenset[str], keep: frozenset[str] = frozenset()) -> frozenset[str]:
    """Remove members (never those in `keep`) while the set still passes, until every member that may go is
    needed (1-minimal over them)."""
    oracle.phase = "prune"
    noise = [x for x in current - keep if space.scores.get(x, float("inf")) <= space.noise]
    if len(noise) >= 2 and len(noise) < len(current) and oracle.passes(current - set(noise)):
        current = current - set(noise)
    if space.objective == "flops":
        return _prune_by_cost(oracle, space, current, keep)
    oracle.phase = "coarse"
    current = coarse(oracle, space, current, keep)
    oracle.phase = "sweep"
    current, removed = sweep(oracle, space, current, keep=keep)
    oracle.phase = "certify"
    while removed and len(current) <= CERTIFY_MAX:  # a removal can make an earlier member removable
        current, removed = sweep(oracle, space, current, grow=False, keep=keep)
    return current


def coarse(oracle: Oracle, space: SearchSpace, current: frozenset[str], keep: frozenset[str] = frozenset()) -> frozenset[str]:
    """Segment order on large blocks: halve every failing block, level by level, converting what passes.

    Levels of blocks at least COARSE_ALWAYS long are always tried; shorter ones only while the level
    before converted something; no block is shorter than COARSE_MIN.
    """
    failing = [space.in_order(current - keep)]
    while True:
        level = [half for b in failing if len(b) >= 2 * COARSE_MIN for half in (b[: len(b) // 2], b[len(b) // 2 :])]
        if not level:
            return current
        failing, converted = [], False
        for block in level:
            if oracle.passes(current - set(block)):
                current, converted = current - set(block), True
            else:
                failing.append(block)
        if not converted and len(level[0]) // 2 < COARSE_ALWAYS:
            return current


def sweep(oracle: Oracle, space: SearchSpace, current: frozenset[str], grow: bool = True,
          keep: frozenset[str] = frozenset()) -> tuple[frozenset[str], int]:
    """Walk the members (not those in `keep`) in topological order removing runs: a run doubles after
    GROW_AFTER removals in a row and halves on failure; a single member that cannot go is kept. Returns the
    set and how many went."""
    pending = space.in_order(current - keep)
    run, streak, removed = 1, 0, 0
    while pending:
        run = min(run, len(pending))
        block = pending[:run]
        if oracle.passes(current - set(block)):
            current, pending, removed = current - set(block), pending[run:], removed + run
            streak += 1
            if grow and streak >= GROW_AFTER:
                run *= 2
        elif run == 1:
            pending, streak = pending[1:], 0
        else:
            run, streak = run // 2, 0
    return current, removed


def _prune_by_cost(oracle: Oracle, space: SearchSpace, current: frozenset[str],
                   keep: frozenset[str] = frozenset()) -> frozenset[str]:
    """With a cost model: try to drop the expensive members (not those in `keep`) first, one at a time,
    until stable."""

    def order(x: str) -> tuple:
        return (-space.costs.get(x, 1.0), space.scores.get(x, 0.0), x)

    changed = True
    while changed:
        changed = False
        for x in sorted(current - keep, key=order):
            if x in current and oracle.passes(current - {x}):
                current = current - {x}
                changed = True
    return current
