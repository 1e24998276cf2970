"""After a search over fusion groups (`search.cost = "deploy"`): split the groups where part of them is proven
not to matter, and close the FP16 gaps whose Casts cost more than their FP32 arithmetic. Every change is
verified by the oracle and taken only where the cost model says it pays.

- Split. A group is kept whole unless a member alone is proven to matter: the answer with only some of its
  members kept passes (proven: the others may run in low precision) while the answer without the group fails
  (known from the search's 1-minimality over units, else evaluated here; where it passes, the group goes
  whole). The kept sets tried, boldest first, in rounds over all groups: the members whose own error is above
  rounding noise with their islands inside the group (`Grouping.node_units`) but without the group's MatMul or
  convolution (where FP16 pays), then with it, then every member but the MatMul or convolution.
  Taken where it lowers the deployment cost or the FP32 FLOPs (a split adds Casts inside the group and
  breaks its kernel; on a model too small for FP16 to pay, the cost model may prefer the whole group).
- Gaps. A connected run of at most GAP_MAX low-precision nodes, none of them a MatMul, Gemm or convolution
  (FP16 pays there: tensor cores), is moved to FP32 where that removes more Cast cost than it adds FP32 cost:
  a single FP16 node between FP32 neighbours is the typical case.

Changes are applied together and, where that fails, by halves (a failing single change is dropped), so a
set of k changes of which f fail costs about 1 + 2 f log2(k) evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_doctor.costs import GroupUse, Refinement
from precision_doctor.search.oracle import BudgetExhausted, Oracle
from precision_doctor.search.space import SearchSpace

GAP_MAX = 4  # low-precision nodes in a gap worth closing, at most
HEAVY_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul", "Attention", "MultiHeadAttention",
                       "Einsum"})  # never moved to FP32 to close a gap


@dataclass(frozen=True)
class _Move:
    remove: frozenset[str] = frozenset()
    add: frozenset[str] = frozenset()


def refine(oracle: Oracle, space: SearchSpace, answer: frozenset[str]) -> Refinement:
    """Split groups and close gaps of `answer` (a passing set of nodes) where it pays (module docstring)."""
    out = Refinement(answer)
    if space.grouping is None or space.cost_model is None or not answer:
        return out
    before = oracle.evaluations
    try:
        oracle.phase = "split"
        out.answer, out.splits = _split(oracle, space, out.answer)
        oracle.phase = "gaps"
        gaps = _gap_moves(space, out.answer)
        current, taken = apply_moves(oracle, out.answer, gaps)
        out.answer = current
        order = [n.name for n in space.cost_model.model.nodes]
        out.gaps_closed = [tuple(n for n in order if n in gaps[i].add) for i in sorted(taken)]
    except BudgetExhausted as exc:
        out.stopped = str(exc)
    out.evaluations = oracle.evaluations - before
    return out


def _split(oracle: Oracle, space: SearchSpace, answer: frozenset[str]) -> tuple[frozenset[str], list[GroupUse]]:
    """Each group wholly in the answer, split as far as it is proven: its candidate kept sets (`_split_options`,
    boldest first) tried in rounds, all groups of a round together (`apply_moves`); a group whose removal passes
    goes whole."""
    options: dict[str, list[GroupUse]] = {}
    for unit, uses in _split_options(space, answer).items():
        members = frozenset(space.grouping.groups[unit].members)
        if oracle.passes(answer - members):  # the group is not needed at all (its proof fails): it goes whole
            answer = answer - members
            continue
        options[unit] = uses
    done: dict[str, GroupUse] = {}
    for r in range(max((len(v) for v in options.values()), default=0)):
        round_ = [(u, uses[r]) for u, uses in options.items() if u not in done and r < len(uses)]
        answer, taken = apply_moves(oracle, answer, [_Move(remove=frozenset(use.released)) for _, use in round_])
        done.update({round_[i][0]: round_[i][1] for i in taken})
    return answer, list(done.values())


def apply_moves(oracle: Oracle, current: frozenset[str], moves: list[_Move]) -> tuple[frozenset[str], set[int]]:
    """Apply the moves whose result passes: all together, and where that fails, each half (down to single
    moves, dropped when they fail). Returns the set and the indices of the moves taken."""
    taken: set[int] = set()

    def attempt(block: list[int]) -> None:
        nonlocal current
        if not block:
            return
        remove = frozenset().union(*(moves[i].remove for i in block))
        add = frozenset().union(*(moves[i].add for i in block))
        trial = (current - remove) | add
        if trial != current and oracle.passes(trial):
            current = trial
            taken.update(block)
        elif len(block) > 1:
            attempt(block[: len(block) // 2])
            attempt(block[len(block) // 2:])

    attempt(list(range(len(moves))))
    return current, taken


def _split_options(space: SearchSpace, answer: frozenset[str]) -> dict[str, list[GroupUse]]:
    """For each group wholly in `answer`, the kept sets worth a try, boldest first: the members whose own error is
    above noise (with their islands inside the group) without the group's MatMul or convolution, then with it,
    then every member but those; each only where it lowers the deployment cost or the FP32 FLOPs."""
    grouping, cm = space.grouping, space.cost_model
    assert grouping is not None and cm is not None
    base, base_flops = cm.deploy_us(answer), cm.fp32_flops(answer)
    out: dict[str, list[GroupUse]] = {}
    for unit, group in grouping.groups.items():
        members = set(group.members)
        if not members <= answer:
            continue
        needed: set[str] = set()
        for m in group.members:
            if grouping.node_scores.get(m, 0.0) > space.noise:
                needed |= (grouping.node_units.get(m, frozenset({m})) & members) | {m}
        light = {m for m in members if cm.model.node(m).op_type not in HEAVY_OPS}
        uses = []
        for kept in (needed & light, needed, light):
            released = members - kept
            if not kept or not released or any(set(u.kept) == kept for u in uses):
                continue
            if cm.deploy_us(answer - released) >= base and cm.fp32_flops(answer - released) >= base_flops:
                continue
            uses.append(GroupUse(group.kind, [m for m in group.members if m in kept],
                                 [m for m in group.members if m in released]))
        if uses:
            out[unit] = uses
    return out


def _gap_moves(space: SearchSpace, answer: frozenset[str]) -> list[_Move]:
    """Connected runs of at most GAP_MAX low-precision candidates whose move to FP32 lowers the cost."""
    cm = space.cost_model
    assert cm is not None
    model = cm.model
    fp32 = cm.fp32_nodes(answer)
    low = {n.name for n in model.candidates} - fp32
    made_by = {t: n.name for n in model.nodes for t in n.float_outputs}
    neighbours: dict[str, set[str]] = {n: set() for n in low}
    for n in model.nodes:
        if n.name not in low:
            continue
        for t in n.float_inputs:
            p = made_by.get(t)
            if p in low and p != n.name:
                neighbours[n.name].add(p)
                neighbours[p].add(n.name)
    base = cm.deploy_us(answer)
    seen: set[str] = set()
    moves = []
    for start in (n.name for n in model.nodes if n.name in low):
        if start in seen:
            continue
        comp, stack = {start}, [start]
        while stack and len(comp) <= GAP_MAX:
            for q in neighbours[stack.pop()]:
                if q not in comp:
                    comp.add(q)
                    stack.append(q)
        if len(comp) > GAP_MAX:  # part of a larger low-precision region: mark it all seen
            stack = list(comp)
            while stack:
                for q in neighbours[stack.pop()]:
                    if q not in comp:
                        comp.add(q)
                        stack.append(q)
            seen |= comp
            continue
        seen |= comp
        if any(model.node(n).op_type in HEAVY_OPS for n in comp):
            continue
        if cm.deploy_us(answer | comp) < base:
            moves.append(_Move(add=frozenset(comp)))
    return moves
