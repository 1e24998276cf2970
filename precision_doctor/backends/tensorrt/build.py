"""Parse ONNX into a TensorRT network and build serialized engines: one code path for TensorRT 10,
TensorRT 11 and TensorRT-RTX, through the libraries' own API (Builder, OnnxParser, IBuilderConfig).

* Strongly typed networks (`NetworkDefinitionCreationFlag.STRONGLY_TYPED`; ignored by TensorRT 11,
  where every network is strongly typed, and expected by TensorRT-RTX) keep the ONNX graph's types.
* TF32 is on by default in every builder config (TensorRT 10/11 and TensorRT-RTX 1.7 alike):
  FP32 layers then multiply with 10-bit mantissas. A build here clears it unless `tf32=True`.
* Timing cache (TensorRT): loaded before and saved after a build. TensorRT-RTX ignores timing caches
  (its documentation: no effect on the engine, and using one forces a GPU query, so no CPU-only
  ahead-of-time build); its JIT kernels go to a runtime cache when an engine runs.
* Targets (TensorRT-RTX): compute capabilities named in the config, `ComputeCapability.CURRENT` for
  the GPU present, or none (the library's portable default). TensorRT builds for the GPU present.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_doctor.backends.tensorrt.library import CC, TrtLibrary, format_cc, parse_cc
from precision_doctor.backends.tensorrt.tactics import TacticSpec, resolve_tactic_sources
from precision_doctor.errors import UserError
from precision_doctor.runfiles import RunDir

WEAK_PRECISION_FLAGS = {"fp16": "FP16", "bf16": "BF16"}
ShapeRange = tuple[Sequence[int], Sequence[int], Sequence[int]]  # (min, opt, max) of a dynamic input


LAYER_DUMP = "Layers:"  # how the builder's verbose message listing the engine's layers starts


def _logger(lib: TrtLibrary, keep_layer_dump: bool = False):
    """An ILogger that keeps warnings and errors (the first error goes into our one-line messages), and with
    `keep_layer_dump` the builder's verbose list of the engine's layers (`kernels.py` reads it)."""
    trt = lib.module

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.messages: list[tuple[Any, str]] = []

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.WARNING or (keep_layer_dump and str(msg).startswith(LAYER_DUMP)):
                self.messages.append((severity, str(msg)))

        def first_error(self) -> str | None:
            errs = [m for s, m in self.messages if s <= trt.ILogger.Severity.ERROR]
            return errs[0].strip().splitlines()[0][:300] if errs else None

    return Logger()


@dataclass(frozen=True)
class LayerInfo:
    """One layer of a parsed network: name, type, the parser's metadata and its tensors' types."""

    index: int
    name: str
    type: str
    metadata: str | None
    output_types: tuple[str, ...]
    input_types: tuple[str, ...]


def _dtype_name(tensor) -> str:
    dtype = tensor.dtype
    return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]


@dataclass
class ParsedNetwork:
    """A network parsed from an ONNX file, with the builder, parser and logger that own it."""

    lib: TrtLibrary
    path: Path
    builder: Any
    network: Any
    parser: Any
    logger: Any
    strongly_typed: bool

    def layers(self) -> list[LayerInfo]:
        out = []
        for i in range(self.network.num_layers):
            layer = self.network.get_layer(i)
            outs = [layer.get_output(k) for k in range(layer.num_outputs)]
            ins = [layer.get_input(k) for k in range(layer.num_inputs)]
            out.append(
                LayerInfo(
                    index=i,
                    name=layer.name,
                    type=str(getattr(layer.type, "name", layer.type)).rsplit(".", 1)[-1],
                    metadata=getattr(layer, "metadata", None) or None,
                    output_types=tuple(_dtype_name(t) for t in outs if t is not None),
                    input_types=tuple(_dtype_name(t) for t in ins if t is not None),
                )
            )
        return out

    def inputs(self) -> dict[str, tuple[int, ...]]:
        """Network input name -> shape (-1 for a dynamic dimension)."""
        return {
            self.network.get_input(i).name: tuple(int(d) for d in self.network.get_input(i).shape)
            for i in range(self.network.num_inputs)
        }


def parse_onnx(lib: TrtLibrary, path: str | Path, strongly_typed: bool = True,
               keep_layer_dump: bool = False) -> ParsedNetwork:
    """Parse an ONNX file (external data beside it is read too) into a network; UserError naming the
    file and the first parser error when TensorRT's parser refuses it. `keep_layer_dump`: the logger keeps
    the builder's list of the engine's layers (`kernels.engine_kernels`)."""
    trt = lib.module
    path = Path(path)
    if not path.is_file():
        raise UserError(f"ONNX file not found: {path}")
    logger = _logger(lib, keep_layer_dump)
    builder = trt.Builder(logger)
    if builder is None:
        raise UserError(f"{lib.label}: cannot create a builder ({logger.first_error() or 'no reason given'})")
    flags = 0
    if strongly_typed and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(path)):
        errs = [parser.get_error(i) for i in range(parser.num_errors)]
        first = errs[0] if errs else None
        where = ""
        if first is not None:
            node = getattr(first, "node_name", lambda: "")() or ""
            op = getattr(first, "node_operator", lambda: "")() or ""
            where = f" at node '{node}' ({op})" if node or op else ""
        why = (first.desc() if first is not None else None) or logger.first_error() or "no reason given"
        raise UserError(f"{lib.label}'s ONNX parser refused {path}{where}: {str(why).splitlines()[0][:300]}")
    return ParsedNetwork(lib, path, builder, network, parser, logger, strongly_typed)


@dataclass(frozen=True)
class BuildSettings:
    """What a build may set. `weak_precision`: the FP16/BF16 builder flag with obeyed layer precisions
    (weak typing, TensorRT 10 only). `compute_capabilities` (TensorRT-RTX): targets, None for the
    library's portable default; `current_gpu`: the GPU present instead. `timing_cache`: TensorRT only."""

    weak_precision: str | None = None
    tactic_sources: TacticSpec | None = None
    tf32: bool = False
    compute_capabilities: tuple[CC, ...] | None = None
    current_gpu: bool = False
    builder_optimization_level: int | None = None
    timing_cache: Path | None = None
    input_shapes: Mapping[str, Sequence[int] | ShapeRange] = field(default_factory=dict)


def compute_capability_targets(lib: TrtLibrary, names: Sequence[str] | None) -> tuple[CC, ...] | None:
    """Parse user-given targets ('8.6', '12.0') against what the library can target; None stays None."""
    if names is None:
        return None
    if not lib.is_rtx:
        raise UserError(f"{lib.label} builds for the GPU it runs on: compute capabilities are a TensorRT-RTX setting")
    ccs = tuple(dict.fromkeys(parse_cc(n) for n in names))
    bad = [format_cc(c) for c in ccs if c not in lib.target_compute_capabilities]
    if bad or not ccs:
        known = " ".join(format_cc(c) for c in lib.target_compute_capabilities)
        raise UserError(f"compute capability {', '.join(bad) or '(none given)'}: {lib.label} targets {known}")
    return ccs


def shape_range(value: Sequence[int] | ShapeRange) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(min, opt, max) of an input: a shape is all three, a (min, opt, max) triple is itself."""
    if len(value) == 3 and all(isinstance(v, (list, tuple)) for v in value):
        lo, opt, hi = (tuple(int(d) for d in v) for v in value)  # type: ignore[union-attr]
        return lo, opt, hi
    fixed = tuple(int(d) for d in value)  # type: ignore[arg-type]
    return fixed, fixed, fixed


def _profile(parsed: ParsedNetwork, shapes: Mapping[str, Sequence[int] | ShapeRange]):
    """One optimization profile for the dynamic inputs: a shape fixes an input (min = opt = max), a
    (min, opt, max) triple spans a range; None when every input is static."""
    inputs = parsed.inputs()
    unknown = [n for n in shapes if n not in inputs]
    if unknown:
        raise UserError(f"input shape given for '{unknown[0]}', which is not an input of {parsed.path.name}")
    dynamic = {n: s for n, s in inputs.items() if any(d < 0 for d in s)}
    if not dynamic:
        return None
    profile = parsed.builder.create_optimization_profile()
    for name, shape in dynamic.items():
        if name not in shapes:
            dims = "x".join("?" if d < 0 else str(d) for d in shape)
            raise UserError(f"{parsed.path.name}: input '{name}' has a dynamic shape [{dims}]; give its shape (input_shapes)")
        lo, opt, hi = shape_range(shapes[name])
        for fixed in (lo, opt, hi):
            if len(fixed) != len(shape) or any(d >= 0 and d != f for d, f in zip(shape, fixed)):
                raise UserError(f"input shape {list(fixed)} for '{name}' does not fit the model's {list(shape)}")
        profile.set_shape(name, lo, opt, hi)
    return profile


def make_config(parsed: ParsedNetwork, settings: BuildSettings) -> tuple[Any, list[str] | None]:
    """The builder config for `settings` (see the module docstring for what each library keeps), and
    the tactic sources it enables when `settings` names some."""
    lib, trt = parsed.lib, parsed.lib.module
    config = parsed.builder.create_builder_config()
    names = None
    if settings.weak_precision is not None:
        flag = WEAK_PRECISION_FLAGS[settings.weak_precision]
        if not lib.weak_typing or not hasattr(trt.BuilderFlag, flag):
            raise UserError(f"{lib.label} has no weak typing (BuilderFlag.{flag}): build a mixed-precision ONNX strongly typed")
        config.set_flag(getattr(trt.BuilderFlag, flag))
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    if hasattr(trt.BuilderFlag, "TF32"):
        (config.set_flag if settings.tf32 else config.clear_flag)(trt.BuilderFlag.TF32)
    if settings.tactic_sources is not None:
        available = lib.tactic_sources
        names = resolve_tactic_sources(settings.tactic_sources, available, int(config.get_tactic_sources()), lib.label)
        mask = 0
        for n in names:
            mask |= 1 << available[n]
        config.set_tactic_sources(mask)
    if settings.builder_optimization_level is not None:
        config.builder_optimization_level = int(settings.builder_optimization_level)
    if lib.is_rtx:
        _set_targets(lib, config, settings)
    elif settings.timing_cache is not None:
        data = settings.timing_cache.read_bytes() if settings.timing_cache.exists() else b""
        cache = config.create_timing_cache(data)
        config.set_timing_cache(cache, ignore_mismatch=False)
    profile = _profile(parsed, settings.input_shapes)
    if profile is not None:
        config.add_optimization_profile(profile)
    return config, names


def _set_targets(lib: TrtLibrary, config, settings: BuildSettings) -> None:
    trt = lib.module
    if settings.current_gpu:
        config.num_compute_capabilities = 1
        config.set_compute_capability(trt.ComputeCapability.CURRENT, 0)
    elif settings.compute_capabilities:
        config.num_compute_capabilities = len(settings.compute_capabilities)
        for i, (major, minor) in enumerate(settings.compute_capabilities):
            if not config.set_compute_capability(getattr(trt.ComputeCapability, f"SM{major}{minor}"), i):
                raise UserError(f"{lib.label} refused target compute capability {major}.{minor}")


def build_serialized(parsed: ParsedNetwork, settings: BuildSettings,
                     writer: RunDir | None = None) -> tuple[bytes, list[str] | None]:
    """Build the engine: (serialized engine, tactic sources enabled when `settings` named some);
    UserError with TensorRT's first error when the build fails. `writer`: the run directory the timing cache
    is in (its manifest lists it), None: not recorded."""
    config, tactic_names = make_config(parsed, settings)
    data = parsed.builder.build_serialized_network(parsed.network, config)
    if data is None:
        why = parsed.logger.first_error() or "no reason given"
        raise UserError(f"{parsed.lib.label} could not build an engine from {parsed.path.name}: {why}")
    if settings.timing_cache is not None and not parsed.lib.is_rtx:
        cache = config.get_timing_cache()
        if cache is not None:
            _write_atomic(settings.timing_cache, bytes(cache.serialize()), writer)
    return bytes(data), tactic_names


def _write_atomic(path: Path, data: bytes, writer: RunDir | None) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    if writer is not None:  # in a run directory (fixed.plan, its caches), its manifest lists them
        writer.written(tmp)
        writer.written(path)
    tmp.write_bytes(data)
    tmp.replace(path)


@dataclass(frozen=True)
class EngineBuild:
    """What `build_engine` made: the plan file and how it was built."""

    plan: Path
    size_bytes: int
    seconds: float
    library: str
    version: str
    targets: tuple[str, ...]  # compute capabilities, or ("this GPU",)
    tf32: bool
    tactic_sources: tuple[str, ...] | None
    timing_cache: Path | None
    runtime_cache: Path | None
    layers: int

    def to_dict(self) -> dict:
        return {
            "plan": str(self.plan), "size_bytes": self.size_bytes, "seconds": round(self.seconds, 3),
            "library": self.library, "version": self.version, "targets": list(self.targets), "tf32": self.tf32,
            "tactic_sources": list(self.tactic_sources) if self.tactic_sources is not None else None,
            "timing_cache": str(self.timing_cache) if self.timing_cache else None,
            "runtime_cache": str(self.runtime_cache) if self.runtime_cache else None, "layers": self.layers,
        }


TIMING_CACHE = "timing.cache"
RUNTIME_CACHE = "runtime.cache"


def build_engine(
    onnx_path: str | Path,
    plan_path: str | Path,
    *,
    lib: TrtLibrary | None = None,
    compute_capabilities: Sequence[str] | None = None,
    tactic_sources: TacticSpec | None = None,
    tf32: bool = False,
    cache_dir: str | Path | None = None,
    input_shapes: Mapping[str, Sequence[int] | ShapeRange] | None = None,
    builder_optimization_level: int | None = None,
    writer: RunDir | None = None,
) -> EngineBuild:
    """Build `onnx_path` (a strongly typed, mixed-precision graph such as fixed.onnx) into `plan_path`.

    TensorRT-RTX builds ahead of time, no GPU needed, for `compute_capabilities` (e.g. ["8.6", "12.0"];
    default: the library's portable set). TensorRT builds for the GPU present (a UserError without
    one). `cache_dir` (default: the plan's folder) keeps TensorRT's `timing.cache`; for TensorRT-RTX
    it is where `runtime.cache` goes when the engine runs here (nothing to cache at build time). `writer`: the
    run directory the plan and its cache are written in (its manifest lists them), None: not recorded.
    """
    from precision_doctor.backends.tensorrt.library import load_library

    lib = lib or load_library()
    plan_path = Path(plan_path)
    cache_dir = Path(cache_dir) if cache_dir is not None else plan_path.parent
    targets = compute_capability_targets(lib, compute_capabilities)
    if not lib.is_rtx:
        run = lib.runtime()
        if not run.can_run:
            raise UserError(f"{run.reason}: TensorRT builds engines on the GPU they are for (TensorRT-RTX builds without one)")
    settings = BuildSettings(
        tactic_sources=tactic_sources, tf32=tf32, compute_capabilities=targets,
        builder_optimization_level=builder_optimization_level, input_shapes=dict(input_shapes or {}),
        timing_cache=None if lib.is_rtx else cache_dir / TIMING_CACHE,
    )
    t0 = time.perf_counter()
    parsed = parse_onnx(lib, onnx_path, strongly_typed=True)
    data, tactic_names = build_serialized(parsed, settings, writer)
    seconds = time.perf_counter() - t0
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(plan_path, data, writer)
    if lib.is_rtx:
        shown = tuple(format_cc(c) for c in (targets or lib.default_compute_capabilities))
    else:
        shown = ("this GPU",)
    return EngineBuild(
        plan=plan_path, size_bytes=len(data), seconds=seconds, library=lib.family, version=lib.version, targets=shown,
        tf32=tf32, tactic_sources=tuple(tactic_names) if tactic_names is not None else None, timing_cache=settings.timing_cache,
        runtime_cache=cache_dir / RUNTIME_CACHE if lib.is_rtx else None, layers=parsed.network.num_layers,
    )
