"""What a report tells the reader to do next (`next_steps`: what and why, with the command) and the
precision-doctor commands it prints: run the diagnosis again (with other settings), continue it.

Each runs as printed from the report's own directory: the run's settings are kept with their paths relative to
it (`results.report.Invocation`), and a new run goes to a new directory beside it (`../<this run>-<why>`), since
a run directory holds one run. A service job's report gives a `submit` command instead: the job's files are
the server's copies, so the command names them as uploaded, from the folder that holds the user's files.
Reports written before the invocation was recorded fall back to the model path as given.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from precision_doctor.backends.base import check_only_name
from precision_doctor.flags import command_line
from precision_doctor.outcome import RunStatus
from precision_doctor.render.wording import floor_consequence, floor_finding, not_holding
from precision_doctor.results.report import Report
from precision_doctor.spec import RunSpec

HERE = "."  # a run directory, as a command run from it names it
RUN_FROM_HERE = ("Run these commands from the directory that holds this report: they name its files (fixed.onnx, "
                 "inputs.json, model.onnx) and your model and inputs by paths relative to it.")


def next_steps(report: Report) -> list[tuple[str, str | None]]:
    """What to do next, in order: (what and why, the command or None), the last one the command that runs this
    diagnosis again. Commands run from the run directory (the one holding this report): they use paths relative to
    it (render/commands.py). A tolerance tighter than the format can represent at the outputs comes first."""
    steps = _floor_steps(report) + _steps(report)
    if report.invocation is not None and not report.interrupted:
        steps.append(("To run this diagnosis again (after changing the model or the samples; add flags for other "
                      "settings), into a new directory beside this one:", rerun_command(report, "again")))
    return steps


def _floor_steps(report: Report) -> list[tuple[str, str | None]]:
    """Where the tolerance is tighter than the format can represent at the outputs: run again with a realistic one."""
    floor = report.rounding_floor
    suggested = floor.realistic(report.tolerance) if floor is not None and floor.below else None
    if suggested is None:
        return []
    why = floor_finding(floor, report.tolerance)
    changes = {"tolerance.atol": suggested.atol, "tolerance.rtol": suggested.rtol,
               "tolerance.output_atol": list(suggested.output_atol), "tolerance.output_rtol": list(suggested.output_rtol)}
    return [(f"{why}: {floor_consequence(floor)}. Run again with a tolerance above the rounding (your "
             "task decides how much error it allows; this one leaves the computation at least twice the rounding, "
             "which may still keep many nodes in FP32):",
             rerun_command(report, f"atol{suggested.atol:g}", changes))]


def _steps(report: Report) -> list[tuple[str, str | None]]:
    cmds = report.commands
    if report.status in (RunStatus.INTERRUPTED, RunStatus.BUDGET_EXHAUSTED):
        steps = [("The search did not finish. Continue it where it stopped (its settings are recorded in the run "
                  "directory; a larger --max-evaluations or --time-budget lets it go further):",
                  resume_command(report))]
        return steps if not report.passed else steps + _build_steps(report, cmds)
    if not_holding(report):
        margin = round(min(0.9, float(report.margin or 0.0) + 0.1), 2)
        h = report.expected_headroom
        failed = bool(h.failing_copies or h.failing_held_out)
        why = "fails on samples the search did not see" if failed else \
            "is predicted to exceed it on some new inputs (from how much its share varies between samples)"
        allow = "" if failed or h.risk is None else (
            f" Where a larger chance per new input than {100 * h.risk:g}% is acceptable, --risk allows it.")
        return [(f"The answer meets the tolerance on the searched samples but {why}: "
                 "give more --inputs of your data (from 4 on, some are held out to check it), or search with more room "
                 f"to spare (a larger --margin, more --augment copies).{allow} Searching again with a larger margin:",
                 rerun_command(report, f"margin{margin:g}", {"search.margin": margin}))]
    if not report.passed:
        base = report.baseline
        if base is not None and not base.passed and report.status == RunStatus.NO_SOLUTION:
            return [("Even with every candidate node in FP32 the outputs miss the reference: the tolerance is "
                     "tighter than FP32 itself reproduces (or the model is nondeterministic). Check the reference "
                     "(--reference-outputs) or loosen --atol/--rtol, then run diagnose again.", None)]
        return [("No set met the tolerance. Loosen --atol/--rtol (or use --check-error-stat mean) if your task "
                 "allows it, give more representative --inputs, or try --strategy linear.", None)]
    return _build_steps(report, cmds)


def _runtime_steps(report: Report) -> tuple[list[tuple[str, str | None]], bool]:
    """The steps that say which runtime each answer is for (report.json's `target`, `other_runtime`), and whether
    this directory's fixed.onnx is the one to build with TensorRT (not where TensorRT has its own answer)."""
    o, steps = report.other_runtime, []
    if report.target == "ort-cuda":
        steps.append(("This answer is for ONNX Runtime CUDA: run fixed.onnx (FP32 inputs and outputs, the FP16 "
                      "regions inside) with onnxruntime-gpu's CUDAExecutionProvider at the default graph optimizations.",
                      None))
    if o is None or o.passed is not False or o.answer is None or not o.directory:
        return steps, True
    if o.runtime == "tensorrt":
        steps.append((f"For TensorRT build {o.directory}/fixed.onnx instead, the answer for TensorRT (this one fails "
                      f"there); its scripts pick the TensorRT version and read this directory's inputs:",
                      f"./{o.directory}/trtexec.sh"))
        steps.append(("Or with TensorRT-RTX, ahead of time without a GPU:", f"./{o.directory}/tensorrt_rtx.sh"))
        return steps, False
    steps.append((f"For ONNX Runtime CUDA run {o.directory}/fixed.onnx instead, the answer for it (this one fails "
                  "there).", None))
    return steps, True


def _build_steps(report: Report, cmds: dict[str, str]) -> list[tuple[str, str | None]]:
    steps, tensorrt_here = _runtime_steps(report)
    if not tensorrt_here:
        cmds = {}
    check = (cmds.get("polygraphy") or "").splitlines()
    if check:
        steps.append(("Check the fixed model on the target GPU with TensorRT, from this report's directory: "
                      "polygraphy runs it there and compares its outputs with the FP32 reference at your tolerance.",
                      check[-1]))
    if cmds.get("trtexec_trt11"):
        steps.append(("Build the engine with TensorRT 11 (strongly typed: fixed.onnx carries the precisions):",
                      cmds["trtexec_trt11"]))
    if cmds.get("trtexec_trt10"):
        steps.append(("Or with TensorRT 10 (the original model, FP32 layers pinned); ./trtexec.sh picks the right "
                      "build for the TensorRT installed (PD_STRONGLY_TYPED=1 builds fixed.onnx on 10.x too):",
                      "./trtexec.sh"))
    if tensorrt_here and (cmds.get("tensorrt_rtx") or "tensorrt_rtx" in report.artifacts):
        steps.append(("Or with TensorRT-RTX, ahead of time without a GPU (engines run on Ampere and newer, not on "
                      "compute capability 9.0):", "./tensorrt_rtx.sh"))
    c = report.confirm
    if c is not None and c.passed and not check_only_name(c.backend):
        steps.append((f"The answer is already confirmed on {c.backend}; confirm it on your deployment GPU too if "
                      "that is another one.", None))
    else:
        steps.append(("The emulator can underestimate a GPU's FP16 error: let precision-doctor confirm (and repair) "
                      "the answer on the target GPU itself, with the same inputs and tolerance:",
                      rerun_command(report, "gpu", {"backends.confirm_backend": "ort-cuda"})))
    return steps


def rerun_command(report: Report, suffix: str, changes: dict[str, Any] | None = None) -> str:
    """The command that runs this diagnosis again with `changes` ({setting path: value}) into a new directory
    beside this one, named after it with `suffix`; a `submit` command for a service job."""
    inv = report.invocation
    if inv is None and report.service_job is None:
        return _legacy(report, changes or {}, f"RUN_DIR-{suffix}")
    spec = (inv.spec if inv is not None else _legacy_spec(report)).with_settings(changes or {})
    if report.service_job is not None or inv.origin == "service":
        return _submit(report, spec)
    return command_line("diagnose", spec.model, spec, "--out", f"../{inv.directory}-{suffix}")


def resume_command(report: Report) -> str:
    """The command that continues this run where it stopped (its settings are recorded in its directory)."""
    inv = report.invocation
    if inv is None:
        return _legacy(report, None, "RUN_DIR")
    if inv.origin == "service":
        job = report.service_job.id if report.service_job is not None else "JOB_ID"
        return shlex.join(["precision-doctor", "wait", job]) + "  # the service resumes its jobs itself"
    return shlex.join(["precision-doctor", "diagnose", inv.spec.model, "--resume", "--out", HERE])


def _submit(report: Report, spec) -> str:
    """A service job's `submit`: its files as the submitter named them (report.json's `service_job`: upload names,
    or paths on the server with `--remote`) and the daemon it reached; without that record, the file names."""
    job = report.service_job
    named = (lambda f: f) if job is not None and job.remote else (lambda f: Path(f).name)
    files = {"inputs.files": [named(f) for f in (job.inputs if job and job.inputs else spec.inputs.files)],
             "inputs.validate_files": [named(f) for f in (job.validate_inputs if job else spec.inputs.validate_files)]}
    ref = job.reference_outputs if job is not None else spec.inputs.reference_outputs
    if ref:
        files["inputs.reference_outputs"] = named(ref)
    model = named(job.model if job is not None and job.model else spec.model)
    where = (["--remote"] if job is not None and job.remote else []) + (
        ["--server", job.server] if job is not None and job.server else [])
    return command_line("submit", model, spec.with_settings(files), *where)


def _legacy_spec(report: Report) -> RunSpec:
    """The settings a report without an invocation (an older version's) still tells: precision and tolerance."""
    return RunSpec(model="", precision=report.precision, tolerance=report.tolerance)


def _legacy(report: Report, changes: dict[str, Any] | None, out: str) -> str:
    """The command of a report without an invocation (written by an older version): the model as given."""
    model = report.model.path if report.model is not None and report.model.path else "MODEL"
    if changes is None:
        return shlex.join(["precision-doctor", "diagnose", model, "--resume", "--out", out])
    files = report.inputs.get("files") if isinstance(report.inputs, dict) else None
    args = ["precision-doctor", "diagnose", model]
    if files:
        args += [a for f in files for a in ("--inputs", str(f))]
    args += ["--precision", report.precision, "--atol", f"{report.tolerance.atol:g}", "--rtol",
             f"{report.tolerance.rtol:g}"]
    for path, value in changes.items():
        args += [f"--{path.split('.')[-1].replace('_', '-')}", str(value)]
    return shlex.join([*args, "--out", out])
