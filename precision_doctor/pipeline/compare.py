"""`compare`: capture reference and low-precision runs, analyse them, write the layer table; and the
capture of a fixed run (per-layer error after the fix) that `diagnose` adds."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from precision_doctor import storage
from precision_doctor.control import CaptureSizeEvent, ProgressSink, StopToken, notify
from precision_doctor.data.activations import REFERENCE, ActivationStore
from precision_doctor.data.inputs import Sample
from precision_doctor.data.references import check_count, check_shapes
from precision_doctor.data.workload import Workload
from precision_doctor.graph.coverage import EmulationNote, emulation_notes
from precision_doctor.graph.emulate import MASK_INPUT, GatedGraph, gated_graph
from precision_doctor.graph.formats import Format, get_format
from precision_doctor.graph.model import Model
from precision_doctor.jsonio import write_json, write_text_atomic
from precision_doctor.measure.analysis import (
    Analysis,
    RelL2,
    analyse,
    keep_analysis,
    kept_analysis,
    output_verdict,
    tensor_error,
)
from precision_doctor.measure.capture import capture, capture_run, run_in_groups
from precision_doctor.measure.floor import RoundingFloor, rounding_floor
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline import capture_size
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import CaptureSpec

ACTIVATIONS = "activations.h5"
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
    directory `out_dir` is, whose manifest lists it) and analyse it; the analysis is kept in the file
    (`reanalyse` reads it back). The capture runs on `work.capture` (chosen
    here when not yet: `capture.max_samples` spread over the shape groups). The low-precision runs follow the
    emulation `rules` (`backends.rules`). Refused before anything is written when the file system of `out_dir` has
    no room for it (`pipeline/capture_size.py`); a large one is announced (`CaptureSizeEvent`). `diagnosis`: a
    diagnosis's capture, of which the run keeps `capture.keep` (else compare's, kept whole)."""
    fmt = get_format(precision)
    final = out_dir / ACTIVATIONS
    tmp = out_dir / f".{ACTIVATIONS}.partial"
    if work.capture is None:
        work.choose_capture(settings.max_samples)
    samples = work.captured()
    keep = settings.keep if diagnosis else "all"
    size = capture_size.estimate(work.model, samples, copied=diagnosis and keep == "all")
    free = capture_size.check_room(size, out_dir)
    if size.peak > capture_size.LARGE_BYTES:
        notify(progress, CaptureSizeEvent(str(final), size.peak, size.samples, free, keep))
    attrs = {"tolerance": tolerance.to_dict(), "input_source": work.describe(),
             "captured": [samples.label(i) for i in range(len(samples))]}
    if writer is not None:
        writer.written(tmp)
        writer.written(final)
    capture(work.model, samples, fmt, tmp, fallback, group_mb=settings.group_mb, compression=settings.compression,
            attrs=attrs, progress=progress, stop=stop, rules=rules)
    with ActivationStore(tmp, "a") as store:
        analysis = analyse(store, tolerance=tolerance, model=work.model)
        keep_analysis(store, analysis)
    tmp.replace(final)
    if work.references is not None:  # the verdict is against the user's reference, not ORT's
        with ActivationStore(final) as store:
            path = work.inputs.reference_outputs
            check_count(path, work.references, len(work.samples), "{inputs.files}")
            refs = [work.references[i] for i in work.capture or range(len(work.samples))]
            check_shapes(path, refs, {o: store.read(REFERENCE, o, 0) for o in work.model.outputs
                                      if store.has(REFERENCE, o)})
            analysis.verdict = output_verdict(store, work.model.outputs, tolerance, refs)
    return analysis


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
    """`compare`: capture and analyse into the run directory `out_dir` (its manifest lists what is written)."""
    run = RunDir(out_dir)
    analysis = capture_and_analyse(work, precision, tolerance, out_dir, settings=settings, progress=progress, stop=stop,
                                   rules=rules, writer=run)
    analysis = analysis.with_flops(flops_that_ran(work, precision, out_dir / ACTIVATIONS))
    write_layer_tables(run, analysis)
    notes = emulation_notes(work.model, get_format(precision), [n.name for n in work.model.candidates])
    return CompareResult(out_dir, analysis, notes, captured_floor(out_dir / ACTIVATIONS, work, precision, tolerance))


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
    """Capture the emulated run with the fallback set (run `fixed` of the store at `path`, under the emulation
    `rules`). With `capture.keep` all (the only setting that keeps every tensor) the run is added to a copy of
    the store, renamed over `path` when complete: an interruption or a full disk leaves the store as it was (a
    resumed run reads it; `writer`: the run directory `path` is in, whose manifest lists the copy). Otherwise
    the run is not stored: its errors are computed as it runs (`fixed_errors`), no copy of the store is made,
    and its graph outputs come back for the summary."""
    gated = gated_graph(model, fmt, rules=rules)
    names = [t for n in model.nodes for t in n.float_outputs]
    if settings.keep != "all":
        return fixed_errors(path, gated, model, fmt, samples, fallback, settings, progress, stop)
    tmp = path.with_name(f".{path.name}.partial")
    if writer is not None:
        writer.written(tmp)
    try:
        storage.check_room(tmp, path.stat().st_size)
        shutil.copyfile(path, tmp)
        out = _capture_fixed(tmp, gated, model, fmt, names, samples, fallback, settings, progress, stop)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return FixedRun(out)


def fixed_errors(path: Path, gated: GatedGraph, model: Model, fmt: Format, samples: Sequence[Sample],
                 fallback: frozenset[str], settings: CaptureSpec, progress: ProgressSink | None = None,
                 stop: StopToken | None = None) -> FixedRun:
    """Each candidate's worst relative L2 error with `fallback` in FP32 against the store's reference run,
    computed while the emulated graph runs, a bounded group of tensors at a time (the values `tensor_error`
    gives from a stored `fixed` run, without storing it), and the run's graph outputs."""
    errs = [t for n in model.candidates for t in n.float_outputs]
    produced = {t for n in model.nodes for t in n.float_outputs}
    kept = [o for o in model.outputs if o in produced]
    wanted = list(dict.fromkeys(errs + kept))
    accs = {t: RelL2() for t in errs}
    outputs: dict[str, list[np.ndarray]] = {o: [] for o in kept}
    mask = {MASK_INPUT: gated.mask(fallback)}
    budget = int(settings.group_mb * (1 << 20))
    with ActivationStore(path, "r") as store:
        for group, runs in run_in_groups(gated.proto, model, wanted, samples, mask, budget, FIXED_RUN, progress, stop):
            for i, values in runs:
                for t, value in zip(group, values):
                    if t in accs:
                        accs[t].add(value, store.read(REFERENCE, t, i))
                    if t in outputs:
                        outputs[t].append(value)
    errors = {n.name: max((accs[t].result() for t in n.float_outputs), default=0.0) for n in model.candidates}
    return FixedRun(errors, outputs, {"fallback": ",".join(sorted(fallback))})


def _capture_fixed(path: Path, gated: GatedGraph, model: Model, fmt: Format, names: list[str], samples: Sequence[Sample],
                   fallback: frozenset[str], settings: CaptureSpec, progress: ProgressSink | None,
                   stop: StopToken | None) -> dict[str, float]:
    with ActivationStore(path, "a") as store:
        if FIXED_RUN in store.file:
            del store.file[FIXED_RUN]
        budget = int(settings.group_mb * (1 << 20))
        mask = {MASK_INPUT: gated.mask(fallback)}
        capture_run(store, FIXED_RUN, gated.proto, model, names, samples, mask, budget, progress, stop)
        store.file[FIXED_RUN].attrs["fallback"] = ",".join(sorted(fallback))
        out = {}
        for n in model.candidates:
            errs = [tensor_error(store, FIXED_RUN, t, fmt).rel_l2 for t in n.float_outputs]
            out[n.name] = max(errs) if errs else 0.0
    return out
