"""`diagnose`: capture, rank, search, confirm on held-out samples, and write every artifact.

Data flows one way: workload -> references + sample scores -> capture + analysis -> search space -> oracle on the
working set + strategy, checked on every search sample (pipeline/search_loop.py; an answer that fails a sample grows
by what that sample's error is attributed to: pipeline/growth.py) -> [confirmation on another backend, the GPU's own
spread measured] -> [knobs] -> the held-out check on the backend with the last word, and a repair where held-out
samples fail (pipeline/validate.py) -> the two answers -> "fixed" capture -> artifacts and report.
This module only orchestrates: `_prepare` builds the run's `RunContext` (pipeline/context.py), then each step
(search, confirm, knobs, validate, answers, settle) is `step(ctx, outcome) -> Outcome` and `_write` makes the
artifacts and the report; the work of each step lives in its own module of this package.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.backends.registry import check_only, make_backend, on_gpu, plan_backends
from precision_doctor.control import PhaseEvent, ProgressSink, RoundingFloorEvent, StopToken, notify, stopped_by
from precision_doctor.data.activations import analysable
from precision_doctor.data.inputs import Sample
from precision_doctor.data.reference_cache import REFERENCES, ReferenceFile, ReferenceSet
from precision_doctor.data.samples import as_sample_set
from precision_doctor.data.workload import Workload
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model
from precision_doctor.graph.shapes import input_shapes
from precision_doctor.graph.targets import RUNTIMES
from precision_doctor.measure.analysis import Analysis
from precision_doctor.measure.floor import rounding_floor
from precision_doctor.measure.spread import kernel_spread
from precision_doctor.outcome import Outcome, RunStatus
from precision_doctor.pipeline.answers import two_answers
from precision_doctor.pipeline.artifacts import write_artifacts
from precision_doctor.pipeline.capture_cache import CaptureCache, shared_capture
from precision_doctor.pipeline.compare import (
    ACTIVATIONS,
    FIXED_RUN,
    capture_and_analyse,
    capture_fixed,
    finish_capture,
    reanalyse,
    write_layer_tables,
)
from precision_doctor.pipeline.confirmation import certification, confirm, notes_for
from precision_doctor.pipeline.context import Backends, LastWord, References, RunContext
from precision_doctor.pipeline.copies import SEARCH_SEED, copy_maker
from precision_doctor.pipeline.growth import Attribution
from precision_doctor.pipeline.heldout_policy import decider
from precision_doctor.pipeline.keep import keep_capture
from precision_doctor.pipeline.knob_search import budget_after, search_knobs
from precision_doctor.pipeline.pricing import price, run_cost_model
from precision_doctor.pipeline.reporting import (
    CHECKPOINT,
    AnswerChecks,
    Produced,
    Promise,
    Searched,
    build_report,
    write_report,
)
from precision_doctor.pipeline.search_loop import ROUNDS_LOG, Loop, RoundLog, grow_from, polish_for, run_loop, start_loop
from precision_doctor.pipeline.settings import check_run_settings, run_settings
from precision_doctor.pipeline.spec_check import CheckedSpec
from precision_doctor.pipeline.strategy import budget_of, evaluation_events, remaining
from precision_doctor.pipeline.target import answer_for, other_runtime_step, write_other_answer
from precision_doctor.pipeline.trt import FIXED_ONNX, FIXED_PLAN, tensorrt_steps
from precision_doctor.pipeline.validate import check_held_out
from precision_doctor.render.numbers import counted
from precision_doctor.results.report import Confirm, HeldOutChoice, Invocation, Report, ServiceJob, Timing
from precision_doctor.runfiles import RunDir
from precision_doctor.search import Oracle
from precision_doctor.search.space import SearchSpace, build_space
from precision_doctor.spec import RunSpec


def run_diagnose(
    work: Workload,
    validation: list[Sample],
    valid: CheckedSpec,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    capture_cache: CaptureCache | None = None,
    held_choice: HeldOutChoice | None = None,
    origin: str = "api",
    service_job: ServiceJob | None = None,
    started: float | None = None,
) -> Report:
    """Diagnose `work` into the prepared run directory `out_dir` with the settings `valid` (checked at the edge:
    api.diagnose); returns the report (also written there).
    Backends opened here are closed here, also when the run fails. With `capture_cache`, a capture of the
    same model, samples and capture-deciding settings is taken from it (and one made here is put there).
    `held_choice`: which samples were held out (`validation`) and why, for the report. `origin`: the front end that
    started the run (the report's re-run command is one for it); `service_job`: the daemon's job this run is, for the
    report. `started` (monotonic): when the run began, before its model was loaded (default: now), for the report's
    `elapsed_s`."""
    spec = valid.spec
    t0 = time.monotonic() if started is None else started
    with contextlib.ExitStack() as owned:
        ctx = _prepare(work, validation, spec, out_dir, resume=resume, progress=progress, stop=stop, owned=owned,
                       capture_cache=capture_cache, t0=t0)
        ctx.held_choice = held_choice
        outcome = _search(ctx)
        for step in (_confirm, _knobs, _validate):  # what the time budget's clock runs through
            outcome = step(ctx, outcome)
        ctx.search_ended = time.monotonic()
        for step in (_answers, other_runtime_step, _settle):  # other_runtime_step: pipeline/target.py
            outcome = step(ctx, outcome)
        return _write(ctx, outcome, origin, service_job)


# -- before the search: backends, capture, analysis, references, the oracle ----------------------------------


def _prepare(work: Workload, held: list[Sample], spec: RunSpec, out_dir: Path, *, resume: bool,
             progress: ProgressSink | None, stop: StopToken | None, owned: contextlib.ExitStack,
             capture_cache: CaptureCache | None, t0: float) -> RunContext:
    """Open the backends, check the run's settings against a resumed run's, compute the references and score the
    search samples (the counterexample-guided search's start), capture (or reuse the capture) and analyse, build
    the search space and set up the search's oracle on the working set. The run directory's `RunDir` is made here,
    once: what writes there records through it."""
    model, b, run = work.model, spec.backends, RunDir(out_dir)
    backends = _open_backends(model, spec, owned)
    check_run_settings(run, run_settings(work, spec, held, _all_references(work)), resume)
    work.keep_in(run)  # a data loader script's samples: a resumed run reads them there

    notify(progress, PhaseEvent("reference", f"FP32 outputs of {counted(len(work.samples), 'search sample')}"))
    ref = owned.enter_context(ReferenceRunner(model))  # its session closed with the backends
    if work.references is not None:  # the user's FP32 reference (polygraphy --save-outputs), checked at capture
        refs, held_refs = work.references, work.held_references or []
    else:  # computed when first needed, kept in references.h5
        ref_file = owned.enter_context(contextlib.closing(ReferenceFile(out_dir / REFERENCES, run)))
        refs, held_refs = ReferenceSet(work.samples, ref.run, ref_file), ReferenceSet(held, ref.run, ref_file, "held")
    if work.samples:  # on a GPU: the gated graph's faster form, before it scores; the references meanwhile on the CPU
        first = work.samples[0]
        beside = refs.computed_beside() if backends.forms_to_time and isinstance(refs, ReferenceSet) else None
        with beside or contextlib.nullcontext() as quiet:
            backends.choose_form(first, progress, quiet)
    loop = start_loop(backends.search, work.samples, refs, spec.search_tolerance, RoundLog(out_dir / ROUNDS_LOG, resume, run),
                      copy_maker(work.samples, spec.search.augment, SEARCH_SEED, ref.run), stop)
    # on the working set's references (the hardest samples): a tolerance below it makes the search useless, say so now
    floor = rounding_floor((refs[i] for i in loop.working), get_format(spec.precision), spec.tolerance,
                           allowed=1.0 - spec.search.margin)  # the search asks for 1 - margin of the tolerance
    notify(progress, RoundingFloorEvent(floor, spec.tolerance))

    ref.pause()  # the capture makes its own sessions: the reference's and the backends' are made again when needed
    backends.pause()
    analysis = _capture(work, spec, run, loop, resume=resume, progress=progress, stop=stop, capture_cache=capture_cache)
    cm = run_cost_model(work, spec, out_dir / ACTIVATIONS)  # FLOPs and bytes at the shapes that ran
    analysis = analysis.with_flops(cm.flops)  # (the model's declared shapes: none where they are dynamic)
    write_layer_tables(run, analysis)
    space = build_space(model, analysis, get_format(spec.precision), spec.search.cost, cost_model=cm)

    samples, sample_refs = loop.pool.working(loop.working)  # the working set, then its perturbed copies

    budget = budget_of(spec.search)
    oracle = Oracle(
        backends.search, samples, sample_refs, spec.search_tolerance, cost_of=space.cost, budget=budget,
        checkpoint=out_dir / CHECKPOINT, writer=run, on_evaluation=evaluation_events(progress), stop=stop,
    )
    if resume:
        oracle.load_checkpoint()
    elif (out_dir / CHECKPOINT).exists():
        (out_dir / CHECKPOINT).unlink()  # our own file from an earlier forced run
    attribution = Attribution(model, get_format(spec.precision), b.emulation_rules, spec.capture.group_mb, progress, stop,
                              device=spec.capture.device)
    return RunContext(
        spec=spec, run_dir=run, space=space, progress=progress, stop=stop, resume=resume, work=work,
        analysis=analysis, backends=backends,
        references=References(refs, held, held_refs, ref), oracle=oracle, budget=budget, loop=loop, owned=owned,
        t0=t0, floor=floor, attribution=attribution,
    )


def _open_backends(model: Model, spec: RunSpec, owned: contextlib.ExitStack) -> Backends:
    """The search backend and the confirm backend (None: none) that `plan_backends` chose, closed with `owned`."""
    b = spec.backends
    plan = plan_backends(b.backend, b.confirm_backend)  # auto: on a CUDA GPU ort-cuda-gated, confirmed on ort-cuda
    backend = owned.enter_context(contextlib.closing(
        make_backend(plan.search, model, spec.precision, model.outputs, rules=b.emulation_rules, target=b.target)))
    confirm_backend = owned.enter_context(contextlib.closing(
        make_backend(plan.confirm, model, spec.precision, model.outputs, "backends.confirm_backend",
                     rules=b.emulation_rules, target=b.target)
    )) if plan.confirm else None
    return Backends(plan, backend, confirm_backend)


def _capture(work: Workload, spec: RunSpec, run: RunDir, loop: Loop, *, resume: bool, progress: ProgressSink | None,
             stop: StopToken | None, capture_cache: CaptureCache | None) -> Analysis:
    """The capture and its analysis: on the hardest samples by the loop's scores (a spread choice without them), shape
    groups in turn; read back where a resumed run kept its statistics, or taken from `capture_cache`."""
    out_dir = run.root
    loop.captured = work.choose_capture(spec.capture.max_samples,
                                        None if loop.scores is None else [s.share for s in loop.scores])
    notify(progress, PhaseEvent("capture", f"{counted(len(loop.captured), 'sample')}, every layer's statistics"))
    if resume and analysable(out_dir / ACTIVATIONS):  # its statistics are kept (pipeline/keep.py); none: capture again
        finish_capture(work, spec.capture, spec.precision, out_dir / ACTIVATIONS, rules=spec.backends.emulation_rules,
                       progress=progress, stop=stop)  # where a stop cut it off after its statistics
        return reanalyse(out_dir / ACTIVATIONS, spec.tolerance)
    with shared_capture(capture_cache, spec, work, run) as reused:
        return reanalyse(out_dir / ACTIVATIONS, spec.tolerance) if reused else capture_and_analyse(
            work, spec.precision, spec.tolerance, out_dir, settings=spec.capture, progress=progress, stop=stop,
            rules=spec.backends.emulation_rules, writer=run, diagnosis=True)


# -- the steps: each takes the run's outcome so far and returns it ------------------------------------------


def _search(ctx: RunContext) -> Outcome:
    """The counterexample-guided search: the strategy on the working set, its answers checked on every search
    sample, the failing ones added, until an answer passes them all (pipeline/search_loop.py)."""
    copies = len(ctx.oracle.samples) - len(ctx.loop.working)
    samples = f"{counted(len(ctx.loop.working), 'sample')} and {counted(copies, 'perturbed copy', 'perturbed copies')}"
    notify(ctx.progress, PhaseEvent("search", f"{len(ctx.work.model.candidates)} candidate nodes on "
                                              f"{ctx.backends.search.name}, {samples}"))
    strategy = ctx.spec.search.strategy
    ctx.findings.last_word = LastWord(ctx.oracle, ctx.loop)
    return run_loop(ctx.loop, ctx.oracle, ctx.space, strategy,
                    lambda prev, failing: grow_from(strategy, prev, ctx.attribution, failing), stop=ctx.stop,
                    polish=polish_for(strategy))


def _final_samples(ctx: RunContext) -> tuple[list[Sample], list[dict], int]:
    """What the confirmation and the knob search run on: the samples the final search checked (its perturbed
    copies too: a prune on the GPU must not undo what they bought), never the held-out ones (they check the
    final answer); and how many of them are perturbed copies."""
    return list(ctx.oracle.samples), list(ctx.oracle.references), len(ctx.oracle.samples) - ctx.loop.user_samples


def _confirm(ctx: RunContext, outcome: Outcome) -> Outcome:
    """Carry the answer over to the confirm backend (when there is one and the search completed); on ONNX Runtime
    CUDA, first measure its own spread under the kernel choices a deployment may get (measure/spread.py)."""
    backend, f = ctx.backends.confirm, ctx.findings
    if backend is None or outcome.found is None:
        return outcome
    if outcome.complete:
        samples, refs, n_copies = _final_samples(ctx)
        if backend.name == "ort-cuda":
            notify(ctx.progress, PhaseEvent("spread", f"the answer under cuDNN's algorithm choices, "
                                                      f"{counted(len(samples), 'sample')}"))
            f.spread = kernel_spread(ctx.work.model, ctx.spec.precision, outcome.found, samples, refs, ctx.spec.tolerance,
                                     level=getattr(backend, "level", None), progress=ctx.progress)
        notify(ctx.progress, PhaseEvent("confirm", f"on {backend.name}, {counted(len(samples), 'sample')}"))
        confirmed = confirm(ctx, outcome, backend=backend, samples=samples, refs=refs,
                            budget=remaining(ctx.budget, ctx.oracle), copies=n_copies, loop=ctx.loop,
                            every_sample=_oracle_choice_on(backend.name), attribution=ctx.attribution, spread=f.spread)
        outcome, f.confirmed, f.confirm_verdict = confirmed.outcome, confirmed.report, confirmed.verdict
        there = confirmed.loop
        if there is not None:  # its rounds join the record; where it decided the answer, its verdict on the rest too
            ctx.loop.rounds += there.rounds
            ctx.loop.checked += there.checked
            if confirmed.report.passed:
                ctx.loop.verified, ctx.loop.failing, ctx.loop.stopped = there.verified, there.failing, there.stopped
        if confirmed.report.passed and not check_only(backend.name) and confirmed.oracle is not None and there is not None:
            f.last_word = LastWord(confirmed.oracle, there)
    else:
        f.confirmed = Confirm(backend.name, sorted(outcome.found), passed=None, skipped=(
            f"the search ended early ({outcome.status}); the answer is the searched one, not confirmed"))
    return outcome


def _oracle_choice_on(backend: str) -> bool | None:
    """The confirmation's `every_sample` on `backend`: chosen by a timed trial (None) on ort-cuda, where a trial is a
    lean session kept by set and may cost less than the other samples' runs; every search sample from the start on the
    other GPU backends (an engine's build costs more; a gated graph's session is made once)."""
    return None if backend == "ort-cuda" else on_gpu(backend)


def _knobs(ctx: RunContext, outcome: Outcome) -> Outcome:
    """`search.knobs`: try the answer under the final backend's knob configurations."""
    if not ctx.spec.search.knobs or outcome.found is None or not outcome.complete:
        return outcome
    samples, refs, n_copies = _final_samples(ctx)
    model = ctx.work.model
    knobs = ctx.findings.knobs = search_knobs(
        ctx, [n.name for n in model.nodes if n.name in outcome.found], backend=ctx.backends.confirm or ctx.backends.search,
        model=model, samples=samples, refs=refs, budget=budget_after(ctx.budget, ctx.oracle, ctx.findings.confirmed),
        owned=ctx.owned, copies=n_copies,
    )
    return Outcome(knobs.status, knobs.reason or outcome.reason, knobs.fallback)


def _validate(ctx: RunContext, outcome: Outcome) -> Outcome:
    """The final answer on the held-out samples, on the backend with the last word; repaired with them where they
    fail it (pipeline/validate.py)."""
    held, f = ctx.references.held, ctx.findings
    f.decided_by = decider(len(held), ctx.work.inputs.from_user)
    if outcome.found is None or not held:
        return outcome
    b, c = ctx.backends, f.confirmed
    there = b.confirm is not None and c is not None and c.passed and not check_only(b.confirm.name)
    backend = b.confirm if there else b.search
    notify(ctx.progress, PhaseEvent("validate", f"{counted(len(held), 'held-out sample')} on {backend.name}"))
    f.held = check_held_out(ctx, outcome, backend)
    return f.held.outcome


def _answers(ctx: RunContext, outcome: Outcome) -> Outcome:
    """When the run grew its answer from a smaller one it found first (counterexamples, the probe's second search,
    held-out failures), keep both: the smaller one checked on the held-out samples (its measured failure rate)."""
    b, c = ctx.backends, ctx.findings.confirmed
    there = b.confirm is not None and c is not None and c.passed and not check_only(b.confirm.name)
    ctx.findings.answers = two_answers(ctx, outcome.found, backend=b.confirm if there else b.search)
    return outcome


def _settle(ctx: RunContext, outcome: Outcome) -> Outcome:
    """A run that completed without a passing set has no solution, and says why."""
    if outcome.complete and outcome.found is None:
        return Outcome(RunStatus.NO_SOLUTION, outcome.reason or _no_solution_reason(ctx.oracle, ctx.space), None)
    return outcome


# -- after the steps: artifacts and the report ----------------------------------------------------------------


def _write(ctx: RunContext, outcome: Outcome, origin: str, service_job: ServiceJob | None = None) -> Report:
    """The fixed capture, the artifacts and the TensorRT steps (for an answer), then the report, written; then
    the capture reduced to what `capture.keep` keeps."""
    notify(ctx.progress, PhaseEvent("artifacts", "the fixed capture, fixed.onnx, commands, report"))
    spec, work, out_dir, f, knobs = ctx.spec, ctx.work, ctx.out_dir, ctx.findings, ctx.findings.knobs
    run = ctx.run_dir
    fmt, rules, backend = get_format(spec.precision), spec.backends.emulation_rules, ctx.backends.search
    passed = outcome.found is not None
    final = outcome.found if outcome.found is not None else frozenset()
    shapes = input_shapes(work.model.declared_shapes, [*work.samples.shapes(), *as_sample_set(ctx.references.held).shapes()])
    produced, fixed, stopped = Produced(), None, False
    if passed:
        ctx.references.runner.pause()  # as for the capture: their sessions are made again if a later step needs them
        ctx.backends.pause()
        try:
            fixed = capture_fixed(out_dir / ACTIVATIONS, work.model, fmt, work.captured(), final, spec.capture,
                                  ctx.progress, ctx.stop, rules=rules, writer=run)
            notify(ctx.progress, PhaseEvent("artifacts", "fixed.onnx, the polygraphy and trtexec files, the commands"))
            written = write_artifacts(run, work, ctx.references.refs, final, spec, knobs.emitted if knobs else None,
                                      shapes, answer_for(ctx), kept_ops=ctx.backends.kept_fp32())
            trt_check, engine = tensorrt_steps(run, work.model, final, spec, written, knobs, shapes)
            write_other_answer(ctx, shapes)
            produced = Produced(fixed.errors, written, trt_check, engine)
        except KeyboardInterrupt:  # a stop of the run's (Ctrl-C, SIGTERM, a job's cancel); anyone else's goes on up
            if ctx.stop is None or not ctx.stop.stopped:
                raise
            outcome, fixed, stopped = _stopped_writing(ctx, outcome), None, True
    validation = f.validation
    notes = notes_for(work.model, fmt, backend, final) if passed else []
    checks = AnswerChecks(
        validation=validation, confirm=f.confirmed, confirm_verdict=f.confirm_verdict, spread=f.spread,
        knobs=knobs.result if knobs else None, knob_verdict=knobs.verdict if knobs else None,
        certified_by=certification(ctx.backends.plan, backend, f.confirmed, validation,
                                   len(work.samples) if ctx.loop.verified else ctx.loop.user_samples,
                                   passed, rules, knobs.result if knobs else None, notes),
        emulation_notes=notes,
    )
    first = f.held.first_answer if f.held is not None else None
    if passed and not stopped:  # the trade-off evaluates sets, the latency makes sessions: tens of s at 1024x1024 on the H200
        notify(ctx.progress, PhaseEvent("artifacts", "the answer priced: its trade-off against the tolerance and, on a "
                                                     "GPU, the latency of FP32, all-low-precision and fixed.onnx"))
    pricing = price(ctx.space, ctx.oracle, outcome.found, ctx.space.cost_model, spec, work, first, ctx.stop,
                    with_tradeoff=outcome.complete, measure_latency=not stopped)
    now = time.monotonic()
    started, ended = ctx.oracle.started, ctx.search_ended or now
    timing = Timing(before_search_s=started - ctx.t0, search_s=ended - started, after_search_s=now - ended,
                    time_budget_s=spec.search.time_budget)
    report = build_report(
        outcome, work=work, spec=spec, n_validation=len(ctx.references.held), elapsed=now - ctx.t0, timing=timing,
        searched=Searched(ctx.analysis, ctx.space, ctx.oracle, backend.name, ctx.loop.record(), ctx.floor), checks=checks,
        produced=produced, promise=Promise(ctx.held_choice, f.decided_by, f.answers),
        shapes=shapes, invocation=Invocation.of(ctx.given, out_dir, origin), pricing=pricing,
    )
    report.invocation.service_job, report.checks.other_runtime = service_job, f.other
    report = write_report(run, report)
    keep_capture(run, spec.capture.keep, outcome.status, work.model.outputs,
                 {FIXED_RUN: fixed} if fixed is not None and fixed.outputs is not None else None)
    return report


def _stopped_writing(ctx: RunContext, outcome: Outcome) -> Outcome:
    """A stop of the run's that landed while the answer's artifacts were made: acted on here, so the report is still
    written, with the answer found and no artifacts, as an interrupted run (--resume makes them). What this step
    wrote of the answer's model files is removed (a stop by a signal lands anywhere: they may be incomplete, and the
    report lists none); a run that had already ended early keeps its status and reason."""
    ctx.stop.handled()
    for name in (FIXED_ONNX, f"{FIXED_ONNX}.data", FIXED_PLAN):
        for path in (ctx.out_dir / name, *(ctx.out_dir / other / name for other in RUNTIMES)):
            if path.is_file() and ctx.run_dir.ours(path):
                path.unlink()
    notify(ctx.progress, PhaseEvent("artifacts", "stopped: the report only, with the answer found and no artifacts"))
    if not outcome.complete:
        return outcome.but(reason=f"{outcome.reason}; stopped again while its artifacts were made")
    return outcome.but(status=RunStatus.INTERRUPTED,
                       reason=f"interrupted {stopped_by(ctx.stop)} while its artifacts were made; resume makes them")


def _all_references(work: Workload) -> list[dict] | None:
    return None if work.references is None else work.references + (work.held_references or [])


def _no_solution_reason(oracle: Oracle, space: SearchSpace) -> str:
    everything = oracle.known(space.expand(space.universe))
    if everything is not None and not everything.passed:
        name, err = everything.worst
        return (
            f"even with every node in FP32 the output '{name}' differs from the reference (max abs err {err:.3g}): "
            "the tolerance is tighter than the backend's FP32 agreement, or the model is nondeterministic"
        )
    return "no evaluated set met the tolerance"
