"""Zeller's ddmin: reduce the all-FP32 set to a 1-minimal passing set by removing chunks."""

from __future__ import annotations

from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace


def ddmin(oracle: Oracle, space: SearchSpace) -> frozenset[str] | None:
    oracle.phase = "ddmin"
    current = list(space.universe)
    if oracle.passes(()):
        return frozenset()
    if not oracle.passes(current):
        return None
    n = 2
    while len(current) >= 2:
        size = len(current)
        chunks = [current[i * size // n : (i + 1) * size // n] for i in range(n)]
        for chunk in chunks:  # reduce to a subset
            if chunk and oracle.passes(chunk):
                current, n = chunk, 2
                break
        else:
            for chunk in chunks:  # reduce to a complement
                rest = [x for x in current if x not in set(chunk)]
                if chunk and rest and oracle.passes(rest):
                    current, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= size:
                    break
                n = min(2 * n, size)
    return frozenset(current)
