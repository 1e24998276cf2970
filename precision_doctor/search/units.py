"""Strategies over units: with the `deploy` objective a strategy moves fusion groups, not nodes.

A strategy sees the search space's universe (units) and an oracle; `UnitOracle` evaluates a set of units
as the nodes they stand for, on the real oracle (which memoizes, counts and checkpoints node sets). The
strategy's answer is expanded back to nodes and refined (`search/refine.py`: groups split where a member
alone is proven to matter, FP16 gaps closed where their Casts cost more), before anything validates it;
what the refinement did is appended to `space.refinements`. Strategies themselves never know.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from precision_doctor.search.oracle import Oracle, Verdict
from precision_doctor.search.space import SearchSpace

Strategy = Callable[[Oracle, SearchSpace], "frozenset[str] | None"]


class UnitOracle:
    """What a strategy calls an oracle, over units: `passes`, `evaluate`, `known` and `phase`."""

    def __init__(self, oracle: Oracle, space: SearchSpace, fixed: frozenset[str] = frozenset()):
        self.oracle, self.space, self.fixed = oracle, space, fixed

    @property
    def phase(self) -> str:
        return self.oracle.phase

    @phase.setter
    def phase(self, value: str) -> None:
        self.oracle.phase = value

    def nodes(self, units: Iterable[str]) -> frozenset[str]:
        """The node set a unit set stands for (with the nodes always kept, `fixed`)."""
        return self.space.expand(units) | self.fixed

    def evaluate(self, units: Iterable[str], phase: str | None = None) -> Verdict:
        return self.oracle.evaluate(self.nodes(units), phase)

    def passes(self, units: Iterable[str], phase: str | None = None) -> bool:
        return self.evaluate(units, phase).passed

    def known(self, units: Iterable[str]) -> Verdict | None:
        return self.oracle.known(self.nodes(units))


def on_units(strategy: Strategy) -> Strategy:
    """`strategy` run over the space's units where it has fusion groups, its answer given back in nodes."""

    def run(oracle: Oracle, space: SearchSpace) -> frozenset[str] | None:
        if space.grouping is None:
            return strategy(oracle, space)
        from precision_doctor.search.refine import refine

        found = strategy(UnitOracle(oracle, space), space)  # type: ignore[arg-type]
        if found is None:
            return None
        refined = refine(oracle, space, space.expand(found))
        space.refinements.append(refined)
        return refined.answer

    run.__doc__ = strategy.__doc__
    return run
