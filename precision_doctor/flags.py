"""The CLI's flag for each RunSpec setting, and the command line that runs a RunSpec.

One table: SpecError messages show a setting by its flag, `--resume` refusals and the reports print the
command that runs a spec (`command_line`). Nothing here imports typer, so the reports and the service can
print commands too (cli/options.py builds the options from the same table).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.spec import RunSpec

# RunSpec settings and run options -> the CLI's flags (SpecError messages are shown with these).
FLAGS: dict[str, str] = {
    "model": "MODEL",
    "precision": "--precision",
    "inputs.files": "--inputs",
    "inputs.data_loader_script": "--data-loader-script",
    "inputs.max_samples": "--max-samples",
    "inputs.samples": "--samples",
    "inputs.seed": "--seed",
    "inputs.val_ranges": "--val-range",
    "inputs.input_shapes": "--input-shapes",
    "inputs.allow_nonfinite": "--allow-nonfinite-inputs",
    "inputs.validate_files": "--validate-inputs",
    "inputs.validation_split": "--validation-split",
    "inputs.reference_outputs": "--reference-outputs",
    "tolerance.atol": "--atol",
    "tolerance.rtol": "--rtol",
    "tolerance.output_atol": "--atol",
    "tolerance.output_rtol": "--rtol",
    "tolerance.check_error_stat": "--check-error-stat",
    "tolerance.cosine_floor": "--cosine-floor",
    "search.strategy": "--strategy",
    "search.cost": "--cost",
    "search.batch": "--batch",
    "search.margin": "--margin",
    "search.augment": "--augment",
    "search.max_evaluations": "--max-evaluations",
    "search.time_budget": "--time-budget",
    "search.keep_io_types": "--keep-io-types",
    "search.knobs": "--knobs",
    "artifacts.engine": "--engine",
    "artifacts.engine_targets": "--engine-targets",
    "capture.max_samples": "--capture-samples",
    "capture.group_mb": "--group-mb",
    "capture.keep": "--keep-activations",
    "capture.device": "--capture-device",
    "backends.backend": "--backend",
    "backends.confirm_backend": "--confirm-backend",
    "backends.rules": "--emulation-rules",
    "backends.target": "--target",
    "out_dir": "--out",
    "force": "--force",
    "resume": "--resume",
    "rerun": "--rerun",
    "jobs": "--jobs",
    "executor": "--executor",
    "ray_address": "--ray-address",
    "ray_cpus": "--ray-cpus",
    "only": "--only",
}


def flag(setting: str) -> str:
    """The CLI flag of a setting (the setting's path where no flag sets it)."""
    return FLAGS.get(setting, setting)


def command_line(command: str, model: str | Path | None, spec: RunSpec, *extra: str) -> str:
    """The command that runs `spec` (only the settings that differ from the defaults are spelled out),
    with `extra` arguments at the end; quoted for a POSIX shell."""
    base = RunSpec(model="").flat()
    args = ["precision-doctor", command, *([str(model)] if model is not None else [])]
    for path, value in spec.flat().items():
        if path != "model" and path in FLAGS and value != base[path] and value is not None:
            args += flag_args(path, value)
    return shlex.join([*args, *extra])


def tolerance_flags(tol: Tolerance) -> str:
    """The flags that set `tol`'s atol and rtol, per-output ones included: "--atol 0.001 --rtol 0.001"."""
    args = ["--atol", f"{tol.atol:g}", "--rtol", f"{tol.rtol:g}"]
    for kind in ("atol", "rtol"):
        args += [a for item in getattr(tol, f"output_{kind}") for a in (f"--{kind}", item)]
    return shlex.join(args)


def flag_args(path: str, value: Any) -> list[str]:
    """The arguments that set the setting `path` to `value` (a list: the flag once per item)."""
    name = FLAGS[path]
    if path == "search.keep_io_types":
        return ["--keep-io-types" if value else "--no-keep-io-types"]
    if isinstance(value, bool):
        return [name] if value else []
    if isinstance(value, list):
        return [a for v in value for a in (name, str(v))]
    return [name, f"{value:g}" if isinstance(value, float) else str(value)]
