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

HERE = "."  # a run directory, as a command run from it names it


def rerun_command(report: Report, suffix: str, changes: dict[str, Any] | None = None) -> str:
    """The command that runs this diagnosis again with `changes` ({setting path: value}) into a new directory
    beside this one, named after it with `suffix`; a `submit` command for a service job."""
    inv = report.invocation
    if inv is None:
        return _legacy(report, changes or {}, f"RUN_DIR-{suffix}")
    spec = inv.spec.with_settings(changes or {})
    if inv.origin == "service":
        files = {"inputs.files": [Path(f).name for f in spec.inputs.files],
                 "inputs.validate_files": [Path(f).name for f in spec.inputs.validate_files]}
        if spec.inputs.reference_outputs:
            files["inputs.reference_outputs"] = Path(spec.inputs.reference_outputs).name
        spec = spec.with_settings(files)
        return command_line("submit", Path(spec.model).name, spec)
    return command_line("diagnose", spec.model, spec, "--out", f"../{inv.directory}-{suffix}")


def resume_command(report: Report) -> str:
    """The command that continues this run where it stopped (its settings are recorded in its directory)."""
    inv = report.invocation
    if inv is None:
        return _legacy(report, None, "RUN_DIR")
    if inv.origin == "service":
        return "precision-doctor wait JOB_ID  # the service resumes its jobs itself"
    return shlex.join(["precision-doctor", "diagnose", inv.spec.model, "--resume", "--out", HERE])


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
