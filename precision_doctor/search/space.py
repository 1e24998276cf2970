"""What a strategy may know besides the oracle: the candidates, their ranking, islands and costs.

Nothing here runs the model: it is derived from the graph and the capture's analysis.

The search objective (`search.cost`): `nodes` (fewest nodes), `flops` (least FP32 FLOPs) or `deploy` (the
least estimated time above the all-low-precision model, `graph/cost.py`). With `deploy` the units of the
search are fusion groups (`graph/groups.py`): the universe holds one *unit* per group (named after its first
member) and one per node in no group; `Grouping.expand` turns units into nodes, `search.units.UnitOracle`
evaluates units as their nodes, and the ranking, scores, islands and costs are the units'.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from precision_doctor.costs import Refinement
from precision_doctor.graph.cost import CostModel
from precision_doctor.graph.formats import Format
from precision_doctor.graph.groups import FusionGroup, fusion_groups
from precision_doctor.graph.model import Model
from precision_doctor.measure.analysis import Analysis

OBJECTIVES = ("deploy", "nodes", "flops")


@dataclass(frozen=True)
class Grouping:
    """Fusion groups as search units, and what the node-level steps after the search need of the nodes."""

    groups: dict[str, FusionGroup]  # unit (the group's first member) -> group
    unit_of: dict[str, str]  # node -> its unit (nodes in no group: themselves)
    node_scores: dict[str, float] = field(default_factory=dict)
    node_units: dict[str, frozenset[str]] = field(default_factory=dict)  # node -> its island, in nodes

    def expand(self, units: Iterable[str]) -> frozenset[str]:
        """The nodes of `units` (a name that is no unit stands for itself)."""
        out: set[str] = set()
        for u in units:
            g = self.groups.get(u)
            out.update(g.members if g is not None else (u,))
        return frozenset(out)

    def units(self, nodes: Iterable[str]) -> frozenset[str]:
        """The units that hold any of `nodes` (a group partly in `nodes` counts whole)."""
        return frozenset(self.unit_of.get(n, n) for n in nodes)


@dataclass
class SearchSpace:
    """Candidates in topological order, the sensitivity ranking and the island of each node."""

    universe: list[str]
    ranking: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    units: dict[str, frozenset[str]] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    noise: float = 0.0  # scores at or below this are rounding noise
    objective: str = "nodes"
    grouping: Grouping | None = None  # with `deploy`: the universe is units, not nodes
    cost_model: CostModel | None = None
    # what the steps after each search over units did (search/refine.py), the latest last
    refinements: list[Refinement] = field(default_factory=list)
    # growth by attribution (search/attributed.py): `grow` adds only the ranking's members, never the rest
    growth_only: bool = False

    def cost(self, fallback: Iterable[str]) -> float:
        """The objective of a set of nodes (what an oracle evaluates): its node count, its FP32 FLOPs, or its
        estimated deployment cost in microseconds."""
        if self.objective == "deploy" and self.cost_model is not None:
            return self.cost_model.deploy_us(fallback)
        if self.objective == "flops" and self.cost_model is not None:
            return float(sum(self.cost_model.flops.get(n, 0) for n in fallback))
        return float(sum(self.costs.get(n, 1.0) for n in fallback))

    def expand(self, units: Iterable[str]) -> frozenset[str]:
        """The nodes a strategy's set stands for."""
        return self.grouping.expand(units) if self.grouping is not None else frozenset(units)

    def unit(self, name: str) -> frozenset[str]:
        return self.units.get(name, frozenset({name}))

    @property
    def informative(self) -> bool:
        """Whether the ranking says anything: some node's own error is above rounding noise."""
        return any(v > self.noise for v in self.scores.values())

    def in_order(self, nodes: frozenset[str] | set[str]) -> list[str]:
        """`nodes` in topological order."""
        return [n for n in self.universe if n in nodes]


def build_space(model: Model, analysis: Analysis | None, fmt: Format, cost: str = "nodes",
                cost_model: CostModel | None = None, groups: list[FusionGroup] | None = None) -> SearchSpace:
    """The search space of a model; islands come from range facts and input sensitivity. `cost`: the objective
    (OBJECTIVES); `deploy` needs `cost_model` and moves fusion groups (`groups`, default `fusion_groups(model)`)
    as units; `flops` counts the cost model's FLOPs when given (the shapes that ran), else the declared ones."""
    if cost not in OBJECTIVES:
        raise ValueError(f"unknown search objective {cost!r}")
    if cost == "deploy" and cost_model is None:
        raise ValueError("the deploy objective needs a cost model")
    nodes = _node_space(model, analysis, fmt, cost, cost_model)
    if cost != "deploy":
        return nodes
    found = fusion_groups(model) if groups is None else groups
    cands = set(nodes.universe)
    found = [g for g in found if set(g.members) <= cands]
    unit_of = {n: g.anchor for g in found for n in g.members}
    grouping = Grouping({g.anchor: g for g in found}, unit_of, dict(nodes.scores), dict(nodes.units))
    universe = [n for n in nodes.universe if unit_of.get(n, n) == n]
    ranking = list(dict.fromkeys(unit_of.get(n, n) for n in nodes.ranking))
    scores: dict[str, float] = {}
    for n, v in nodes.scores.items():
        u = unit_of.get(n, n)
        scores[u] = max(scores.get(u, v), v)
    units = {u: frozenset().union(*(grouping.units(nodes.unit(m)) for m in grouping.expand([u]))) for u in universe}
    costs = {u: float(sum(nodes.costs.get(m, 1.0) for m in grouping.expand([u]))) for u in universe}
    return SearchSpace(universe, ranking, scores, units, costs, nodes.noise, "deploy", grouping, cost_model)


def _node_space(model: Model, analysis: Analysis | None, fmt: Format, cost: str,
                cost_model: CostModel | None) -> SearchSpace:
    """The space of single nodes."""
    universe = [n.name for n in model.candidates]
    flops = cost_model.flops if cost_model is not None else {n.name: n.flops for n in model.candidates}
    costs = {n.name: (float(max(flops.get(n.name, 0), 1)) if cost == "flops" else 1.0) for n in model.candidates}
    objective = "flops" if cost == "flops" else "nodes"
    if analysis is None:
        return SearchSpace(universe, list(universe), {}, {}, costs, objective=objective, cost_model=cost_model)
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
    return SearchSpace(universe, ranking, scores, units, costs, noise=analysis.divergence_threshold,
                       objective=objective, cost_model=cost_model)
