"""The held-out check: the final answer on samples no search saw, on the backend with the last word; and the
repair a failure sends the answer to.

A minimal FP32 set sits at the edge of the tolerance on the samples it was searched on; only samples the search
did not see can say whether it holds, and only the user's own data can say it holds on the user's data
(pipeline/heldout_policy.py). So the answer the run would give (after the confirmation and the knob search) runs
once on the held-out samples, on the backend whose verdicts decided it (the GPU's real graph where it confirmed,
else the search backend): what they measure is the report's one measured claim (`held_out_bound`). Where ONNX
Runtime CUDA has the last word, a held-out sample that fails under its default kernel choice fails and is repaired
for, also where another choice passes it (named in `Validation.ties`, measure/spread.py).

When held-out samples fail, the answer is not presented as it was: it is repaired with them, grown by the nodes
their own error is attributed to (search/attributed.py) and checked on every search sample as the search was
(the counterexample-guided loop), and the report keeps both answers. The repaired answer has then been seen by
every sample there is: nothing independent checked it, and the verdict says so. Where the last word builds a session
per set (ort-cuda) and the search backend does not (ort-cuda-gated), the growth runs on the search backend first and
the last word checks its result, growing it further only if it must: a trial there is a feed, not a new session.

There is no model-based prediction (perturbed copies, a fitted spread) of new inputs any more: on trained models
judged on the GPU (issue 33) answers "predicted to exceed it with probability at most 0.2%" failed 8-9% of unseen
samples, and the stricter second search it sent answers to added nodes that did not help.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from precision_doctor.backends.base import Backend
from precision_doctor.backends.knobs import ORT_CUDA
from precision_doctor.backends.registry import knob_family, on_gpu, set_per_run
from precision_doctor.control import PhaseEvent, notify
from precision_doctor.measure.headroom import sample_checks
from precision_doctor.measure.spread import ties
from precision_doctor.outcome import Outcome, RunStatus
from precision_doctor.pipeline.context import HeldOutCheck, RunContext
from precision_doctor.pipeline.search_loop import Loop, grow_from, polish_for, run_loop
from precision_doctor.pipeline.validation import validation_of
from precision_doctor.render.numbers import counted
from precision_doctor.results.report import Validation
from precision_doctor.search import Oracle, Polish
from precision_doctor.search.oracle import Budget

REPAIR_CHECKPOINT = "repair.jsonl"  # the repair's evaluations (the held-out samples it was given fail first)
REPAIR_SEARCH_CHECKPOINT = "repair-search.jsonl"  # its growth on the search backend first (`grows_on_search_backend`)
REPAIRED = "repaired with the failing held-out samples (grown by what their error is attributed to)"


def check_held_out(ctx: RunContext, outcome: Outcome, backend: Backend) -> HeldOutCheck:
    """The answer of `outcome` on the held-out samples, on `backend` (the last word's, ONNX Runtime's default kernel
    choice); a failure repairs it (`repair`) where the search completed. A failing sample that another cuDNN algorithm
    choice passes (`Validation.ties`) still fails: a deployment may get the default's choice."""
    r, found = ctx.references, outcome.found
    if found is None or not r.held:
        return HeldOutCheck(outcome)
    checks = sample_checks(backend, found, r.held, r.held_refs, ctx.spec.tolerance)
    validation = validation_of(checks)
    validation.backend = backend.name
    if validation.failing_samples and knob_family(backend.name) == ORT_CUDA:
        failing = validation.failing_samples
        tied = ties(ctx.work.model, ctx.spec.precision, found, [r.held[i] for i in failing],
                    [r.held_refs[i] for i in failing], ctx.spec.tolerance, level=getattr(backend, "level", None))
        validation.ties = [i for i, t in zip(failing, tied) if t]
    if validation.passed or not outcome.complete:
        return HeldOutCheck(outcome, validation)
    return repair(ctx, outcome, validation)


def repair(ctx: RunContext, outcome: Outcome, validation: Validation) -> HeldOutCheck:
    """Grow the answer by what the failing held-out samples' error is attributed to, on the last word's oracle with
    those samples added (checked first), in its counterexample-guided loop (every search sample checks the
    result); the answer that failed stays in the report. Where the last word builds a session per set and the search
    backend does not (`grows_on_search_backend`), the growth runs there first and the last word then checks (and, if
    it must, grows) what it found."""
    found, stop, r = outcome.found, ctx.stop, ctx.references
    assert found is not None and ctx.findings.last_word is not None
    if stop is not None and stop.stopped:  # asked to stop after the search: the run ends here, and resumes here
        stop.handled()
        return HeldOutCheck(outcome.but(status=RunStatus.INTERRUPTED, reason=(
            "interrupted before the repair the failing held-out samples asked for; resume continues there")), validation)
    last = ctx.findings.last_word
    failing = validation.failing_samples
    held = [r.held[i] for i in failing], [r.held_refs[i] for i in failing]
    validation.first_candidate = sorted(found)
    validation.research = REPAIRED
    start = found
    first_stage = grows_on_search_backend(ctx)
    in_search = frozenset(failing) if first_stage or last.oracle is ctx.oracle else frozenset()
    if first_stage:
        notify(ctx.progress, PhaseEvent("validate", f"repair: grown on {ctx.oracle.backend.name} with the "
                                                    f"{counted(len(failing), 'failing held-out sample')}, then checked "
                                                    f"on {last.oracle.backend.name}"))
        loop = Loop(ctx.loop.pool, list(ctx.loop.working), ctx.loop.log, user_samples=ctx.loop.user_samples)
        with _sharing_budget(ctx.oracle, last.oracle):
            first = _grow(ctx, ctx.oracle, loop, found, *held, REPAIR_SEARCH_CHECKPOINT, "repair-search")
        ctx.loop.rounds += loop.rounds
        # the search oracle holds the failing held-out samples now, and the counterexamples the growth added
        ctx.loop.user_samples, ctx.loop.working = loop.user_samples, loop.working
        if not first.complete:
            return _unrepaired(outcome, first, validation, in_search)
        start = first.found or found  # none by attribution there: the last word grows from the answer itself
    # On a backend that builds each set's graph (ort-cuda) the repair keeps what it starts from and prunes only what
    # it added, as the confirmation does there: the polish tries removing every member, a new session each (a
    # detector's repair on the H200: 110 such removals at 1.3 s, 211 s of its 440)
    polish = None if set_per_run(last.oracle.backend.name) else polish_for(ctx.spec.search.strategy)
    repaired = _grow(ctx, last.oracle, last.loop, start, *held, REPAIR_CHECKPOINT, "repair", polish)
    validation.passed_after_research = repaired.found is not None and repaired.complete
    if repaired.found is None:  # no repair: the answer that failed stays, failed (stopped early: with that status)
        return _unrepaired(outcome, repaired, validation, in_search)
    return HeldOutCheck(repaired, validation, frozenset(found), in_search)


def grows_on_search_backend(ctx: RunContext) -> bool:
    """Whether the repair grows on the search backend before the last word checks it: the last word is another
    backend that builds a session per set (ort-cuda: at 1024x1024 a trial costs 5-8 s, each a new session whose cuDNN
    algorithm search costs seconds; a segmenter's repair on the H200: 33 trials in 185 s) and the search backend does
    not (ort-cuda-gated: a set is a feed of one session; the emulator on the CPU is no cheaper there)."""
    last = ctx.findings.last_word
    search = ctx.oracle.backend.name
    return (last is not None and last.oracle is not ctx.oracle and set_per_run(last.oracle.backend.name)
            and on_gpu(search) and not set_per_run(search))


@contextlib.contextmanager
def _sharing_budget(first: Oracle, last: Oracle) -> Iterator[None]:
    """`first` may spend what `last` (the last word's oracle, whose budget is what the search left) has left of the
    run's evaluation budget, and `last` what `first` leaves of it."""
    budget = last.budget
    if budget.max_evaluations is None:
        yield
        return
    left, before, own = max(budget.max_evaluations - last.evaluations, 0), first.evaluations, first.budget
    first.budget = Budget(before + left, own.time_s)
    try:
        yield
    finally:
        first.budget = own
        spent = first.evaluations - before
        last.budget = Budget(last.evaluations + max(left - spent, 0), budget.time_s)


def _grow(ctx: RunContext, oracle: Oracle, loop: Loop, start: frozenset[str], samples: list, refs: list[dict],
          checkpoint: str, search: str, polish: Polish | None = None) -> Outcome:
    """`start` grown on `oracle` (the failing held-out `samples` added first, its evaluations recorded in
    `checkpoint` of the run directory) by what those samples' error is attributed to, in `loop` (`search`: its
    rounds' name in the record), until it passes them and every search sample."""
    strategy = ctx.spec.search.strategy
    first_new = len(oracle.samples)
    oracle.tighten(samples, refs)
    loop.user_samples += len(samples)
    if oracle.checkpoint is not None:
        oracle.switch_checkpoint(oracle.checkpoint.with_name(checkpoint), ctx.resume)
    failed = list(range(first_new, first_new + len(samples)))
    return run_loop(loop, oracle, ctx.space, grow_from(strategy, start, ctx.attribution, failed),
                    lambda prev, f: grow_from(strategy, prev, ctx.attribution, f), search=search, stop=ctx.stop,
                    polish=polish)


def _unrepaired(outcome: Outcome, repaired: Outcome, validation: Validation, in_search: frozenset[int]) -> HeldOutCheck:
    """The answer that failed, kept with the status that ended the repair (stopped early) or as failed (none found);
    `in_search`: the held-out samples the repair added to the search's oracle."""
    validation.passed_after_research = False
    why = (f"{(repaired.reason or 'stopped').partition(';')[0]} during the repair, before a set that passes the failing "
           "held-out samples too was found" if not repaired.complete else "no set grown by attribution passes them too")
    return HeldOutCheck(outcome.but(status=repaired.status, reason=why), validation, in_search_oracle=in_search)
