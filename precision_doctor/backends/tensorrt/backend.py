"""TensorRT backend: a fallback set becomes a TensorRT engine (TensorRT 10, 11 or TensorRT-RTX).

Two ways to keep nodes in FP32, chosen by the installed library (or forced with `api`):

* weak typing (TensorRT 10): parse the original ONNX, enable `BuilderFlag.FP16`/`BF16` and
  `OBEY_PRECISION_CONSTRAINTS`, and for every network layer that comes from a fallback node set
  `layer.precision = float32` and `set_output_type(i, float32)` on its floating outputs;
* strong typing (TensorRT 11 removed the weak-typing API; TensorRT-RTX never had it): parse the
  mixed-precision ONNX that `mixed_builder(fallback)` returns (FP16/BF16 graph with FP32 islands,
  Casts at the borders) into a network created with `NetworkDefinitionCreationFlag.STRONGLY_TYPED`.

Engines are built with `build.py` (TF32 off, so FP32 layers are true FP32; TensorRT's timing cache
loaded before and saved after each build; TensorRT-RTX builds for the GPU present) and run through
polygraphy's `TrtRunner` (switched to `tensorrt_rtx` for TensorRT-RTX, whose JIT kernels go to a
runtime cache in `work_dir`). The backend refuses, in one line, where this machine cannot run the
library's engines: no GPU, or TensorRT-RTX on a compute capability it does not run (9.0, Hopper).

The library is imported only when a backend is built; without one `UserError` says why.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from precision_doctor.backends.base import Feeds
from precision_doctor.backends.tensorrt.availability import NOTHING_RUN
from precision_doctor.backends.tensorrt.build import RUNTIME_CACHE, TIMING_CACHE, BuildSettings, build_serialized, parse_onnx
from precision_doctor.backends.tensorrt.layers import layers_for_fallback, unmapped_nodes
from precision_doctor.backends.tensorrt.library import TrtLibrary, load_library, use_library_in_polygraphy
from precision_doctor.backends.tensorrt.tactics import parse_tactic_sources
from precision_doctor.errors import UserError
from precision_doctor.graph.model import Model
from precision_doctor.runfiles import RunDir

APIS = ("auto", "weak", "strong")
PRECISIONS = ("fp16", "bf16")


def _float_types(trt) -> set:
    return {t for t in (getattr(trt, n, None) for n in ("float32", "float16", "bfloat16")) if t is not None}


def _can_force_fp32(trt, layer) -> bool:
    """Whether a layer computes on floating activations (as polygraphy's `debug precision` decides):
    not a constant or shape layer, every output an execution tensor of a floating type."""
    skip = {getattr(trt.LayerType, n) for n in ("CONSTANT", "SHAPE") if hasattr(trt.LayerType, n)}
    if layer.type in skip or layer.num_outputs == 0:
        return False
    floats = _float_types(trt)
    for i in range(layer.num_outputs):
        out = layer.get_output(i)
        if out is None or not getattr(out, "is_execution_tensor", True) or out.dtype not in floats:
            return False
    return True


def pin_fp32_layers(trt, network, fallback: Iterable[str], onnx_names: Iterable[str]) -> tuple[list[str], list[str]]:
    """Weak typing: pin every layer that comes from a fallback node to FP32 (`precision` and the
    type of each output). Returns (layers pinned, fallback nodes that no layer comes from)."""
    fallback = sorted(set(fallback))
    names = set(onnx_names)
    pairs = [(layer.name, getattr(layer, "metadata", None)) for layer in network]
    targets = set(layers_for_fallback(pairs, fallback, names))
    pinned = []
    for layer in network:
        if layer.name not in targets or not _can_force_fp32(trt, layer):
            continue
        layer.precision = trt.float32
        for i in range(layer.num_outputs):
            layer.set_output_type(i, trt.float32)
        pinned.append(layer.name)
    return pinned, unmapped_nodes(pairs, fallback, names)


def _to_float32(a) -> np.ndarray:
    arr = np.asarray(a)
    if np.issubdtype(arr.dtype, np.floating) or arr.dtype.name == "bfloat16":
        return arr.astype(np.float32)  # always a copy: TrtRunner reuses its output buffers
    return arr.copy()


class TrtEngineRunner:
    """One built engine. `run` casts feeds to the engine's input types and floating outputs to
    float32. `engine_bytes` is the serialized engine (write it out as the fixed `.plan`);
    `layers` are the layers forced to FP32 (weak typing) and `unmapped` the fallback nodes that no
    layer came from. With TensorRT-RTX, `runtime_cache` (loaded if present, saved on `close`) keeps
    the kernels its JIT compiles, so later runs of the same engine start faster; `writer`: the run directory
    it is in (its manifest lists it), None: not recorded."""

    def __init__(
        self,
        engine_bytes: bytes,
        output_names: Sequence[str],
        mode: str,
        layers: Sequence[str] = (),
        unmapped: Sequence[str] = (),
        lib: TrtLibrary | None = None,
        runtime_cache: Path | None = None,
        writer: RunDir | None = None,
    ):
        lib = lib or load_library()
        use_library_in_polygraphy(lib)
        from polygraphy.backend.trt import TrtRunner, engine_from_bytes
        from polygraphy.datatype import DataType

        self.engine_bytes = engine_bytes
        self.output_names = list(output_names)
        self.mode = mode
        self.layers = list(layers)
        self.unmapped = list(unmapped)
        self.runtime_cache = runtime_cache if lib.is_rtx else None
        self.writer = writer
        self._cache = None
        engine = engine_from_bytes(engine_bytes)
        context = None
        if self.runtime_cache is not None:
            config = engine.create_runtime_config()
            self._cache = config.create_runtime_cache()
            if self.runtime_cache.exists():
                self._cache.deserialize(self.runtime_cache.read_bytes())
            config.set_runtime_cache(self._cache)
            context = engine.create_execution_context(config)
        self._engine = engine
        self._runner = TrtRunner(context if context is not None else engine)
        self._runner.activate()
        meta = self._runner.get_input_metadata(use_numpy_dtypes=False)
        self._input_dtypes = {name: DataType.to_dtype(dtype, "numpy") for name, (dtype, _) in meta.items()}

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        feed = {}
        for name, dtype in self._input_dtypes.items():
            if name not in feeds:
                raise UserError(f"input '{name}' missing from the feeds (got: {', '.join(feeds)})")
            feed[name] = np.ascontiguousarray(np.asarray(feeds[name]).astype(dtype, copy=False))
        res = self._runner.infer(feed)
        names = list(outputs) if outputs is not None else self.output_names
        missing = [n for n in names if n not in res]
        if missing:
            raise UserError(
                f"TensorRT engine has no output(s) {', '.join(missing)}; build the backend with outputs=[...] "
                "to mark intermediate tensors"
            )
        return {n: _to_float32(res[n]) for n in names}

    def close(self) -> None:
        runner = getattr(self, "_runner", None)
        if runner is not None and runner.is_active:
            runner.deactivate()
        cache = getattr(self, "_cache", None)
        if cache is not None and self.runtime_cache is not None:
            tmp = self.runtime_cache.with_name(f".{self.runtime_cache.name}.partial")
            if self.writer is not None:
                self.writer.written(tmp)
                self.writer.written(self.runtime_cache)
            tmp.write_bytes(bytes(cache.serialize()))
            tmp.replace(self.runtime_cache)
            self._cache = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _mark_outputs(network, names: Sequence[str]) -> None:
    """Make `names` (any tensors of the network) its outputs, in place of the model's own."""
    tensors = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for k in range(layer.num_outputs):
            t = layer.get_output(k)
            tensors[t.name] = t
    for i in range(network.num_inputs):
        tensors[network.get_input(i).name] = network.get_input(i)
    missing = [n for n in names if n not in tensors]
    if missing:
        raise UserError(f"TensorRT network has no tensor(s) {', '.join(missing[:5])} to mark as outputs")
    for t in [network.get_output(i) for i in range(network.num_outputs)]:
        if t.name not in names:
            network.unmark_output(t)
    current = {network.get_output(i).name for i in range(network.num_outputs)}
    for n in names:
        if n not in current:
            network.mark_output(tensors[n])


class TrtBackend:
    """Builds a TensorRT engine per fallback set (see the module docstring).

    `onnx_path`: the ONNX file parsed in weak mode (default: the model's own file when its nodes
    were all named, else a named copy in `work_dir`; layer names follow these node names).
    `mixed_builder(fallback) -> onnx.ModelProto`: the mixed-precision graph for strong mode
    (default: `precision_doctor.graph.mixed.build_mixed(model, fallback, precision)`).
    `tactic_sources`: see `parse_tactic_sources`. `timing_cache` (TensorRT): loaded if present,
    updated after every build (default: one in `work_dir`); TensorRT-RTX keeps a runtime cache there
    instead. `api`: "auto" (weak where the library has weak typing, i.e. TensorRT 10, else strong),
    "weak" or "strong". `input_shapes`: fixed shapes for dynamic inputs (min = opt = max).
    `library`: "tensorrt" or "tensorrt_rtx" (default: the first that imports). `tf32`: let FP32
    layers use TF32 (off: they compute in true FP32, as the emulator assumes). `writer`: the run directory
    `work_dir` is, whose manifest lists what the backend writes there (None: not recorded).
    """

    name = "tensorrt"

    def __init__(
        self,
        model: Model,
        onnx_path: str | Path | None = None,
        precision: str = "fp16",
        tactic_sources: str | Sequence[str] | None = None,
        timing_cache: str | Path | None = None,
        api: str = "auto",
        mixed_builder: Callable[[frozenset[str]], Any] | None = None,
        outputs: Sequence[str] | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        work_dir: str | Path | None = None,
        builder_optimization_level: int | None = None,
        verbose: bool = False,
        library: str | None = None,
        tf32: bool = False,
        writer: RunDir | None = None,
    ):
        if precision not in PRECISIONS:
            raise UserError(f"TensorRT backend: precision must be one of {', '.join(PRECISIONS)}, got '{precision}'")
        if api not in APIS:
            raise UserError(f"TensorRT backend: api must be one of {', '.join(APIS)}, got '{api}'")
        self.model = model
        self.precision = precision
        self.tactics = parse_tactic_sources(tactic_sources)
        self.output_names = list(outputs) if outputs is not None else list(model.outputs)
        self.input_shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
        self.builder_optimization_level = builder_optimization_level
        self.verbose = verbose
        self.tf32 = tf32
        self.onnx_names = {n.name for n in model.nodes}

        self.lib = load_library(library)
        self.trt = self.lib.module
        self.trt_version = self.lib.version
        if api == "auto":
            api = "weak" if self.lib.weak_typing else "strong"
        if api == "weak" and not self.lib.weak_typing:
            raise UserError(
                f"{self.lib.label} has no weak typing (BuilderFlag.FP16 and layer precisions were removed in TensorRT 11 "
                "and never were in TensorRT-RTX): use api='strong'"
            )
        self.mode = api
        run = self.lib.runtime()
        if not run.can_run:
            raise UserError(f"trt backend unavailable: {run.reason}; {NOTHING_RUN}")
        self._tmp = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="pd-trt-")
            work_dir = self._tmp.name
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.timing_cache = Path(timing_cache) if timing_cache is not None else self.work_dir / TIMING_CACHE
        self.runtime_cache = self.work_dir / RUNTIME_CACHE
        self._onnx_path = Path(onnx_path) if onnx_path is not None else None
        self._mixed_builder = mixed_builder
        self.writer = writer

    # -- Backend protocol ----------------------------------------------------------------------

    def prepare(self, fallback: frozenset[str]) -> TrtEngineRunner:
        fallback = frozenset(fallback)
        unknown = sorted(fallback - self.onnx_names)
        if unknown:
            raise UserError(f"fallback names no node of the model: {', '.join(unknown[:5])}")
        if self.mode == "weak":
            data, layers, unmapped = self._build_weak(fallback)
        else:
            data, layers, unmapped = self._build_strong(fallback), [], []
        return TrtEngineRunner(data, self.output_names, self.mode, layers, unmapped, self.lib, self.runtime_cache,
                               self.writer)

    # -- building ------------------------------------------------------------------------------

    def build_engine_bytes(self, fallback: frozenset[str]) -> bytes:
        """The serialized engine for `fallback` (what `trtexec --saveEngine` would write)."""
        fallback = frozenset(fallback)
        return self._build_weak(fallback)[0] if self.mode == "weak" else self._build_strong(fallback)

    @property
    def weak_onnx_path(self) -> Path:
        """The ONNX file weak-typing builds parse (its node names are the layer names); pass the
        same file to the emitted TensorRT 10 commands."""
        return self._weak_onnx_path()

    def _weak_onnx_path(self) -> Path:
        from precision_doctor.graph.toolnames import model_for_tools

        if self._onnx_path is None:  # TensorRT must see the node names the fallback set uses
            self._onnx_path = model_for_tools(self.model, self.work_dir, self.writer)
        return self._onnx_path

    def _settings(self, weak: bool) -> BuildSettings:
        return BuildSettings(
            weak_precision=self.precision if weak else None,
            tactic_sources=self.tactics,
            tf32=self.tf32,
            current_gpu=self.lib.is_rtx,  # the search runs here: build for this GPU, not a portable set
            builder_optimization_level=self.builder_optimization_level,
            timing_cache=None if self.lib.is_rtx else self.timing_cache,
            input_shapes=self.input_shapes,
        )

    def _engine_bytes(self, parsed, weak: bool) -> bytes:
        if self.output_names != list(self.model.outputs):
            _mark_outputs(parsed.network, self.output_names)
        return build_serialized(parsed, self._settings(weak), self.writer)[0]

    def _build_weak(self, fallback: frozenset[str]) -> tuple[bytes, list[str], list[str]]:
        parsed = parse_onnx(self.lib, self._weak_onnx_path(), strongly_typed=False)
        layers, unmapped = pin_fp32_layers(self.trt, parsed.network, fallback, self.onnx_names)
        data = self._engine_bytes(parsed, weak=True)
        return data, layers, unmapped

    def _mixed_model(self, fallback: frozenset[str]) -> onnx.ModelProto:
        if self._mixed_builder is None:
            try:
                from precision_doctor.graph.mixed import build_mixed
            except ImportError as exc:
                raise UserError(f"strongly typed TensorRT needs the mixed-precision graph builder: {exc}") from exc
            model, precision = self.model, self.precision
            self._mixed_builder = lambda fb: build_mixed(model, fb, precision)
        mixed = self._mixed_builder(fallback)
        if not isinstance(mixed, onnx.ModelProto) and hasattr(mixed, "proto"):
            mixed = mixed.proto
        if not isinstance(mixed, onnx.ModelProto):
            raise TypeError(f"mixed_builder must return an onnx.ModelProto, got {type(mixed).__name__}")
        return mixed

    def _build_strong(self, fallback: frozenset[str]) -> bytes:
        from precision_doctor.graph.toolnames import save_model

        key = hashlib.sha256("\n".join(sorted(fallback)).encode()).hexdigest()[:16]
        path = save_model(self._mixed_model(fallback), self.work_dir / f"mixed_{key}.onnx", self.writer)
        try:
            return self._engine_bytes(parse_onnx(self.lib, path, strongly_typed=True), weak=False)
        finally:
            for f in (path, path.with_name(path.name + ".data")):
                f.unlink(missing_ok=True)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
