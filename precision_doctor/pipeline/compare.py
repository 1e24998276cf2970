"""`compare`: capture reference and low-precision runs, analyse them, write the layer table; and the
capture of a fixed run (per-layer error after the fix) that `diagnose` adds."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from precision_doctor import storage
from precision_doctor.control import CaptureSizeEvent, ProgressSink, StopToken, notify
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, ActivationStore
from precision_doctor.data.inputs import Sample
from precision_doctor.data.keep_plan import KeepPlan
from precision_doctor.data.references import check_count, check_shapes
from precision_doctor.data.samples import groups_of
from precision_doctor.data.workload import Workload
from precision_doctor.graph.coverage import EmulationNote, emulation_notes
from precision_doctor.graph.emulate import gated_graph
from precision_doctor.graph.formats import Format, get_format
from precision_doctor.graph.model import Model
from precision_doctor.jsonio import write_json, write_text_atomic
from precision_doctor.measure.accumulate import StepAdder
from precision_doctor.measure.analysis import Analysis, OutputCheck, analyse, keep_analysis, kept_analysis, output_verdict
from precision_doctor.measure.capture import (
    Batches,
    capture,
    capture_providers,
    layer_groups,
    run_groups,
    store_tensors,
    tensor_bytes,
)
from precision_doctor.measure.floor import RoundingFloor, rounding_floor
from precision_doctor.measure.stats import RelL2
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline import capture_size
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import CaptureSpec

ACTIVATIONS = "activations.h5"
TENSORS_OWED = "tensors_owed"  # its root attribute while the top layers' tensors are not all written (JSON: run -> names)
FIXED_RUN = "fixed"


@dataclass
class CompareResult:
    """The analysis of a compare run, what of the all-low-precision model the emulator does not model on a
    GPU (`graph.coverage`), and what rounding the reference outputs alone uses of the tolerance (`floor`)."""

    out_dir: Path
    analysis: Analysis
    notes: list[EmulationNote] = field(default_factory=list)
    floor: RoundingFloor | None = None


def capture_and_analyse(
    work: Workload,
    precision: str,
    tolerance: Tolerance,
    out_dir: Path,
    fallback: frozenset[str] = frozenset(),
    settings: CaptureSpec = CaptureSpec(),
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    rules: str | None = None,
    writer: RunDir | None = None,
    diagnosis: bool = False,
) -> Analysis:
    """Capture into `out_dir/activations.h5` (written under a temporary name, then renamed; `writer`: the run
    directory `out_dir` is, whose manifest lists it) and analyse it. The capture streams (`measure/capture.py`):
    every tensor's error statistics are measured as the runs execute and kept in the file with the analysis
    (`reanalyse` reads them back), beside the graph outputs of every run and the tensors `capture.keep` names
    (`data/keep_plan.py`: the top layers of this analysis' ranking, computed again for them alone; every tensor
    with `all`; a stop while they are written keeps the rest, the tensors owed: `finish_capture` on a diagnosis'
    resume). The capture runs on `work.capture` (chosen here when not yet: `capture.max_samples` spread over the
    shape groups), on `capture.device`, the low-precision runs by the emulation `rules`. Refused before anything is
    written when `out_dir` has no room for it (`pipeline/capture_size.py`); a large one is announced
    (`CaptureSizeEvent`). `diagnosis`: a diagnosis's capture, whose fixed run `capture.keep` all adds to a copy
    of the file (counted in the size)."""
    fmt, model, final = get_format(precision), work.model, out_dir / ACTIVATIONS
    tmp = _partial(final)
    if work.capture is None:
        work.choose_capture(settings.max_samples)
    samples, plan = work.captured(), KeepPlan.parse(settings.keep)
    plan.check_names(model)
    size = capture_size.estimate(model, samples, plan, copied=diagnosis and plan.every)
    free = capture_size.check_room(size, out_dir)
    if size.peak > capture_size.LARGE_BYTES:
        notify(progress, CaptureSizeEvent(str(final), size.peak, size.samples, free, settings.keep))
    providers = capture_providers(settings.device)
    attrs = {"tolerance": tolerance.to_dict(), "input_source": work.describe(),
             "captured": [samples.label(i) for i in range(len(samples))]}
    for path in (tmp, final) if writer is not None else ():
        writer.written(path)
    outputs = frozenset(model.outputs)
    stored = dict.fromkeys((REFERENCE, LOWP, LOCAL), None if plan.every else outputs)
    gated = gated_graph(model, fmt, rules=rules)  # once for the capture and the tensors kept
    capture(model, samples, fmt, tmp, fallback, group_mb=settings.group_mb, compression=settings.compression,
            stored=stored, kept=plan.label, attrs=attrs, progress=progress, stop=stop, rules=rules, providers=providers,
            gated=gated)
    with ActivationStore(tmp, "a") as store:
        analysis = analyse(store, tolerance=tolerance, model=model)
        keep_analysis(store, analysis)
        more = {} if plan.every else _owed(store, plan, model, analysis.ranking, samples)
    try:
        if any(more.values()):
            _store_owed(tmp, model, samples, fmt, settings, fallback, rules, providers, progress, stop, gated, more)
    except KeyboardInterrupt:  # a stop: the statistics and the analysis are kept, the tensors owed
        tmp.replace(final)
        raise
    tmp.replace(final)
    if work.references is not None:  # the verdict is against the user's reference, not ORT's
        analysis.verdict = _users_verdict(final, work, tolerance)
    return analysis


def _owed(store: ActivationStore, plan: KeepPlan, model: Model, ranking: list[str],
          samples: Sequence[Sample]) -> dict[str, list[str]]:
    """The tensors `plan` keeps beyond the graph outputs (stored already), per run: the top layers' only where one
    sample's fit in the bound on the tensors kept (`capture_size.tensors_budget`), at the shapes that ran."""
    outputs = frozenset(model.outputs)

    def nbytes(t: str) -> int:
        return 0 if t in outputs else tensor_bytes(model, t, store.one_shape(t))

    kept = plan.tensors(model, ranking, capture_size.tensors_budget(groups_of(samples)), nbytes)
    return {run: [t for t in ts if t not in outputs] for run, ts in kept.items()}


def _users_verdict(activations: Path, work: Workload, tolerance: Tolerance) -> dict[str, OutputCheck]:
    """The captured low-precision outputs' verdict against the user's FP32 reference outputs (`inputs.reference_outputs`,
    checked first for their number and shapes)."""
    with ActivationStore(activations) as store:
        path = work.inputs.reference_outputs
        check_count(path, work.references, len(work.samples), "{inputs.files}")
        refs = [work.references[i] for i in work.capture or range(len(work.samples))]
        check_shapes(path, refs, {o: store.read(REFERENCE, o, 0) for o in work.model.outputs if store.has(REFERENCE, o)})
        return output_verdict(store, work.model.outputs, tolerance, refs)


def write_layer_tables(run: RunDir, analysis: Analysis) -> None:
    """layers.json and layers.csv in `run`."""
    write_json(run.root / "layers.json", analysis.to_dict(), writer=run)
    write_text_atomic(run.root / "layers.csv", analysis.layers_csv(), writer=run)


def run_compare(
    work: Workload,
    precision: str,
    tolerance: Tolerance,
    out_dir: Path,
    settings: CaptureSpec = CaptureSpec(),
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    rules: str | None = None,
) -> CompareResult:
    """`compare`: capture and analyse into the run directory `out_dir` (its manifest lists what is written);
    activations.h5 keeps what `capture.keep` says (`none`: removed once the layer tables are written)."""
    run = RunDir(out_dir)
    analysis = capture_and_analyse(work, precision, tolerance, out_dir, settings=settings, progress=progress, stop=stop,
                                   rules=rules, writer=run)
    analysis = analysis.with_flops(flops_that_ran(work, precision, out_dir / ACTIVATIONS))
    write_layer_tables(run, analysis)
    notes = emulation_notes(work.model, get_format(precision), [n.name for n in work.model.candidates])
    floor = captured_floor(out_dir / ACTIVATIONS, work, precision, tolerance)
    if KeepPlan.parse(settings.keep).remove:
        (out_dir / ACTIVATIONS).unlink()
    return CompareResult(out_dir, analysis, notes, floor)


def flops_that_ran(work: Workload, precision: str, activations: Path) -> dict[str, int]:
    """Each node's FLOPs at the shapes the capture ran (graph/cost.py), as `diagnose`'s cost model counts them."""
    from precision_doctor.data.activations import captured_shapes
    from precision_doctor.graph.cost import cost_model

    shapes = {k: tuple(np.shape(v)) for k, v in work.samples[0].items()}
    return cost_model(work.model, precision, shapes, captured_shapes(activations)).flops


def captured_floor(activations: Path, work: Workload, precision: str, tolerance: Tolerance) -> RoundingFloor:
    """What rounding the captured samples' reference outputs (the user's, where given) alone uses of `tolerance`."""
    if work.references is not None:
        refs = [work.references[i] for i in work.capture or range(len(work.samples))]
        return rounding_floor(refs, get_format(precision), tolerance)
    with ActivationStore(activations) as store:
        outputs = [o for o in work.model.outputs if store.has(REFERENCE, o)]
        n = store.n_samples()
        return rounding_floor(({o: store.read(REFERENCE, o, i) for o in outputs} for i in range(n)),
                              get_format(precision), tolerance)


def _partial(activations: Path) -> Path:
    """Where a capture is written before it is whole (renamed to `activations` then)."""
    return activations.with_name(f".{activations.name}.partial")


def _store_owed(path: Path, model: Model, samples: Sequence[Sample], fmt: Format, settings: CaptureSpec,
                fallback: frozenset[str], rules: str | None, providers: Sequence, progress: ProgressSink | None,
                stop: StopToken | None, gated=None, owed: dict[str, list[str]] | None = None) -> None:
    """Write the tensors the capture at `path` owes (`owed`, recorded as its `TENSORS_OWED` first; None: the debt
    recorded there: the top layers' tensors beyond the graph outputs, computed again for them alone: `store_tensors`)
    and clear the debt; on a stop, what was written of them is removed, so that the file holds whole tensors only
    and the debt stays for a resumed run."""
    with ActivationStore(path, "r" if owed is None else "a") as store:
        if owed is None:
            owed = store.attr(TENSORS_OWED, None) or {}
        else:
            store.set_attrs(**{TENSORS_OWED: owed})
    try:
        store_tensors(path, model, samples, fmt, owed, group_mb=settings.group_mb, compression=settings.compression,
                      fallback=fallback, rules=rules, providers=providers, progress=progress, stop=stop,
                      gated=gated if gated is not None else gated_graph(model, fmt, rules=rules),
                      max_bytes=capture_size.tensors_budget(groups_of(samples)))
    except KeyboardInterrupt:
        with ActivationStore(path, "a") as store:
            for run, names in owed.items():
                store.remove(run, names)
        raise
    with ActivationStore(path, "a") as store:
        del store.file.attrs[TENSORS_OWED]


def finish_capture(work: Workload, spec_capture: CaptureSpec, precision: str, activations: Path, *,
                   rules: str | None = None, progress: ProgressSink | None = None,
                   stop: StopToken | None = None) -> None:
    """Finish a capture a stop cut off after its statistics (`TENSORS_OWED` in `activations`): the tensors it owes,
    on the search samples it captured (its `captured` labels, whatever the resumed run would choose now), written
    into a copy that replaces the file once whole (the statistics are in no other file); nothing where it owes none.
    Where those samples are not among the search samples any more, the tensors are not written (the store says
    `kept` top:0, the debt cleared)."""
    with ActivationStore(activations) as store:
        if not store.attr(TENSORS_OWED, None):
            return
        labels = store.attr("captured", None) or []
    index = {work.samples.label(i): i for i in range(len(work.samples))}
    tmp = _partial(activations)
    shutil.copyfile(activations, tmp)
    if not labels or any(label not in index for label in labels):
        with ActivationStore(tmp, "a") as store:
            store.set_attrs(kept="top:0")
            del store.file.attrs[TENSORS_OWED]
    else:
        try:
            _store_owed(tmp, work.model, work.samples.subset([index[label] for label in labels]),
                        get_format(precision), spec_capture, frozenset(), rules, capture_providers(spec_capture.device),
                        progress, stop)
        except BaseException:  # a stop again: the file as it was, the debt with it
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(activations)


def reanalyse(activations: Path, tolerance: Tolerance | None = None) -> Analysis:
    """Analyse a stored capture again, without the model (the analysis kept in it when there is one:
    only its verdict is computed, under `tolerance`)."""
    with ActivationStore(activations) as store:
        tol = tolerance or Tolerance(**store.attr("tolerance", {}))
        return kept_analysis(store, tol) or analyse(store, tolerance=tol)


@dataclass
class FixedRun:
    """The emulated run with the answer in FP32: each candidate's worst relative L2 error after the fix, and, where
    the run was not stored in the capture, its graph outputs per sample (`outputs`, what a summary keeps of it;
    `attrs`, its run's attributes)."""

    errors: dict[str, float]
    outputs: dict[str, list[np.ndarray]] | None = None
    attrs: dict[str, str] = field(default_factory=dict)


def capture_fixed(
    path: Path, model: Model, fmt: Format, samples: Sequence[Sample], fallback: frozenset[str], settings: CaptureSpec,
    progress: ProgressSink | None = None, stop: StopToken | None = None, rules: str | None = None,
    writer: RunDir | None = None,
) -> FixedRun:
    """The emulated run with the fallback set in FP32 (under the emulation `rules`), streamed beside the FP32 run it
    is compared with, a group of layers and a sample at a time: each candidate's worst relative L2 error
    (`fixed_errors`). With `capture.keep` all (the only setting that keeps every tensor) the run is also written as
    run `fixed` of a copy of the store at `path`, renamed over it when complete: an interruption or a full disk leaves
    the store as it was (`writer`: the run directory `path` is in, whose manifest lists the copy). Otherwise nothing
    is written: its graph outputs come back for the store (`pipeline/keep.keep_capture` adds them)."""
    if not KeepPlan.parse(settings.keep).every:
        return fixed_errors(model, fmt, samples, fallback, settings, progress, stop, rules)
    tmp = path.with_name(f".{path.name}.partial")
    if writer is not None:
        writer.written(tmp)
    try:
        storage.check_room(tmp, path.stat().st_size)
        shutil.copyfile(path, tmp)
        with ActivationStore(tmp, "a") as store:
            if FIXED_RUN in store.file:
                del store.file[FIXED_RUN]
            run = fixed_errors(model, fmt, samples, fallback, settings, progress, stop, rules, store)
            if FIXED_RUN in store.file:
                store.file[FIXED_RUN].attrs.update(run.attrs)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return FixedRun(run.errors)


def fixed_errors(model: Model, fmt: Format, samples: Sequence[Sample], fallback: frozenset[str], settings: CaptureSpec,
                 progress: ProgressSink | None = None, stop: StopToken | None = None, rules: str | None = None,
                 store: ActivationStore | None = None) -> FixedRun:
    """Each candidate's worst relative L2 error with `fallback` in FP32 against the FP32 run, both computed as they
    run, a bounded group of layers at a time (`capture.group_mb`, on `capture.device`), and the run's graph outputs;
    with `store` (open for writing), every floating tensor of the run written as run `fixed` instead."""
    errs = {t for n in model.candidates for t in n.float_outputs}
    accs = {t: RelL2() for t in errs}
    budget = int(settings.group_mb * (1 << 20))
    kept = [o for o in model.outputs if o in {t for n in model.nodes for t in n.float_outputs}]
    outputs: dict[str, list[np.ndarray]] = {o: [] for o in kept}
    groups = layer_groups(model, model.nodes, budget, local=False)
    names = [list(g.lowp) if store is not None else [] for g in groups]
    writers = [Batches(store, FIXED_RUN, n, len(samples), max(budget // len(groups), 1)) for n in names]
    with StepAdder() as adder:
        for k, v in run_groups(model, samples, fmt, groups, fallback=fallback, rules=rules,
                               providers=capture_providers(settings.device), stage=FIXED_RUN, progress=progress,
                               stop=stop):
            adder.start([(v.lowp[t].size, partial(accs[t].add, v.lowp[t], v.reference[t]))
                         for t in groups[k].lowp if t in accs])
            for t in groups[k].lowp:
                if store is None and t in outputs:
                    outputs[t].append(v.lowp[t])
            if names[k]:
                writers[k].add(v.index, [v.lowp[t] for t in names[k]])
    for w in writers:
        w.__exit__(None)
    errors = {n.name: max((accs[t].result() for t in n.float_outputs), default=0.0) for n in model.candidates}
    return FixedRun(errors, None if store is not None else outputs, {"fallback": ",".join(sorted(fallback))})
