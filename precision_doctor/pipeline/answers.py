"""The measured promise of an answer, and the two answers of a run that grew its answer.

- `held_out_measure`: what the held-out samples of the user's data measure about the final answer (failures and
  the one-sided Clopper-Pearson bound, pipeline/heldout_policy.py), when no search saw them.
- `two_answers`: when the run grew its answer from a smaller one it found first (counterexamples among the search
  samples, the confirmation on the GPU's real kernels, held-out failures), both stay in the report: the smaller one with
  its failures on the held-out samples (run here, on the backend with the last word) and the search samples it
  was seen to fail, the final one with its cost. Never a silent switch.
"""

from __future__ import annotations

from precision_doctor.backends.base import Backend
from precision_doctor.graph.cost import CostModel
from precision_doctor.graph.model import Model
from precision_doctor.measure.headroom import sample_shares
from precision_doctor.outcome import Growth
from precision_doctor.pipeline.context import RunContext
from precision_doctor.pipeline.heldout_policy import held_out_bound
from precision_doctor.results.report import AnswerSummary, HeldOutBound, TwoAnswers, Validation


def flop_share(model: Model, nodes: frozenset[str] | list[str], cost_model: CostModel | None = None) -> float:
    """The share of the model's FLOPs that `nodes` compute: the cost model's (the shapes that ran) where there is
    one, else the declared shapes'."""
    if cost_model is not None:
        return cost_model.fp32_flop_share(nodes)
    flops = {n.name: n.flops for n in model.nodes}
    return sum(flops.get(n, 0) for n in nodes) / max(model.total_flops, 1)


def held_out_measure(validation: Validation | None, from_user: bool) -> HeldOutBound | None:
    """The held-out samples' measure of the final answer (they check it last, pipeline/validate.py): None without
    held-out samples of the user's data, or when they repaired it (they are not unseen any more). Ties (within the
    GPU's own spread) are not counted as failures; the validation lists them."""
    if validation is None or not from_user or validation.research is not None or not validation.samples:
        return None
    return held_out_bound(validation.samples, len(validation.failing_samples))


def two_answers(ctx: RunContext, final: frozenset[str] | None, *, backend: Backend) -> TwoAnswers | None:
    """The smaller answer the run found first (the first search's first round) and the final one, when the
    run grew its answer from that one and the smaller one costs less; None otherwise."""
    loop, f = ctx.loop, ctx.findings
    first = loop.first_answer("first")
    if final is None or first is None or first == final or ctx.space.cost(first) >= ctx.space.cost(final):
        return None
    grown: list[Growth] = []
    if sum(r.search == "first" for r in loop.rounds) > 1:
        grown.append(Growth.COUNTEREXAMPLES)
    c = f.confirmed
    if c is not None and c.passed and c.searched_answer_passed is False:
        grown.append(Growth.CONFIRMATION)
    if f.held is not None and f.held.repaired:
        grown.append(Growth.HELD_OUT)
    if not grown:  # changed elsewhere (knobs): the report says so there
        return None
    model, inputs = ctx.work.model, ctx.work.inputs
    from_user = inputs.from_user
    held, held_refs = ctx.references.held, ctx.references.held_refs
    smaller_bound = None
    if held and from_user:
        shares = sample_shares(backend, first, held, held_refs, ctx.spec.tolerance)
        smaller_bound = held_out_bound(len(held), sum(not s.passed for s in shares), f"smaller answer, on {backend.name}")
    round0 = next(r for r in loop.rounds if r.search == "first" and r.round == 0)
    return TwoAnswers(
        grown_by=grown,
        smaller=AnswerSummary(sorted(first), len(first), flop_share(model, first, ctx.space.cost_model), smaller_bound,
                              len(round0.counterexamples)),
        safer=AnswerSummary(sorted(final), len(final), flop_share(model, final, ctx.space.cost_model),
                            held_out_measure(f.validation, from_user)),
    )
