"""The answer priced as the deployment pays for it: the cost model of what ran (`graph/cost.py`), the fusion
groups the answer keeps (`graph/groups.py`), the FP16 gaps the search closed (`search/refine.py`), the trade-off
against the tolerance (`search/tradeoff.py`) and, where ONNX Runtime has a CUDA GPU, the measured latency of
FP32, all-low-precision and fixed.onnx (`measure/latency.py`). Everything here is typed (`results/report.py`'s
`Pricing`); the renderers only read it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from precision_doctor.control import StopToken
from precision_doctor.costs import DeployLatency, GroupUse, Refinement
from precision_doctor.data.activations import captured_shapes
from precision_doctor.data.workload import Workload
from precision_doctor.graph.cost import CostModel, cost_model
from precision_doctor.graph.groups import fusion_groups
from precision_doctor.results.report import Pricing
from precision_doctor.search import Oracle
from precision_doctor.search.oracle import BudgetExhausted
from precision_doctor.search.space import SearchSpace
from precision_doctor.search.tradeoff import tradeoff
from precision_doctor.spec import RunSpec

OBJECTIVE_MEANS = {
    "deploy": ("the estimated time fixed.onnx spends above the all-{prec} model at batch {batch} on an H100 (FP32 "
               "FLOPs and bytes moved, the Casts at island borders included), fusion groups kept whole unless a "
               "member alone is proven to matter"),
    "nodes": "the fewest nodes kept in FP32",
    "flops": "the fewest FLOPs kept in FP32",
}


def run_cost_model(work: Workload, spec: RunSpec, activations: Path | None) -> CostModel:
    """The cost model of the run: the first search sample's input shapes, the capture's tensor shapes, the
    deployed batch (`search.batch`, else the samples')."""
    shapes = {k: tuple(np.shape(v)) for k, v in work.samples[0].items()}
    return cost_model(work.model, spec.precision, shapes, captured_shapes(activations), spec.search.batch,
                      spec.search.keep_io_types)


def objective_means(spec: RunSpec, cm: CostModel) -> str:
    return OBJECTIVE_MEANS[spec.search.cost].format(prec=spec.precision.upper(), batch=cm.batch)


def group_uses(space: SearchSpace, cm: CostModel, answer: frozenset[str]) -> list[GroupUse]:
    """The fusion groups the answer keeps in FP32, whole or in part (members in graph order)."""
    groups = list(space.grouping.groups.values()) if space.grouping is not None else fusion_groups(cm.model)
    out = []
    for g in groups:
        kept = [m for m in g.members if m in answer]
        if kept:
            out.append(GroupUse(g.kind, kept, [m for m in g.members if m not in answer]))
    return out


def last_refinement(space: SearchSpace, answer: frozenset[str]) -> Refinement | None:
    """What the steps after the search did to reach `answer`, where the final answer is that search's."""
    return next((r for r in reversed(space.refinements) if r.answer == answer), None)


def price(space: SearchSpace, oracle: Oracle, answer: frozenset[str] | None, cm: CostModel, spec: RunSpec,
          work: Workload, first_answer: frozenset[str] | None = None, stop: StopToken | None = None,
          with_tradeoff: bool = True, measure_latency: bool = True) -> Pricing:
    """The report's `pricing` of `answer` (None: no answer; then only the objective is said). `oracle`: the
    search's, whose verdicts seed the trade-off (`with_tradeoff`: off after a search that ended early);
    `first_answer`: the first search's answer where a second one replaced it."""
    out = Pricing(spec.search.cost, objective_means(spec, cm))
    if answer is None:
        return out
    out.answer = cm.answer_cost(answer)
    if first_answer is not None and first_answer != answer:
        out.first_answer = cm.answer_cost(first_answer)
    out.groups = group_uses(space, cm, answer)
    refined = last_refinement(space, answer)
    if refined is not None:
        out.gaps_closed = [list(g) for g in refined.gaps_closed]
        out.refine_evaluations = refined.evaluations
    searched = oracle.known(answer)
    if with_tradeoff and searched is not None and searched.passed:
        try:
            out.tradeoff = tradeoff(oracle, space, answer)
        except KeyboardInterrupt:
            if stop is not None:
                stop.handled()
        except BudgetExhausted:
            pass
    if measure_latency:
        out.latency, out.latency_note = _latency(cm, answer, spec, work)
    return out


def _latency(cm: CostModel, answer: frozenset[str], spec: RunSpec, work: Workload) -> tuple[DeployLatency | None, str]:
    """Measured on ONNX Runtime's CUDA provider where it has a GPU here; else None and why. A failure to measure
    never fails the run: it is said instead."""
    from precision_doctor.measure.latency import deploy_latency

    try:
        got = deploy_latency(cm.model, answer, spec.precision, work.samples[0], spec.search.batch,
                             spec.search.keep_io_types)
    except Exception as exc:  # ORT's errors have many types; the report says it in one line
        return None, f"not measured: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if got is None:
        return None, "not measured: no CUDA GPU here (ONNX Runtime's CUDA provider and a GPU are needed)"
    return got, f"measured on ONNX Runtime's CUDA provider with I/O binding, median of {got.runs} runs"
