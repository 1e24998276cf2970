"""The precision-doctor commands a report prints: run the diagnosis again (with other settings), continue it.

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

from precision_doctor.flags import command_line
from precision_doctor.results.report import Report
from precision_doctor.spec import RunSpec

HERE = "."  # a run directory, as a command run from it names it


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
