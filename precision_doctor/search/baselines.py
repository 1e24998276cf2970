"""The searches users know: polygraphy's `debug precision` (bisect, linear) and onnxconverter-common's
segment splitting (`auto_mixed_precision.SegmentList`), driven through our oracle."""

from __future__ import annotations

import math

from precision_doctor.errors import UserError
from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace


def _select(universe: list[str], k: int, direction: str) -> frozenset[str]:
    return frozenset(universe[:k] if direction == "forward" else universe[len(universe) - k :])


def bisect(oracle: Oracle, space: SearchSpace, direction: str = "forward") -> frozenset[str] | None:
    """polygraphy's BisectMarker: binary search on how many leading (or trailing) layers run in FP32.

    Starts with every layer marked; the answer is a prefix (suffix) of the topological order.
    """
    n = len(space.universe)
    good, bad, k = n + 1, 0, n
    oracle.phase = f"bisect-{direction}"
    while True:
        success = oracle.passes(_select(space.universe, k, direction))
        if success:
            good, rnd = k, math.floor
        else:
            bad, rnd = k, math.ceil
        old, k = k, int(rnd((good + bad) / 2.0))
        if old == k or abs(good - bad) <= 1 or k > n:
            break
    return _select(space.universe, good, direction) if good <= n else None


def linear(oracle: Oracle, space: SearchSpace, direction: str = "forward") -> frozenset[str] | None:
    """polygraphy's LinearMarker: mark one more layer at a time until the check passes."""
    oracle.phase = f"linear-{direction}"
    for k in range(0, len(space.universe) + 1):
        fb = _select(space.universe, k, direction)
        if oracle.passes(fb):
            return fb
    return None


def segment(oracle: Oracle, space: SearchSpace) -> frozenset[str] | None:
    """onnxconverter-common's search: try converting the largest untried segment, split on failure."""
    try:
        from onnxconverter_common.auto_mixed_precision import SegmentList
    except ImportError as exc:
        raise UserError("strategy 'segment' needs onnxconverter-common (pip install onnxconverter-common)") from exc
    oracle.phase = "segment"
    segments = SegmentList(list(space.universe))
    while (seg := segments.get_largest()) is not None:
        if oracle.passes(segments.get_nodes(seg)):
            seg.good = True
        elif seg.size == 1:
            seg.bad = True
        else:
            seg.split()
    final = frozenset(segments.get_nodes())
    return final if oracle.passes(final) else None
