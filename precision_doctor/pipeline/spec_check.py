"""A RunSpec's settings checked before any work: `validate_spec(spec)` raises `SpecError` naming the setting, or
returns a `CheckedSpec`, the spec with what its settings strings mean (the inputs' value ranges and shapes, the
capture's keep plan), parsed once.

spec.py holds the settings (their defaults, choices and upper bounds) and reads and writes them; the checks need the
backends (their registry), the emulation rules, the strategies and the input parsers, so they live here, above all
of those. The model and the sample files are read later (`data/workload.load_workload`). The settings are checked
once, at the edge: by a front end that says a refusal in its own words first (the CLI, a batch's recipes, a
service's job creation), or by the api for a plain RunSpec (`checked`); the pipeline below takes a CheckedSpec. The
checks run in the order below and the first one that fails is the error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from precision_doctor.backends import registry
from precision_doctor.backends.registry import AUTO, EMULATE, check_backend_name, plan_backends
from precision_doctor.data.inputs import InputValues
from precision_doctor.data.keep_plan import KeepPlan
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.formats import FORMATS
from precision_doctor.graph.rules import SETTING_CHOICES, resolve_rules
from precision_doctor.graph.targets import runtime
from precision_doctor.measure.capture import DEVICES
from precision_doctor.search import STRATEGY_INFO
from precision_doctor.spec import (
    COMPRESSIONS,
    COSTS,
    MAX_AUGMENT,
    MAX_EVALUATIONS,
    MAX_GROUP_MB,
    MAX_SAMPLES,
    MAX_TIME_BUDGET_S,
    TARGETS,
    RunSpec,
    check_tolerance,
)


@dataclass(frozen=True)
class CheckedSpec:
    """A RunSpec whose settings `validate_spec` checked (`spec`), with what its settings strings mean, parsed there:
    the inputs' value ranges and dynamic shapes (`inputs`) and which tensors the capture keeps (`keep`)."""

    spec: RunSpec
    inputs: InputValues
    keep: KeepPlan


def validate_spec(spec: RunSpec) -> CheckedSpec:
    """Check every setting of `spec` (the model and input files are read later); raises SpecError."""
    if spec.precision.lower() not in FORMATS:
        raise SpecError("precision", f"{{precision}}: unknown precision '{spec.precision}'; choose one of: "
                        f"{', '.join(FORMATS)}")
    check_tolerance(spec.tolerance)
    _check_search(spec)
    keep = _check_capture(spec)
    _check_backends(spec)
    _check_tensorrt(spec)
    return CheckedSpec(spec, _check_inputs(spec), keep)


def checked(spec: RunSpec | CheckedSpec) -> CheckedSpec:
    """`spec` checked: as it is where a front end checked it already, else by `validate_spec`."""
    return spec if isinstance(spec, CheckedSpec) else validate_spec(spec)


def _check_search(spec: RunSpec) -> None:
    s = spec.search
    if s.strategy not in STRATEGY_INFO:
        raise SpecError("search.strategy", f"{{search.strategy}}: unknown strategy '{s.strategy}'; choose one of: "
                        f"{', '.join(STRATEGY_INFO)}")
    if s.cost not in COSTS:
        raise SpecError("search.cost", f"{{search.cost}} must be one of {', '.join(COSTS)}, got '{s.cost}'")
    if s.batch is not None and s.batch < 1:
        raise SpecError("search.batch", f"{{search.batch}} must be at least 1, got {s.batch}")
    if not 0.0 <= s.margin < 1.0:
        raise SpecError("search.margin", f"{{search.margin}} must lie in [0, 1), got {s.margin}")
    if not 0 <= s.augment <= MAX_AUGMENT:
        raise SpecError("search.augment", f"{{search.augment}} must lie in [0, {MAX_AUGMENT}], got {s.augment}")
    if s.max_evaluations is not None and not 1 <= s.max_evaluations <= MAX_EVALUATIONS:
        raise SpecError("search.max_evaluations", f"{{search.max_evaluations}} must lie in [1, {MAX_EVALUATIONS}], "
                        f"got {s.max_evaluations}")
    if s.time_budget is not None and not (math.isfinite(s.time_budget) and 0 < s.time_budget <= MAX_TIME_BUDGET_S):
        raise SpecError("search.time_budget", f"{{search.time_budget}} must be a positive number of seconds (at most "
                        f"{MAX_TIME_BUDGET_S:g}), got {s.time_budget}")


def _check_capture(spec: RunSpec) -> KeepPlan:
    c = spec.capture
    if not 1 <= c.max_samples <= MAX_SAMPLES:
        raise SpecError("capture.max_samples", f"{{capture.max_samples}} must lie in [1, {MAX_SAMPLES}], "
                        f"got {c.max_samples}")
    if not (math.isfinite(c.group_mb) and 0 < c.group_mb <= MAX_GROUP_MB):
        raise SpecError("capture.group_mb", f"{{capture.group_mb}} must be a positive number of MiB (at most "
                        f"{MAX_GROUP_MB:.0f}), got {c.group_mb:g}")
    if c.compression not in COMPRESSIONS:
        raise SpecError("capture.compression", f"{{capture.compression}} must be one of "
                        f"{', '.join(map(str, COMPRESSIONS))}, got {c.compression!r}")
    keep = KeepPlan.parse(c.keep)  # SpecError naming the setting
    if c.device not in DEVICES:
        raise SpecError("capture.device", f"{{capture.device}} must be one of {', '.join(DEVICES)}, got {c.device!r}")
    return keep


def _check_backends(spec: RunSpec) -> None:
    b = spec.backends
    if b.confirm_backend is not None and b.confirm_backend == b.backend:
        raise SpecError("backends.confirm_backend", "{backends.confirm_backend} must differ from {backends.backend}")
    check_backend_name(b.backend, "backends.backend")
    if why := registry.search_refusal(b.backend):
        raise SpecError("backends.backend", why.replace("--backend", "{backends.backend}").replace(
            "--confirm-backend", "{backends.confirm_backend}"))
    if b.confirm_backend is not None:
        check_backend_name(b.confirm_backend, "backends.confirm_backend")
    if b.backend == AUTO and b.confirm_backend == EMULATE:
        raise SpecError("backends.confirm_backend", "{backends.backend} auto searches with the emulator: "
                        "{backends.confirm_backend} must be another backend")
    _check_target(spec)


def _check_target(spec: RunSpec) -> None:
    """The target runtime and the rules that model it: an answer for TensorRT never rests on ONNX Runtime's fusions
    (graph/targets.py), and a backend that measures one runtime only (`trt`: TensorRT) cannot find the answer for
    another."""
    b = spec.backends
    if b.target not in TARGETS:
        raise SpecError("backends.target", f"{{backends.target}}: unknown target '{b.target}'; choose one of: "
                        f"{', '.join(TARGETS)}")
    try:
        rules = resolve_rules(b.emulation_rules)
    except UserError as exc:
        raise SpecError("backends.rules", f"{{backends.rules}}: {exc} (the usual choices: "
                        f"{', '.join(SETTING_CHOICES)}; unset, the target's)") from None
    if b.target == "tensorrt" and rules.ort_fusions:
        raise SpecError("backends.rules", f"{{backends.rules}} {b.rules} models ONNX Runtime's fusions "
                        f"({', '.join(rules.ort_fusions)}), which TensorRT does not make: with {{backends.target}} "
                        "tensorrt (the default) leave {backends.rules} unset, or give {backends.target} ort-cuda")
    for setting in ("backends.backend", "backends.confirm_backend"):
        info = registry.info(getattr(b, setting.split(".")[1]))
        if info is not None and info.only_target not in (None, b.target):
            instead = " or ".join(i.name for i in registry.listed() if i.gpu and i.only_target is None)
            raise SpecError(setting, f"{{{setting}}} {info.name} measures {runtime(info.only_target).label}, not the "
                            f"{{backends.target}} {b.target} the answer is for: use {instead}, or {{backends.target}} "
                            f"{info.only_target}")


def _check_tensorrt(spec: RunSpec) -> None:
    """The TensorRT, knob and engine settings: a backend checked early (`trt`) refused in one line where it cannot run
    (before any work, so no run directory is made), knobs refused on the emulator, engine targets parsed and checked
    against the installed library."""
    b = spec.backends
    for setting in ("backends.backend", "backends.confirm_backend"):
        name = b.backend if setting == "backends.backend" else b.confirm_backend
        info = registry.info(name)
        if info is not None and info.checked_early and (why := info.unavailable()):
            raise SpecError(setting, f"{{{setting}}} {name} unavailable: {why}")
    if spec.search.knobs and (b.confirm_backend or b.backend) == EMULATE:
        raise SpecError("search.knobs", "{search.knobs}: the emulate backend has no knobs (it rounds explicitly: no "
                        "kernels to pick, no TF32); knobs are tried on ort-cuda or trt, as {backends.backend} or "
                        "{backends.confirm_backend}")
    if spec.search.knobs and b.backend == AUTO and b.confirm_backend is None:
        if (why := plan_backends(AUTO, None).no_gpu) is not None:
            raise SpecError("search.knobs", "{search.knobs}: the emulate backend has no knobs, and {backends.backend} "
                            f"auto confirms nowhere here ({why}); knobs are tried on ort-cuda or trt")
    a = spec.artifacts
    if a.engine_targets and not a.engine:
        raise SpecError("artifacts.engine_targets", "{artifacts.engine_targets} is a setting of the fixed engine: "
                        "add {artifacts.engine}")
    if a.engine and (why := registry.engine_targets_refusal(a.targets)):
        raise SpecError("artifacts.engine_targets", f"{{artifacts.engine_targets}}: {why}")


def _check_inputs(spec: RunSpec) -> InputValues:
    i = spec.inputs
    if i.samples < 1:
        raise SpecError("inputs.samples", f"{{inputs.samples}} must be at least 1, got {i.samples}")
    if i.samples > MAX_SAMPLES:
        raise SpecError("inputs.samples", f"{{inputs.samples}} must be at most {MAX_SAMPLES}, got {i.samples}")
    if i.seed < 0:
        raise SpecError("inputs.seed", f"{{inputs.seed}} must be a non-negative integer, got {i.seed}")
    if i.validation_split is not None and not 0 <= i.validation_split < 1:
        raise SpecError("inputs.validation_split", f"{{inputs.validation_split}} must lie in [0, 1), "
                        f"got {i.validation_split}")
    if i.max_samples is not None and i.max_samples < 1:
        raise SpecError("inputs.max_samples", f"{{inputs.max_samples}} must be at least 1, got {i.max_samples}")
    if i.data_loader_script is not None and i.files:
        raise SpecError("inputs.data_loader_script", "give the samples with {inputs.files} or "
                        "{inputs.data_loader_script}, not both")
    if i.reference_outputs is not None and not (i.files or i.data_loader_script):
        raise SpecError("inputs.reference_outputs", "{inputs.reference_outputs} needs the inputs they were "
                        "computed from: give them with {inputs.files} (polygraphy --save-inputs JSON or one "
                        "file per sample) or {inputs.data_loader_script}")
    return InputValues.parse(i)
