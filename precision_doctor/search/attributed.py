"""Growth by attribution: a set that fails some samples grows only by the nodes those samples' error is attributed to.

An answer found on some samples can fail another one (a counterexample among the search samples, a sample the
GPU's real kernels fail, a held-out sample). Growing it along the search's global ranking, or searching again
at a stricter margin, adds nodes the failing sample does not need: on a byte-level file classifier answers of
50 and 72 nodes failed the two unusual files a 16-node set held on (issue 33). So growth asks the failing
samples themselves: each candidate node's local error on them (the node computed in low precision from that
sample's exact FP32 inputs, as the capture measures it) is the node's attributed score; only nodes with a
score above zero are named, most attributed first (a node whose low-precision result is exact on those samples
is never added), each with its island (`SearchSpace.unit`). `grow` then adds the shortest passing prefix of
that ranking, and what was added is pruned again (`prune`, never below the starting set): the failing samples
decide what stays. Where the named nodes do not make the set pass because another sample now fails, that
sample is attributed too and growth goes on from there (ATTRIBUTION_ROUNDS at most).

The oracle and the space are all a strategy sees; `attribute(indices)` (the caller's: pipeline/growth.py)
maps the oracle's sample indices to per-node scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from precision_doctor.search.auto import grow, prune
from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace

Attributor = Callable[[Sequence[int]], Mapping[str, float]]  # oracle sample indices -> node -> attributed score
ATTRIBUTION_ROUNDS = 4  # failing samples attributed one after another at most


def attributed(space: SearchSpace, scores: Mapping[str, float]) -> SearchSpace:
    """`space` whose growth adds only the nodes `scores` names (score above zero), most attributed first (ties in
    topological order); over units where the space has fusion groups (a unit's score is its members' largest)."""
    order = {n: i for i, n in enumerate(space.universe)}
    if space.grouping is not None:
        unit_scores: dict[str, float] = {}
        for n, v in scores.items():
            for u in space.grouping.units([n]):
                unit_scores[u] = max(unit_scores.get(u, 0.0), v)
        scores = unit_scores
    named = [n for n, v in scores.items() if n in order and (v > 0 or math.isnan(v))]
    ranking = sorted(named, key=lambda n: (-_key(scores[n]), order[n]))
    return replace(space, ranking=ranking, scores={n: scores[n] for n in named}, growth_only=True,
                   refinements=space.refinements)


def _key(v: float) -> float:
    return math.inf if math.isnan(v) else v


def growth_names(space: SearchSpace, scores: Mapping[str, float]) -> frozenset[str]:
    """Every node growth by `scores` may add: the named nodes with their islands (in nodes, groups expanded)."""
    sp = attributed(space, scores)
    out: set[str] = set()
    for u in sp.ranking:
        out |= sp.unit(u)
    return space.expand(out)


def attributed_repair(oracle: Oracle, space: SearchSpace, start: frozenset[str], attribute: Attributor, *,
                      failing: Sequence[int] = (), prune_after: bool = True) -> frozenset[str] | None:
    """`start` if it passes on `oracle`; else `start` grown by the nodes its failing samples (`failing`, the oracle's
    indices of samples known to fail it, and those the oracle finds) are attributed to, then what was added pruned
    again while the set passes (`prune_after`). None when the attributed nodes cannot make it pass. Over units (fusion
    groups) a group partly in `start` stays as it is while `start` passes, and counts whole once the set has to grow."""
    oracle.phase = "attribute"
    if oracle.passes(start):
        return start
    if space.grouping is not None:
        from precision_doctor.search.units import UnitOracle

        units = space.grouping.units(start)
        found = _repair(UnitOracle(oracle, space), space, units, attribute, failing, prune_after)  # type: ignore[arg-type]
        return None if found is None else space.expand(found)
    return _repair(oracle, space, start, attribute, failing, prune_after)


def _repair(oracle: Oracle, space: SearchSpace, start: frozenset[str], attribute: Attributor,
            failing: Sequence[int], prune_after: bool) -> frozenset[str] | None:
    oracle.phase = "attribute"
    current, named, sp = start, list(dict.fromkeys(failing)), None
    for _ in range(ATTRIBUTION_ROUNDS):
        verdict = oracle.evaluate(current)
        if verdict.passed:
            break
        if verdict.failed_sample is not None and verdict.failed_sample not in named:
            named.append(verdict.failed_sample)
        elif sp is not None:  # its attributed nodes were all added and it still fails: no answer by attribution
            return None
        if not named:
            return None
        sp = attributed(space, attribute(named))
        grown = grow(oracle, sp, current)
        if grown is None:  # even every attributed node fails: on which sample, the next round asks
            grown = current | _all(sp)
            if grown == current:
                return None
        current = grown
    else:
        if not oracle.passes(current):
            return None
    if not prune_after or current == start or sp is None:
        return current
    return prune(oracle, sp, current, keep=start)


def _all(space: SearchSpace) -> frozenset[str]:
    out: set[str] = set()
    for u in space.ranking:
        out |= space.unit(u)
    return frozenset(out)
