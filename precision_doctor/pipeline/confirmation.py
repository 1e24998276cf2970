"""`backends.confirm_backend`: carry the searched answer over to another backend on every sample; and
which backend certified the final answer (`certified_by`), with what the emulator does not model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from precision_doctor.backends.base import Backend
from precision_doctor.backends.registry import BackendPlan, check_only, on_gpu
from precision_doctor.control import PhaseEvent, notify
from precision_doctor.data.inputs import Sample
from precision_doctor.data.samples import Concat, Picked
from precision_doctor.graph.coverage import EmulationNote, emulation_notes, unconfirmed_parts
from precision_doctor.graph.formats import Format
from precision_doctor.graph.mixed import lowp_nodes
from precision_doctor.graph.model import Model
from precision_doctor.measure.spread import KernelSpread
from precision_doctor.measure.trial_cost import TrialCost, trial_cost
from precision_doctor.outcome import Outcome, RunStatus
from precision_doctor.pipeline.context import StepContext
from precision_doctor.pipeline.growth import Attribution, grow_by_attribution
from precision_doctor.pipeline.search_loop import Loop, run_loop
from precision_doctor.pipeline.strategy import evaluation_events, run_strategy, trajectory_row
from precision_doctor.results.report import Certification, Confirm, KnobsResult, Validation
from precision_doctor.search import Oracle
from precision_doctor.search.auto import repair
from precision_doctor.search.oracle import Budget, Verdict

CONFIRM_CHECKPOINT = "confirm.jsonl"
# With every search sample in its oracle from the start (`every_sample`): its own file, so that a run resumed from
# one whose confirmation had only the working set never replays those verdicts as verdicts on every sample.
CONFIRM_EVERY_CHECKPOINT = "confirm-every.jsonl"
# The most of the tolerance the FP32 graph's own run-to-run difference may add to the confirmation's allowance. The
# FP16 graph's spread under cuDNN's algorithm choices adds nothing: a deployment may get any of those choices, and an
# allowance for it let a detector's answer pass at 2x the tolerance and fail 2 of 16 unseen samples at up to 1.39x
# (docs/history/gpu-truth.md).
MAX_SPREAD = 1.0


@dataclass(frozen=True)
class Confirmed:
    """What the confirmation came to: the run's outcome after it, the report's `confirm` section, and the
    verdict on the final set there (None: no set passed there)."""

    outcome: Outcome
    report: Confirm
    verdict: Verdict | None
    loop: Loop | None = None
    oracle: Oracle | None = None


def confirm(ctx: StepContext, searched: Outcome, *, backend: Backend, samples: Sequence[Sample], refs: Sequence[dict],
            budget: Budget, copies: int = 0, loop: Loop | None = None, every_sample: bool | None = False,
            attribution: Attribution | None = None, spread: KernelSpread | None = None) -> Confirmed:
    """Carry the searched answer (`searched.found`, not None) over to `backend` on `samples` (the search's working
    set and the `copies` perturbed copies among them; never the held-out samples, which check the final answer
    after this): keep it if it passes there, else grow it by the nodes its failing samples' error is attributed to
    (`attribution`: pipeline/growth.py; without it, along the ranked islands), then prune what was added while it
    passes (not on a backend that may only check: ort-cpu). With `spread` (measure/spread.py) the check allows the
    FP32 graph's own run-to-run difference more of the tolerance (a sample within it is a tie, not a failure to grow
    the answer for); the FP16 graph's spread under cuDNN's algorithm choices is error a deployment gets, not a tie.
    With `loop` (the search's counterexample-guided loop), the answer is then checked there on every other search
    sample, and the failing ones join as in the search (`Confirmed.loop`: that loop); with `every_sample` (a GPU
    backend: a trial is one new session whose kernel choice costs seconds, a sample milliseconds) every search
    sample is in the oracle from the start (loaded on demand), so that no round after the first grows it again;
    they join without perturbed copies (the working set keeps its own; in the loop a counterexample would bring
    its copies along); `every_sample` None: chosen by what a trial of the searched answer costs there
    (measure/trial_cost.py), or on resume as the run chose before.
    If it stops early (budget, stop) before any set passed there, the searched answer stays, unconfirmed."""
    found = searched.found
    assert found is not None
    cost = None
    if every_sample is None:
        every_sample, cost = _every_sample(ctx, backend, found, samples, refs, loop, budget)
    samples, refs, working, checkpoint = _confirm_samples(ctx, samples, refs, loop, every_sample)
    oracle, scale = _confirm_oracle(ctx, backend, samples, refs, budget, checkpoint, spread)
    prune_added = not check_only(backend.name)  # ort-cpu: FP16 verdicts it cannot compute never shrink the answer

    def carry(start: frozenset[str], failing: Sequence[int] = ()):
        if attribution is not None:
            return grow_by_attribution(attribution, start, failing, prune_after=prune_added)
        return lambda o, sp: repair(o, sp, start, prune_added, keep_start=True)

    there = None
    if loop is None:
        result = run_strategy(oracle, ctx.space, carry(found), ctx.stop)
    else:
        there = Loop(loop.pool, working, loop.log, user_samples=len(samples) - copies)
        result = run_loop(there, oracle, ctx.space, carry(found), carry, search="confirm", stop=ctx.stop)
    return _confirmed(result, found, backend, oracle, there, len(samples) - copies, copies, scale, prune_added, cost,
                      every_sample if loop is not None else None)


def _every_sample(ctx: StepContext, backend: Backend, found: frozenset[str], samples: Sequence[Sample],
                  refs: Sequence[dict], loop: Loop | None, budget: Budget) -> tuple[bool, TrialCost | None]:
    """Whether the confirmation's oracle holds every search sample from the start, and the trial cost that decided it
    (None: not measured). A resumed run keeps the choice its checkpoint shows; with no loop or no other search
    sample there is nothing to choose; a run already stopped or out of time measures nothing (its oracle ends it)."""
    if ctx.resume:
        for every, name in ((True, CONFIRM_EVERY_CHECKPOINT), (False, CONFIRM_CHECKPOINT)):
            if (ctx.out_dir / name).exists():
                return every, None
    if loop is None or not loop.pool.outside(loop.working):
        return False, None
    if (ctx.stop is not None and ctx.stop.pending) or (budget.time_s is not None and budget.time_s <= 0):
        return True, None
    try:
        cost = trial_cost(backend, found, samples, refs, len(loop.pool.outside(loop.working)))
    except KeyboardInterrupt:  # a stop of the run's: its token raises again at the oracle's first evaluation
        if ctx.stop is None or not ctx.stop.pending:
            raise
        return True, None
    how = ("every search sample from the start" if cost.every_sample else
           f"the working set, its answers then checked on the {cost.others} other search samples")
    notify(ctx.progress, PhaseEvent("confirm", f"a trial's session costs {cost.session_s:.2f} s and a sample "
                                               f"{cost.sample_s:.3f} s on {backend.name}: confirming on {how}"))
    return cost.every_sample, cost


def _confirm_samples(ctx: StepContext, samples: Sequence[Sample], refs: Sequence[dict], loop: Loop | None,
                     every_sample: bool) -> tuple[Sequence[Sample], Sequence[dict], list[int], Path]:
    """The confirmation's samples, their references, its working set and its checkpoint: with `every_sample` (and a
    loop) every other search sample joins, hardest first, and its own checkpoint is used."""
    working = list(loop.working) if loop is not None else []
    checkpoint = ctx.out_dir / CONFIRM_CHECKPOINT
    if loop is not None and every_sample:
        rest = loop.pool.outside(loop.working)  # hardest first
        samples, refs = Concat(samples, Picked(loop.pool.samples, rest)), Concat(refs, Picked(loop.pool.refs, rest))
        working += rest
        checkpoint = ctx.out_dir / CONFIRM_EVERY_CHECKPOINT
    return samples, refs, working, checkpoint


def allowance(margin: float, spread: KernelSpread | None) -> float:
    """The share of the user's tolerance the confirmation allows: 1 - margin, plus the FP32 graph's own run-to-run
    difference (the reference itself moves that much: within it, a tie), never the FP16 graph's spread."""
    scale = 1.0 - margin
    if spread is not None and spread.fp32_repeat > 0:
        scale += min(spread.fp32_repeat, MAX_SPREAD)
    return scale


def _confirm_oracle(ctx: StepContext, backend: Backend, samples: Sequence[Sample], refs: Sequence[dict],
                    budget: Budget, checkpoint: Path, spread: KernelSpread | None) -> tuple[Oracle, float]:
    """The confirmation's oracle on `backend` (its checkpoint replayed on resume, else removed), and the share of the
    user's tolerance it allows (`allowance`)."""
    scale = allowance(ctx.spec.search.margin, spread)
    tol = ctx.spec.tolerance.scaled(scale) if scale != 1.0 else ctx.spec.tolerance
    oracle = Oracle(
        backend, samples, refs, tol, cost_of=ctx.space.cost, budget=budget,
        checkpoint=checkpoint, writer=ctx.run_dir, on_evaluation=evaluation_events(ctx.progress), stop=ctx.stop,
    )
    if ctx.resume:
        oracle.load_checkpoint()
    elif checkpoint.exists():
        checkpoint.unlink()
    return oracle, scale


def _confirmed(result: Outcome, found: frozenset[str], backend: Backend, oracle: Oracle, there: Loop | None,
               users: int, copies: int, scale: float, prune_added: bool, cost: TrialCost | None,
               every_sample: bool | None) -> Confirmed:
    """What the confirmation came to, from the outcome of its search (`result`): the run's outcome and the report's
    `confirm` section. `users`: the user's samples in its oracle (the other search samples count too once its loop
    checked them)."""
    status, reason, confirmed = result.status, result.reason, result.found
    pruned_searched = False  # the searched members stay: only what the confirmation added is pruned
    as_is = oracle.known(found)
    passed: bool | None = confirmed is not None
    if status == RunStatus.COMPLETE and confirmed is None:
        reason = f"no set passes on {backend.name}, not even with every candidate in FP32 added to the searched answer"
    elif status != RunStatus.COMPLETE and confirmed is None:
        passed, confirmed = None, found
        reason = f"confirmation on {backend.name} stopped early ({reason}); the answer is the searched one, not confirmed"
    final = oracle.known(confirmed) if passed else None
    n_copies = copies
    if there is not None:
        users, n_copies = there.user_samples, len(oracle.samples) - there.user_samples
        users += len(there.pool.outside(there.working)) if there.verified else 0
    report = Confirm(
        backend=backend.name,
        samples=users,
        perturbed_copies=n_copies,
        searched_answer=sorted(found),
        searched_answer_passed=None if as_is is None else as_is.passed,
        passed=passed,
        status=status,
        evaluations=oracle.evaluations,
        memo_hits=oracle.memo_hits,
        one_minimal_checked=oracle.one_minimal_checked(confirmed) if passed and pruned_searched else None,
        pruned_searched=pruned_searched,
        pruned_added=None if not passed or confirmed <= found else prune_added,
        tolerance_used=final.tol_used * scale if final is not None else None,
        trajectory=[trajectory_row(e) for e in oracle.trajectory],
        trial_cost=cost,
        every_sample=every_sample,
        others_checked=None if there is None or every_sample else there.verified,
    )
    return Confirmed(Outcome(status, reason, confirmed), report, final, there, oracle)


def certification(
    plan: BackendPlan, search: Backend, confirmed: Confirm | None, validation: Validation | None, n_search: int,
    passed: bool, rules: str, knobs: KnobsResult | None = None, notes: Sequence[EmulationNote] = (),
) -> Certification | None:
    """The backend that last checked the final answer on every sample: the knob search's where it changed
    the answer (`knobs`), the confirm backend where the answer passed there, else the search backend (on
    the search samples, and the held-out ones where they were checked or searched with). None when there
    is no answer. Where the emulator certifies, what of its `notes` leaves the certificate incomplete."""
    if not passed:
        return None
    if knobs is not None and knobs.changed_answer:
        return Certification(knobs.backend, "knobs", knobs.samples, on_gpu(knobs.backend))
    if confirmed is not None and confirmed.passed and not check_only(confirmed.backend):
        return Certification(confirmed.backend, "confirmation", confirmed.samples or 0, on_gpu(confirmed.backend))
    held = validation is not None and (validation.passed or bool(validation.passed_after_research))
    samples = n_search + (validation.samples if held else 0)
    how = "validation" if validation is not None and validation.passed else "search"
    name = search.name
    emulated = name == "emulate"
    return Certification(name, how, samples, on_gpu(name), rules if emulated else None, plan.no_gpu,
                         unconfirmed_parts(notes) if emulated else [])


def notes_for(model: Model, fmt: Format, search: Backend, final: frozenset[str]) -> list[EmulationNote]:
    """Where the emulator searched: the nodes of the final answer's low-precision part that it does not
    model (`graph.coverage`); none for other search backends."""
    if search.name != "emulate":
        return []
    return emulation_notes(model, fmt, lowp_nodes(model, final, precision=fmt.name))
