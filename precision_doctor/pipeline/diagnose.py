"""`diagnose`: capture, rank, search, confirm on held-out samples, and write every artifact.

Data flows one way: workload -> capture + analysis -> search space -> oracle + strategy ->
validation + probe (pipeline/probe.py) -> [confirmation on another backend] -> "fixed" capture -> artifacts and report.
This module only orchestrates; each step lives in its own module of this package.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.backends.registry import check_only, make_backend, plan_backends
from precision_doctor.control import PhaseEvent, ProgressSink, StopToken, notify
from precision_doctor.data.inputs import Sample
from precision_doctor.data.workload import Workload
from precision_doctor.graph.formats import get_format
from precision_doctor.pipeline.artifacts import write_artifacts
from precision_doctor.pipeline.capture_cache import CaptureCache, shared_capture
from precision_doctor.pipeline.compare import ACTIVATIONS, capture_and_analyse, capture_fixed, reanalyse, write_layer_tables
from precision_doctor.pipeline.confirmation import certification, confirm, notes_for
from precision_doctor.pipeline.knob_search import budget_after, search_knobs
from precision_doctor.pipeline.pricing import price, run_cost_model
from precision_doctor.pipeline.probe import (
    PROBE_COPIES,
    PROBE_SEED,
    RECHECK_SEED,
    SEARCH_SEED,
    Unseen,
    check_unseen,
    confirmed_headroom,
    perturbed_copies,
    search_headroom,
)
from precision_doctor.pipeline.reporting import CHECKPOINT, build_report, write_report
from precision_doctor.pipeline.settings import check_run_settings, run_settings
from precision_doctor.pipeline.strategy import budget_of, evaluation_events, remaining, run_strategy, user_share
from precision_doctor.pipeline.trt import tensorrt_steps
from precision_doctor.results.report import Confirm, Report
from precision_doctor.search import Oracle
from precision_doctor.search.space import SearchSpace, build_space
from precision_doctor.spec import RunSpec


def run_diagnose(
    work: Workload,
    validation: list[Sample],
    spec: RunSpec,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    capture_cache: CaptureCache | None = None,
) -> Report:
    """Diagnose `work` into the prepared run directory `out_dir`; returns the report (also written there).
    Backends opened here are closed here, also when the run fails. With `capture_cache`, a capture of the
    same model, samples and capture-deciding settings is taken from it (and one made here is put there)."""
    spec.validate()
    with contextlib.ExitStack() as owned:
        return _run(work, validation, spec, out_dir, resume, progress, stop, owned, capture_cache)


def _run(work: Workload, validation: list[Sample], spec: RunSpec, out_dir: Path, resume: bool,
         progress: ProgressSink | None, stop: StopToken | None, owned: contextlib.ExitStack,
         capture_cache: CaptureCache | None) -> Report:
    t0 = time.monotonic()
    fmt = get_format(spec.precision)
    model = work.model
    b = spec.backends

    plan = plan_backends(b.backend, b.confirm_backend)  # auto: the emulator, confirmed on ort-cuda where a GPU is
    backend = owned.enter_context(contextlib.closing(
        make_backend(plan.search, model, spec.precision, model.outputs, rules=b.rules)))
    confirm_backend = owned.enter_context(contextlib.closing(
        make_backend(plan.confirm, model, spec.precision, model.outputs, "backends.confirm_backend", rules=b.rules)
    )) if plan.confirm else None
    check_run_settings(out_dir, run_settings(work, spec, validation, _all_references(work)), resume)
    notify(progress, PhaseEvent("capture"))
    if resume and (out_dir / ACTIVATIONS).exists():
        analysis = reanalyse(out_dir / ACTIVATIONS, spec.tolerance)
    else:
        with shared_capture(capture_cache, spec, work, out_dir) as reused:
            analysis = reanalyse(out_dir / ACTIVATIONS, spec.tolerance) if reused else capture_and_analyse(
                work, spec.precision, spec.tolerance, out_dir, settings=spec.capture, progress=progress, stop=stop,
                rules=b.rules)
    write_layer_tables(out_dir, analysis)
    cm = run_cost_model(work, spec, out_dir / ACTIVATIONS)  # FLOPs and bytes at the shapes that ran
    space = build_space(model, analysis, fmt, spec.search.cost, cost_model=cm)

    notify(progress, PhaseEvent("reference"))
    ref = ReferenceRunner(model)
    if work.references is not None:  # the user's FP32 reference (polygraphy --save-outputs), checked at capture
        refs, val_refs = work.references, work.held_references or []
    else:
        refs = [ref.run(s) for s in work.samples]
        val_refs = [ref.run(s) for s in validation]
    copies, copy_refs = perturbed_copies(work.samples, spec.search.augment, SEARCH_SEED, ref.run)

    budget = budget_of(spec.search)
    oracle = Oracle(
        backend, work.samples + copies, refs + copy_refs, spec.search_tolerance, cost_of=space.cost, budget=budget,
        checkpoint=out_dir / CHECKPOINT, on_evaluation=evaluation_events(progress), stop=stop,
    )
    if resume:
        oracle.load_checkpoint()
    elif (out_dir / CHECKPOINT).exists():
        (out_dir / CHECKPOINT).unlink()  # our own file from an earlier forced run

    notify(progress, PhaseEvent("search"))
    status, reason, found = run_strategy(oracle, space, spec.search.strategy, stop)
    n_probe = PROBE_COPIES if spec.search.augment and found is not None else 0  # no answer: nothing to probe
    probe, probe_refs = perturbed_copies(work.samples, n_probe, PROBE_SEED, ref.run)
    unseen = Unseen(validation, val_refs, probe, probe_refs,
                    recheck=lambda: perturbed_copies(work.samples, n_probe, RECHECK_SEED, ref.run))
    checked = check_unseen(backend, oracle, space, spec, status, reason, found, unseen, progress, stop, resume)
    status, reason, found, validation_report = checked.status, checked.reason, checked.found, checked.validation
    if checked.margin != spec.search.margin:  # the second search's larger margin: confirm and report at it
        spec = spec.with_settings({"search.margin": checked.margin})
    headroom = search_headroom(checked, len(work.samples), len(copies),
                               held_out_from_user=bool(work.inputs.files or work.inputs.validate_files))
    # What the confirmation and the knob search run on: the samples the final search checked (its perturbed
    # copies too: a prune on the GPU must not undo what they bought) and the held-out ones it did not search with.
    held, held_refs = (validation, val_refs) if checked.held_out_unseen else ([], [])
    final_samples, final_refs = oracle.samples + held, oracle.references + held_refs
    n_copies = len(final_samples) - len(work.samples) - len(validation)
    confirmed = confirm_verdict = None
    if confirm_backend is not None and found is not None:
        if status == "complete":
            notify(progress, PhaseEvent("confirm"))
            status, reason, found, confirmed, confirm_verdict = confirm(
                confirm_backend, found, final_samples, final_refs, space, spec, out_dir,
                remaining(budget, oracle), resume, progress, stop, copies=n_copies,
            )
        else:
            confirmed = Confirm(confirm_backend.name, sorted(found), passed=None,
                                skipped=f"the search ended early ({status}); the answer is the searched one, not confirmed")
    if headroom is not None and probe and confirmed is not None and confirmed.passed and found is not None \
            and not check_only(confirm_backend.name):
        headroom = confirmed_headroom(headroom, confirm_backend, found, checked, validation_report, spec,
                                      user_share(spec, confirm_verdict))
    knob_outcome = None
    if spec.search.knobs and found is not None and status == "complete":
        knob_outcome = search_knobs(
            confirm_backend or backend, [n.name for n in model.nodes if n.name in found], model, final_samples,
            final_refs, space, spec, out_dir, budget_after(budget, oracle, confirmed), owned, resume=resume,
            progress=progress, stop=stop, copies=n_copies,
        )
        found, status, reason = knob_outcome.fallback, knob_outcome.status, knob_outcome.reason or reason
    passed = found is not None
    if status == "complete" and not passed:
        status = "no_solution"
        reason = reason or _no_solution_reason(oracle, space)

    pricing = price(space, oracle, found if passed else None, cm, spec, work, checked.first_answer, stop,
                    with_tradeoff=status == "complete")
    notify(progress, PhaseEvent("artifacts"))
    final = found if found is not None else frozenset()
    fixed_rel = capture_fixed(out_dir / ACTIVATIONS, model, fmt, work.samples, final, spec.capture, progress, stop,
                              rules=b.rules) if passed else {}
    written = write_artifacts(out_dir, work, refs, final, spec, knob_outcome.emitted if knob_outcome else None) \
        if passed else None
    trt_check, engine = tensorrt_steps(out_dir, model, final, spec, written, knob_outcome, work.samples) \
        if written else (None, None)
    report = build_report(
        work=work, analysis=analysis, space=space, oracle=oracle, spec=spec, fmt=fmt,
        backend_name=backend.name, status=status, reason=reason, fallback=found,
        validation=validation_report, n_validation=len(validation), fixed_rel=fixed_rel,
        artifacts=written.commands if written else {}, elapsed=time.monotonic() - t0, confirm=confirmed,
        confirm_verdict=confirm_verdict, written=written, trt_check=trt_check, engine=engine,
        knobs=knob_outcome.result if knob_outcome else None, knob_verdict=knob_outcome.verdict if knob_outcome else None,
        certified_by=certification(plan, backend, confirmed, validation_report, len(work.samples),
                                   passed and (headroom is None or headroom.holds), b.rules,
                                   knob_outcome.result if knob_outcome else None),
        emulation_rules=b.rules, emulation_notes=notes_for(model, fmt, backend, final) if passed else [],
        expected_headroom=headroom, cost_model=cm, pricing=pricing,
    )
    return write_report(out_dir, report)


def _all_references(work: Workload) -> list[dict] | None:
    return None if work.references is None else work.references + (work.held_references or [])


def _no_solution_reason(oracle: Oracle, space: SearchSpace) -> str:
    everything = oracle.known(space.universe)
    if everything is not None and not everything.passed:
        name, err = everything.worst
        return (
            f"even with every node in FP32 the output '{name}' differs from the reference (max abs err {err:.3g}): "
            "the tolerance is tighter than the backend's FP32 agreement, or the model is nondeterministic"
        )
    return "no evaluated set met the tolerance"
