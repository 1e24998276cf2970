"""TensorRT after a diagnosis: `trt_check` of fixed.onnx (every passing run, where a TensorRT-family
parser imports) and the fixed engine `fixed.plan` (`artifacts.engine`, or `emit --format engine` later).

Neither can fail a diagnosis: a missing library, a parser refusal or a model the builder cannot build
becomes the report's one-line reason. A check that disagrees with the answer is a loud warning (the
engine would not run what the answer says), not an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from precision_doctor.backends import knobs
from precision_doctor.backends.registry import knob_family
from precision_doctor.backends.tensorrt.availability import missing_library
from precision_doctor.backends.tensorrt.library import LABELS
from precision_doctor.errors import UserError
from precision_doctor.results.report import EngineResult, Report, TrtCheckResult, TrtLayerMismatch
from precision_doctor.runfiles import RunDir

if TYPE_CHECKING:
    from precision_doctor.backends.tensorrt.build import ShapeRange
    from precision_doctor.graph.model import Model
    from precision_doctor.graph.shapes import InputShape
    from precision_doctor.pipeline.artifacts import Written
    from precision_doctor.pipeline.context import KnobOutcome
    from precision_doctor.spec import RunSpec

FIXED_ONNX = "fixed.onnx"
FIXED_PLAN = "fixed.plan"
REPORT_JSON = "report.json"
# what building the engine may write in a run directory (the plan, TensorRT's caches, their temporaries)
ENGINE_FILES = (FIXED_PLAN, f".{FIXED_PLAN}.partial", "timing.cache", ".timing.cache.partial", "runtime.cache",
                ".runtime.cache.partial")


def _library():
    """The TensorRT library to use, or (None, why not)."""
    from precision_doctor.backends.tensorrt.library import find_library

    try:
        lib, why = find_library()
    except UserError as exc:
        return None, str(exc)
    return (lib, None) if lib is not None else (None, missing_library(why))


def check_fixed(fixed_onnx: Path, fallback: Iterable[str], candidates: Iterable[str], precision: str,
                forced: Mapping[str, str]) -> TrtCheckResult:
    """`trt_check` of fixed.onnx against the answer, as the report keeps it (or why it did not run)."""
    from precision_doctor.backends.tensorrt.check import trt_check

    lib, why = _library()
    if lib is None:
        return TrtCheckResult(ran=False, reason=why)
    try:
        res = trt_check(fixed_onnx, fallback, candidates, precision, forced=forced, lib=lib)
    except UserError as exc:
        return TrtCheckResult(ran=False, reason=str(exc))
    return TrtCheckResult(
        ran=True, library=LABELS[lib.family], version=res.version, onnx=Path(res.onnx_path).name, layers=res.layers,
        checked_layers=res.checked_layers, checked_nodes=res.checked_nodes,
        mismatches=[TrtLayerMismatch(m.node, m.layer, m.layer_type, m.role, m.expected, list(m.found))
                    for m in res.mismatches],
        unmapped=list(res.unmapped),
    )


def engine_knobs(config: knobs.KnobConfig | None) -> dict:
    """`build_engine`'s tactic sources and TF32 for a TensorRT knob configuration (none for others)."""
    if config is None or config.backend != knobs.TRT:
        return {}
    from precision_doctor.backends.tensorrt.tactics import parse_tactic_sources

    kwargs = knobs.trt_backend_kwargs(config)
    return {"tactic_sources": parse_tactic_sources(kwargs["tactic_sources"]), "tf32": kwargs["tf32"]}


def build_fixed(run: RunDir, targets: Sequence[str] | None, config: knobs.KnobConfig | None = None,
                input_shapes: Mapping[str, Sequence[int] | ShapeRange] | None = None) -> EngineResult:
    """Build `run/fixed.plan` from `run/fixed.onnx` (TensorRT-RTX: for `targets`, default its portable
    set; TensorRT: for the GPU present), caches in `run` (its manifest lists them); the result, or why it was not
    built."""
    run_dir = run.root
    from precision_doctor.backends.tensorrt.build import build_engine

    lib, why = _library()
    if lib is None:
        return EngineResult(built=False, reason=why)
    from precision_doctor.backends.tensorrt.build import shape_range

    shapes = dict(input_shapes or {})
    try:
        b = build_engine(run_dir / FIXED_ONNX, run_dir / FIXED_PLAN, lib=lib, compute_capabilities=targets,
                         cache_dir=run_dir, input_shapes=shapes, writer=run, **engine_knobs(config))
    except UserError as exc:
        return EngineResult(built=False, reason=str(exc))
    cache = b.timing_cache or b.runtime_cache
    return EngineResult(
        built=True, plan=b.plan.name, library=LABELS[lib.family], version=b.version, targets=list(b.targets),
        seconds=round(b.seconds, 3), size_bytes=b.size_bytes, tf32=b.tf32,
        tactic_sources=list(b.tactic_sources) if b.tactic_sources is not None else None,
        cache=cache.name if cache is not None else None,
        input_shapes={k: list(shape_range(v)[1]) for k, v in shapes.items()},  # the shape the profile is tuned for
    )


def dynamic_inputs(fixed_onnx: Path) -> list[str]:
    """fixed.onnx's inputs with a dynamic dimension."""
    import onnx

    from precision_doctor.graph.model import declared_dims

    graph = onnx.load(str(fixed_onnx), load_external_data=False).graph
    return [i.name for i in graph.input if None in declared_dims(i.type.tensor_type.shape)]


def dynamic_input_shapes(fixed_onnx: Path, sample: Mapping[str, object] | None) -> dict[str, list[int]]:
    """Shapes for fixed.onnx's inputs with dynamic dimensions, from a sample (the run's samples share shapes)."""
    if sample is None:
        return {}
    return {n: [int(d) for d in getattr(sample[n], "shape", ())] for n in dynamic_inputs(fixed_onnx) if n in sample}


def engine_for_run(run_dir: Path, targets: Sequence[str] | None) -> EngineResult:
    """`emit RUN_DIR --format engine`: build fixed.plan from a finished run's fixed.onnx (with the TensorRT knob
    configuration the run found, if any), record it in report.json and render the reports again. UserError
    (exit 2) where nothing can be tried: no passing set, no library, targets it does not build for; a model
    the builder refuses comes back as a result that was not built. Files there that precision-doctor did not
    write are never replaced (`results.rundir.updating`)."""
    from precision_doctor.render import report_files
    from precision_doctor.results.rundir import updating

    report = Report.load(run_dir)
    fixed = run_dir / FIXED_ONNX
    if not report.answered or not fixed.is_file():
        raise UserError(f"{run_dir}: the run found no passing set (no fixed.onnx), so there is no engine to build")
    writes = [REPORT_JSON, *report_files(report).values(), *ENGINE_FILES]
    with updating(run_dir, writes):
        return _engine_for_run(RunDir(run_dir), report, fixed, targets)


def _engine_for_run(run: RunDir, report: Report, fixed: Path, targets: Sequence[str] | None) -> EngineResult:
    from precision_doctor.pipeline.reporting import write_report

    run_dir = run.root
    lib, why = _library()
    if lib is None:
        raise UserError(f"cannot build {FIXED_PLAN}: {why}")
    from precision_doctor.backends.tensorrt.availability import check_engine_targets

    if bad := check_engine_targets(targets):
        raise UserError(f"--engine-targets: {bad}")
    k = report.checks.knobs
    config = knobs.config_of(knobs.TRT, k.best_settings) \
        if k is not None and k.best_settings and knob_family(k.backend) == knobs.TRT else None
    shapes: dict = profile_shapes(fixed, report.search.input_shapes)
    if not shapes and dynamic_inputs(fixed) and (run_dir / "inputs.json").is_file():  # a report of an older version
        from precision_doctor.data.arrayfiles import read_polygraphy_json
        from precision_doctor.data.input_spec import MAX_ELEMENTS

        samples = read_polygraphy_json(run_dir / "inputs.json", MAX_ELEMENTS, where=str(run_dir / "inputs.json"))
        shapes = dynamic_input_shapes(fixed, samples[0] if isinstance(samples, list) and samples
                                      and isinstance(samples[0], dict) else None)
    result = build_fixed(run, targets, config, shapes)
    report.tensorrt.engine = result
    if result.built and result.plan:
        report.answer.artifacts = {**report.answer.artifacts, "engine": result.plan}
    write_report(run, report)
    return result


def tensorrt_steps(run: RunDir, model: Model, final: frozenset[str], spec: RunSpec, written: Written,
                   knob_outcome: KnobOutcome | None, shapes: Sequence[InputShape]) -> tuple[TrtCheckResult, EngineResult | None]:
    """After the artifacts of a passing run: `trt_check` of fixed.onnx, then the fixed engine when
    `artifacts.engine` asks for it (built with the knob configuration found, if a TensorRT one, and an
    optimization profile spanning the shapes the samples gave the dynamic inputs)."""
    fixed = run.root / FIXED_ONNX
    check = check_fixed(fixed, final, [n.name for n in model.candidates], spec.precision, written.forced)
    engine = None
    if spec.artifacts.engine:
        config = knob_outcome.emitted if knob_outcome is not None else None
        engine = build_fixed(run, spec.artifacts.targets, config, profile_shapes(fixed, shapes))
    return check, engine


def profile_shapes(fixed_onnx: Path, shapes: Sequence[InputShape]) -> dict[str, ShapeRange]:
    """(min, opt, max) of each input of fixed.onnx with a dynamic dimension, from the samples' shapes."""
    dynamic = set(dynamic_inputs(fixed_onnx))
    return {s.name: (s.min, s.opt, s.max) for s in shapes if s.name in dynamic}
