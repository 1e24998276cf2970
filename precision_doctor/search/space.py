"""What a strategy may know besides the oracle: the candidates, their ranking, islands and costs.

Nothing here runs the model: it is derived from the graph and the capture's analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model
from precision_doctor.measure.analysis import Analysis


@dataclass
class SearchSpace:
    """Candidates in topological order, the sensitivity ranking and the island of each node."""

    universe: list[str]
    ranking: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    units: dict[str, frozenset[str]] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    noise: float = 0.0  # scores at or below this are rounding noise

    def cost(self, fallback: frozenset[str]) -> float:
        return float(sum(self.costs.get(n, 1.0) for n in fallback))

    def unit(self, name: str) -> frozenset[str]:
        return self.units.get(name, frozenset({name}))

    @property
    def informative(self) -> bool:
        """Whether the ranking says anything: some node's own error is above rounding noise."""
        return any(v > self.noise for v in self.scores.values())

    def in_order(self, nodes: frozenset[str] | set[str]) -> list[str]:
        """`nodes` in topological order."""
        return [n for n in self.universe if n in nodes]


def build_space(model: Model, analysis: Analysis | None, fmt: Format, cost: str = "nodes") -> SearchSpace:
    """The search space of a model; islands come from range facts and input sensitivity."""
    universe = [n.name for n in model.candidates]
    costs = {n.name: (float(max(n.flops, 1)) if cost == "flops" else 1.0) for n in model.candidates}
    if analysis is None:
        return SearchSpace(universe, list(universe), {}, {}, costs)
    rows = {r.name: r for r in analysis.layers}
    ranking = [r for r in analysis.ranking if r in rows]
    scores = {r.name: r.score for r in analysis.layers}
    tensor_absmax = {t.name: t.stats.ref_absmax for t in analysis.tensors}
    producers = {t: n for n, info in ((n.name, n) for n in model.candidates) for t in info.float_outputs}
    consumers: dict[str, list[str]] = {}
    for n in model.candidates:
        for t in n.float_inputs:
            consumers.setdefault(t, []).append(n.name)
    cand = {n.name: n for n in model.candidates}

    def overflowing(t: str) -> bool:
        return tensor_absmax.get(t, 0.0) > fmt.max

    units: dict[str, frozenset[str]] = {}
    for name in universe:
        island = {name}
        stack = [name]
        while stack:  # grow across tensors that do not fit the format
            info = cand[stack.pop()]
            for t in info.float_outputs:
                if overflowing(t):
                    for c in consumers.get(t, []):
                        if c not in island:
                            island.add(c)
                            stack.append(c)
            for t in info.float_inputs:
                p = producers.get(t)
                if overflowing(t) and p and p not in island:
                    island.add(p)
                    stack.append(p)
        row = rows.get(name)
        if row is not None and row.input_sensitive:  # its error comes from rounded inputs
            island |= {producers[t] for t in cand[name].float_inputs if t in producers}
        units[name] = frozenset(island)
    return SearchSpace(universe, ranking, scores, units, costs, noise=analysis.divergence_threshold)
