"""The one entry for the CLI, batch, a service and the benchmarks: diagnose, compare, probe_ops, rerender.

Each call checks its RunSpec before any work (SpecError names the setting; a CheckedSpec, which a front end checked
already, is taken as it is), loads the model and samples, prepares the run directory and runs. `progress` receives
typed events (control.py); `stop` ends a run early: a stopped search reports the best passing set found so far.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from precision_doctor.backends.gpu_turn import run_turn
from precision_doctor.control import LoadedEvent, PhaseEvent, ProgressSink, StopToken, notify
from precision_doctor.data.references import check_count
from precision_doctor.data.workload import Workload, load_workload
from precision_doctor.pipeline.capture_cache import CaptureCache
from precision_doctor.pipeline.compare import CompareResult, run_compare
from precision_doctor.pipeline.diagnose import run_diagnose
from precision_doctor.pipeline.heldout import held_out_choice, held_out_samples
from precision_doctor.pipeline.settings import check_resumed_model
from precision_doctor.pipeline.spec_check import CheckedSpec, checked
from precision_doctor.render.numbers import counted
from precision_doctor.results.report import Report, ServiceJob, run_dir_of
from precision_doctor.results.rundir import open_run_dir
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import RunSpec


def diagnose(
    spec: RunSpec | CheckedSpec,
    out_dir: str | Path,
    *,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    resume: bool = False,
    force: bool = False,
    capture_cache: CaptureCache | None = None,
    command: str | None = None,
    origin: str = "api",
    service_job: ServiceJob | None = None,
) -> Report:
    """Find the smallest set of nodes to keep in FP32 and write every artifact into `out_dir` (fresh or
    empty; `force` replaces the files an earlier run wrote there, `resume` continues a run there from its
    checkpoint). The directory is locked while the run works (`command` names the run to others).
    `capture_cache` shares captures across runs (pipeline/capture_cache.py): a second diagnosis of the
    same model and samples skips the capture and its analysis. `origin` names the front end that started the
    run (`results.report.ORIGINS`): the report prints the command that runs it again in that front end's words
    (a service passes "service" and its `service_job`: its report then prints a `submit` command naming
    the files as the submitter did)."""
    started = time.monotonic()  # the report's elapsed_s: loading included
    valid = checked(spec)
    spec = valid.spec
    work = _load(valid, progress, run_dir=Path(out_dir) if resume else None)
    validation = held_out_samples(work)
    choice = held_out_choice(work, validation)
    _loaded(spec, work, validation, progress)
    with (open_run_dir(Path(out_dir), force=force, resume=resume, protect=spec.user_files(), command=command) as out,
          _gpu_turn(spec, progress, stop, out)):
        return run_diagnose(work, validation, valid, out, resume=resume, progress=progress, stop=stop,
                            capture_cache=capture_cache, held_choice=choice, origin=origin, service_job=service_job,
                            started=started)


def compare(
    spec: RunSpec | CheckedSpec,
    out_dir: str | Path,
    *,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    force: bool = False,
    command: str | None = None,
) -> CompareResult:
    """Capture FP32 and emulated low precision layer by layer into `out_dir` and analyse them."""
    valid = checked(spec)
    spec = valid.spec
    work = _load(valid, progress)
    if work.references is not None:
        check_count(spec.inputs.reference_outputs, work.references, len(work.samples), "{inputs.files}")
    _loaded(spec, work, [], progress)
    with (open_run_dir(Path(out_dir), force=force, protect=spec.user_files(), command=command) as out,
          _gpu_turn(spec, progress, stop, out, capture_only=True)):
        n = len(work.choose_capture(spec.capture.max_samples))  # as run_compare would choose them
        notify(progress, PhaseEvent("capture", f"{counted(n, 'sample')}, every layer's statistics"))
        return run_compare(work, spec.precision, spec.tolerance, out, spec.capture, progress=progress, stop=stop,
                           rules=spec.backends.emulation_rules)


def probe_ops(
    spec: RunSpec | CheckedSpec,
    out_dir: str | Path,
    *,
    provider: str = "cuda",
    threshold: float | None = None,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    force: bool = False,
    command: str | None = None,
):
    """Every node of the model alone in low precision on `provider` against the emulation rules (`backends.rules`;
    unset, the `ort-cuda` rules whatever the target: they model the ONNX Runtime provider measured here)
    (`measure/opprobe.py`; `threshold` None: its THRESHOLD); writes `probe_ops.json` and `probe_ops.md` into
    `out_dir`. Returns the OpProbe. It runs on at most `capture.max_samples` samples of the largest shape group."""
    from precision_doctor.data.samples import spread_choice
    from precision_doctor.graph.formats import get_format
    from precision_doctor.jsonio import write_json, write_text_atomic
    from precision_doctor.measure.opprobe import THRESHOLD, providers_for, table
    from precision_doctor.measure.opprobe import probe_ops as run_probe

    valid = checked(spec)
    spec = valid.spec
    providers_for(provider)  # no CUDA here: one line before any work
    work = _load(valid, progress)
    _loaded(spec, work, [], progress)
    with open_run_dir(Path(out_dir), force=force, protect=spec.user_files(), command=command) as out:
        notify(progress, PhaseEvent("probe"))
        group, largest = max(work.samples.groups().items(), key=lambda kv: len(kv[1]))  # shapes observed on one group
        samples = work.samples.subset(spread_choice({group: largest}, spec.capture.max_samples, spec.inputs.seed))
        result = run_probe(work.model, samples, get_format(spec.precision), provider, spec.backends.rules or "ort-cuda",
                           THRESHOLD if threshold is None else threshold, spec.capture.group_mb, stop)
        run = RunDir(out)
        write_json(out / "probe_ops.json", result.to_json(), writer=run)
        write_text_atomic(out / "probe_ops.md", f"# probe-ops: {Path(spec.model).name}\n\n" + table(result), writer=run)
    return result


def rerender(run_dir: str | Path, command: str | None = None) -> Report:
    """Render report.md and report.html again from a run directory's report.json (which stays as it is). Files
    there that precision-doctor did not write are not replaced, and the directory is locked meanwhile
    (`results.rundir.updating`)."""
    from precision_doctor.render import report_files, write_reports
    from precision_doctor.results.rundir import updating

    run_dir = run_dir_of(run_dir)
    report = Report.load(run_dir)
    with updating(run_dir, list(report_files(report).values()), command) as run:
        write_reports(report, RunDir(run))
    return report


def _gpu_turn(spec: RunSpec, progress: ProgressSink | None, stop: StopToken | None, out: Path, capture_only=False):
    """The run's turn on the GPU where it computes on one (backends/gpu_turn.py: runs sharing a GPU fail);
    `capture_only`: a compare, whose capture is all it runs."""
    b = spec.backends
    backend, confirm = (None, None) if capture_only else (b.backend, b.confirm_backend)
    return run_turn(backend, confirm, spec.capture.device, progress, stop, what=f"writing {out}")


def _load(valid: CheckedSpec, progress: ProgressSink | None, run_dir: Path | None = None) -> Workload:
    spec = valid.spec
    notify(progress, PhaseEvent("load", str(spec.model)))
    check = functools.partial(check_resumed_model, run_dir) if run_dir is not None else None
    work = load_workload(spec.model, spec.inputs, valid.inputs, run_dir, check_model=check)
    _check_output_names(spec, work)
    valid.keep.check_names(work.model)  # before any run directory is made
    return work


def _check_output_names(spec: RunSpec, work: Workload) -> None:
    """Per-output tolerances must name outputs of the model (a typo would silently use the plain tolerance)."""
    from precision_doctor.errors import SpecError
    from precision_doctor.graph.names import shown

    tol, outputs = spec.tolerance, work.model.outputs
    for kind in ("atol", "rtol"):
        unknown = [n for n in tol.per_output(kind) if n not in outputs]
        if unknown:
            setting = f"tolerance.output_{kind}"
            raise SpecError(setting, f"{{{setting}}} {shown(unknown[0])}: not an output of the model; its outputs are: "
                            f"{', '.join(shown(o) for o in outputs[:8])}{' ...' if len(outputs) > 8 else ''}")


def _loaded(spec: RunSpec, work: Workload, held_out: list, progress: ProgressSink | None) -> None:
    model = work.model
    notify(progress, LoadedEvent(spec.model, len(model.nodes), tuple(model.renamed_nodes), len(work.samples),
                                 len(held_out), tuple(model.unsafe_names.items()), len(work.repeated)))
