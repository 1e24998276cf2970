"""TensorRT backend: a fallback set becomes a TensorRT engine.

Two ways to keep nodes in FP32, chosen by the installed TensorRT (or forced with `api`):

* weak typing (TensorRT 10): parse the original ONNX, enable `BuilderFlag.FP16`/`BF16` and
  `OBEY_PRECISION_CONSTRAINTS`, and for every network layer that comes from a fallback node set
  `layer.precision = float32` and `set_output_type(i, float32)` on its floating outputs;
* strong typing (TensorRT 11 removed the weak-typing API): parse the mixed-precision ONNX that
  `mixed_builder(fallback)` returns (FP16/BF16 graph with FP32 islands, Casts at the borders) into
  a network created with `NetworkDefinitionCreationFlag.STRONGLY_TYPED`.

A timing cache is loaded before and saved after each build, so later builds of the search reuse
tactic timings. Engines are built and run through polygraphy's loaders and `TrtRunner`.

TensorRT's ONNX parser names the first layer of a node after the node and further layers of the
same node `<node>_<n>` (a parser-wide counter), and records the source node in the layer's
metadata as `[ONNX Layer: <node>]` (`[ONNX Layer: <node> | <caller> (<function>) ...]` inside
local functions); engine-level layer info joins the entries of fused layers with `\\x1f`. The
pure helpers below (`onnx_node_of_layer`, `layers_for_fallback`, `parse_tactic_sources`,
`resolve_tactic_sources`, `trt_major_version`) need no TensorRT and are unit-tested.

`tensorrt` is imported only when a backend is built; without it `UserError` says why.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from precision_doctor.backends.base import Feeds
from precision_doctor.errors import UserError
from precision_doctor.model import Model

APIS = ("auto", "weak", "strong")
PRECISIONS = ("fp16", "bf16")

ONNX_LAYER_TAG = "[ONNX Layer: "
# Separators TensorRT puts between the metadata entries of fused (engine) layers.
_METADATA_SEPARATORS = "\x1e\x1f"
# The ONNX parser's unique name for extra layers of one node: `<node>_<counter>`.
_SUBLAYER_NAME = re.compile(r"(.+)_\d+", re.DOTALL)
# Local-function frames in metadata: `<calling node> (<function name>)`.
_FUNCTION_FRAME = re.compile(r"^(.*) \([^()]*\)$")

# Tactic sources documented for TensorRT 10.x (CUBLAS, CUBLAS_LT, CUDNN deprecated there) and
# 11.x (only the two convolution sources remain).
TACTIC_SOURCES_TRT10 = ("CUBLAS", "CUBLAS_LT", "CUDNN", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
TACTIC_SOURCES_TRT11 = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
_TACTIC_ALIASES = {"CUBLASLT": "CUBLAS_LT", "EDGE_MASK": "EDGE_MASK_CONVOLUTIONS", "JIT": "JIT_CONVOLUTIONS"}


# ---------------------------------------------------------------------------------------------
# Pure helpers (no TensorRT needed)
# ---------------------------------------------------------------------------------------------


def trt_major_version(version: str | None = None) -> int | None:
    """Major version of `version`, or of the importable `tensorrt` when None; None if unknown."""
    if version is None:
        try:
            import tensorrt
        except Exception:  # missing, or bindings without their libraries
            return None
        version = getattr(tensorrt, "__version__", None)
        if not version:
            return None
    m = re.match(r"\s*v?(\d+)", str(version))
    return int(m.group(1)) if m else None


def metadata_entries(metadata: str | None) -> list[str]:
    """The `[ONNX Layer: ...]` entries of a layer's metadata, without the tag and closing bracket.

    Network layers carry one entry; layer info of a built engine joins the entries of a fused
    layer with `\\x1f` (sometimes `\\x1e`), or puts them side by side. A node name may itself
    contain `]`: only the bracket that closes an entry is removed.
    """
    if not metadata or ONNX_LAYER_TAG not in metadata:
        return []
    out = []
    for part in metadata.split(ONNX_LAYER_TAG)[1:]:
        part = part.rstrip(_METADATA_SEPARATORS + " \t\r\n")
        if part.endswith("]"):
            part = part[:-1]
        if part:
            out.append(part)
    return out


def _entry_candidates(entry: str) -> list[str]:
    """Node names an entry may refer to, best first: the whole entry (a name may contain ` | `),
    the node itself, then the calling nodes of local functions, innermost first."""
    pieces = entry.split(" | ")
    cands = [entry] if len(pieces) > 1 else []
    cands.append(pieces[0])
    for frame in pieces[1:]:
        m = _FUNCTION_FRAME.match(frame)
        cands.append(m.group(1) if m else frame)
    return cands


def onnx_nodes_of_layer(layer_name: str, metadata: str | None, onnx_names: Iterable[str] | None) -> list[str]:
    """All ONNX nodes a TensorRT layer comes from (several for a fused engine layer), in order.

    Metadata first; without usable metadata the layer name: an exact node name, else the node name
    that the layer name extends by the parser's sub-layer suffix `_<digits>`.
    With `onnx_names` empty or None, metadata names are returned as they are.
    """
    names = set(onnx_names or ())
    found: list[str] = []
    for entry in metadata_entries(metadata):
        if names:
            hit = next((c for c in _entry_candidates(entry) if c in names), None)
        else:
            hit = entry.split(" | ")[0]
        if hit is not None and hit not in found:
            found.append(hit)
    if found:
        return found
    if layer_name in names:
        return [layer_name]
    # Extra layers of a node are `<node>_<counter>`: one suffix on the node's own name.
    m = _SUBLAYER_NAME.fullmatch(layer_name)
    if m and m.group(1) in names:
        return [m.group(1)]
    return []


def onnx_node_of_layer(layer_name: str, metadata: str | None, onnx_names: Iterable[str] | None) -> str | None:
    """The ONNX node a TensorRT layer comes from (the first, for a fused layer), or None."""
    nodes = onnx_nodes_of_layer(layer_name, metadata, onnx_names)
    return nodes[0] if nodes else None


def map_layers(layers: Sequence[tuple[str, str | None]], onnx_names: Iterable[str] | None) -> dict[str, list[str]]:
    """Layer name -> ONNX nodes it comes from, for `(name, metadata)` pairs in network order."""
    names = set(onnx_names or ())
    return {name: onnx_nodes_of_layer(name, meta, names) for name, meta in layers}


def layers_for_fallback(
    layers: Sequence[tuple[str, str | None]], fallback: Iterable[str], onnx_names: Iterable[str] | None
) -> list[str]:
    """Names of the layers (network order, no duplicates) that come from a node of `fallback`."""
    fb = set(fallback)
    out: list[str] = []
    seen: set[str] = set()
    for name, nodes in map_layers(layers, onnx_names).items():
        if name not in seen and any(n in fb for n in nodes):
            out.append(name)
            seen.add(name)
    return out


def unmapped_nodes(
    layers: Sequence[tuple[str, str | None]], fallback: Iterable[str], onnx_names: Iterable[str] | None
) -> list[str]:
    """Fallback nodes that no layer comes from (folded away, shape-only, or unknown names)."""
    covered = {n for nodes in map_layers(layers, onnx_names).values() for n in nodes}
    return [n for n in fallback if n not in covered]


@dataclass(frozen=True)
class TacticSpec:
    """Tactic sources to use. `only` (polygraphy's `--tactic-sources A B`): exactly these, the
    rest disabled; else `enable`/`disable` change TensorRT's defaults (trtexec's `+A,-B`)."""

    only: tuple[str, ...] | None = None
    enable: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.only or ()) + self.enable + self.disable


def _normalize_tactic(name: str) -> str:
    key = re.sub(r"[\s]+", "", name).upper().replace("-", "_")
    return _TACTIC_ALIASES.get(key, key)


def parse_tactic_sources(spec: str | Sequence[str] | None) -> TacticSpec | None:
    """Parse tactic sources: names (`["CUBLAS", "CUDNN"]`, `"cublas,cudnn"`: only these) or
    signed changes of the defaults (`"-CUBLAS,+CUDNN"`, trtexec's form). Case-insensitive; `-`
    inside a name is read as `_` (`cublas-lt` is `CUBLAS_LT`). An empty list disables all."""
    if spec is None:
        return None
    items = [t for t in re.split(r"[,\s]+", spec)] if isinstance(spec, str) else [str(t) for t in spec]
    items = [t.strip() for t in items if t and t.strip()]
    signed = [t for t in items if t[0] in "+-"]
    if signed and len(signed) != len(items):
        raise UserError(f"tactic sources: use either names (enable only these) or +/- changes, not both: {', '.join(items)}")
    if not signed:
        if isinstance(spec, str) and not items:
            return TacticSpec(only=())
        return TacticSpec(only=tuple(dict.fromkeys(_normalize_tactic(t) for t in items)))
    enable, disable = [], []
    for t in items:
        name = _normalize_tactic(t[1:])
        if not name:
            raise UserError(f"tactic sources: empty name in '{t}'")
        (enable if t[0] == "+" else disable).append(name)
    return TacticSpec(enable=tuple(dict.fromkeys(enable)), disable=tuple(dict.fromkeys(disable)))


def resolve_tactic_sources(spec: TacticSpec, available: Mapping[str, int], default_mask: int, version: str = "") -> list[str]:
    """Names of the tactic sources to enable, given the members of `trt.TacticSource`
    (`available`: name -> bit index) and the builder's default bit mask."""
    unknown = [n for n in spec.names if n not in available]
    if unknown:
        removed = [n for n in unknown if n in TACTIC_SOURCES_TRT10]
        why = " (TensorRT 10 deprecated the cuBLAS/cuDNN tactic sources and TensorRT 11 removed them)" if removed else ""
        raise UserError(
            f"tactic source(s) {', '.join(unknown)} not available in TensorRT {version or '(this version)'}{why}; "
            f"available: {', '.join(available) or 'none'}"
        )
    if spec.only is not None:
        return list(spec.only)
    enabled = {n for n, bit in available.items() if default_mask >> int(bit) & 1}
    enabled |= set(spec.enable)
    enabled -= set(spec.disable)
    return [n for n in available if n in enabled]


# ---------------------------------------------------------------------------------------------
# TensorRT plumbing
# ---------------------------------------------------------------------------------------------


def import_tensorrt():
    """`import tensorrt`, or a UserError with a one-line reason."""
    try:
        import tensorrt as trt
    except Exception as exc:  # ImportError, or OSError/RuntimeError from bindings without libraries
        text = str(exc).strip()
        reason = text.splitlines()[0][:200] if text else type(exc).__name__
        raise UserError(
            f"TensorRT is not installed: {reason} (install TensorRT 10 or 11 with its libraries, or use another backend)"
        ) from exc
    if not hasattr(trt, "Builder"):
        raise UserError("TensorRT is not installed: the tensorrt package has no Builder (bindings without libraries?)")
    return trt


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


def _save_onnx(proto: onnx.ModelProto, path: Path) -> Path:
    """Save a model; past protobuf's 2 GB limit the weights go to `<name>.data` beside it."""
    try:
        large = proto.ByteSize() >= 2**31 - 2**20
    except Exception:
        large = True
    if large:
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)  # saving with external data empties the tensors of the proto it is given
        onnx.save(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=path.name + ".data")
    else:
        onnx.save(proto, str(path))
    return path


def _to_float32(a) -> np.ndarray:
    arr = np.asarray(a)
    if np.issubdtype(arr.dtype, np.floating) or arr.dtype.name == "bfloat16":
        return arr.astype(np.float32)  # always a copy: TrtRunner reuses its output buffers
    return arr.copy()


class TrtEngineRunner:
    """One built engine. `run` casts feeds to the engine's input types and floating outputs to
    float32. `engine_bytes` is the serialized engine (write it out as the fixed `.plan`);
    `layers` are the layers forced to FP32 (weak typing) and `unmapped` the fallback nodes that no
    layer came from."""

    def __init__(
        self,
        engine_bytes: bytes,
        output_names: Sequence[str],
        mode: str,
        layers: Sequence[str] = (),
        unmapped: Sequence[str] = (),
    ):
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner
        from polygraphy.datatype import DataType

        self.engine_bytes = engine_bytes
        self.output_names = list(output_names)
        self.mode = mode
        self.layers = list(layers)
        self.unmapped = list(unmapped)
        self._runner = TrtRunner(EngineFromBytes(engine_bytes))
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

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class TrtBackend:
    """Builds a TensorRT engine per fallback set (see the module docstring).

    `onnx_path`: the ONNX file parsed in weak mode (default: the model's own file when its nodes
    were all named, else a named copy in `work_dir`; layer names follow these node names).
    `mixed_builder(fallback) -> onnx.ModelProto`: the mixed-precision graph for strong mode
    (default: `precision_doctor.precision.mixed.build_mixed(model, fallback, precision)`).
    `tactic_sources`: see `parse_tactic_sources`. `timing_cache`: loaded if present, updated after
    every build (default: one in `work_dir`). `api`: "auto" (weak on TensorRT < 11, else strong),
    "weak" or "strong". `input_shapes`: fixed shapes for dynamic inputs (min = opt = max).
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
        self.onnx_names = {n.name for n in model.nodes}

        self.trt = import_tensorrt()
        self.trt_version = str(getattr(self.trt, "__version__", ""))
        major = trt_major_version(self.trt_version) or 0
        if api == "auto":
            api = "strong" if major >= 11 else "weak"
        if api == "weak":
            missing = [
                f
                for f in ("FP16" if precision == "fp16" else "BF16", "OBEY_PRECISION_CONSTRAINTS")
                if not hasattr(self.trt.BuilderFlag, f)
            ]
            if major >= 11 or missing:
                raise UserError(
                    f"TensorRT {self.trt_version} has no weak typing (BuilderFlag {', '.join(missing) or 'FP16'} and "
                    "layer precisions were removed in TensorRT 11): use api='strong'"
                )
        self.mode = api
        self._tmp = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="pd-trt-")
            work_dir = self._tmp.name
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.timing_cache = Path(timing_cache) if timing_cache is not None else self.work_dir / "timing.cache"
        self._onnx_path = Path(onnx_path) if onnx_path is not None else None
        self._mixed_builder = mixed_builder
        self._tactic_names: list[str] | None = None

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
        return TrtEngineRunner(data, self.output_names, self.mode, layers, unmapped)

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
        if self._onnx_path is None:
            if self.model.path is not None and not self.model.renamed_nodes:
                self._onnx_path = Path(self.model.path)
            else:  # TensorRT must see the node names the fallback set uses
                self._onnx_path = _save_onnx(self.model.proto, self.work_dir / "model_named.onnx")
        return self._onnx_path

    def _tactic_source_members(self) -> list | None:
        if self.tactics is None:
            return None
        if self._tactic_names is None:
            trt = self.trt
            members = dict(trt.TacticSource.__members__)
            available = {n: int(m) for n, m in members.items()}
            default_mask = 0
            if self.tactics.only is None:
                cfg = trt.Builder(trt.Logger(trt.Logger.ERROR)).create_builder_config()
                default_mask = int(cfg.get_tactic_sources())
            self._tactic_names = resolve_tactic_sources(self.tactics, available, default_mask, self.trt_version)
        return [getattr(self.trt.TacticSource, n) for n in self._tactic_names]

    def _profiles(self):
        from polygraphy.backend.trt import Profile

        shapes = dict(self.input_shapes)
        for vi in self.model.proto.graph.input:
            if vi.name not in self.model.inputs or vi.name in shapes:
                continue
            dims = vi.type.tensor_type.shape.dim
            if dims and all(d.HasField("dim_value") for d in dims):
                shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
        if not shapes:
            return None
        prof = Profile()
        for name, shape in shapes.items():
            prof.add(name, min=shape, opt=shape, max=shape)
        return [prof]

    def _config(self, weak: bool):
        from polygraphy.backend.trt import CreateConfig

        kwargs: dict[str, Any] = {
            "tactic_sources": self._tactic_source_members(),
            "load_timing_cache": str(self.timing_cache) if self.timing_cache.exists() else None,
            "builder_optimization_level": self.builder_optimization_level,
        }
        profiles = self._profiles()
        if profiles is not None:
            kwargs["profiles"] = profiles
        if weak:
            kwargs.update(fp16=self.precision == "fp16", bf16=self.precision == "bf16", precision_constraints="obey")
        return CreateConfig(**kwargs)

    def _engine_bytes(self, network_loader, weak: bool) -> bytes:
        from polygraphy.backend.trt import EngineBytesFromNetwork, ModifyNetworkOutputs
        from polygraphy.logger import G_LOGGER

        if self.output_names != list(self.model.outputs):
            network_loader = ModifyNetworkOutputs(network_loader, outputs=self.output_names)
        build = EngineBytesFromNetwork(network_loader, config=self._config(weak), save_timing_cache=str(self.timing_cache))
        with G_LOGGER.verbosity(G_LOGGER.INFO if self.verbose else G_LOGGER.WARNING):
            data = build()
        return bytes(data)

    def _build_weak(self, fallback: frozenset[str]) -> tuple[bytes, list[str], list[str]]:
        from polygraphy.backend.trt import NetworkFromOnnxPath, PostprocessNetwork

        trt, onnx_names = self.trt, self.onnx_names
        record: dict[str, list[str]] = {"layers": [], "unmapped": sorted(fallback)}

        def force_fp32(network):
            record["layers"], record["unmapped"] = pin_fp32_layers(trt, network, fallback, onnx_names)

        network = PostprocessNetwork(
            NetworkFromOnnxPath(str(self._weak_onnx_path())), force_fp32, name="precision_doctor_fp32_fallback"
        )
        data = self._engine_bytes(network, weak=True)
        return data, record["layers"], record["unmapped"]

    def _mixed_model(self, fallback: frozenset[str]) -> onnx.ModelProto:
        if self._mixed_builder is None:
            try:
                from precision_doctor.precision.mixed import build_mixed
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
        from polygraphy.backend.trt import NetworkFromOnnxPath

        key = hashlib.sha256("\n".join(sorted(fallback)).encode()).hexdigest()[:16]
        path = _save_onnx(self._mixed_model(fallback), self.work_dir / f"mixed_{key}.onnx")
        # TensorRT 11 networks are always strongly typed; where the flag still exists, set it.
        flag = hasattr(self.trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
        network = NetworkFromOnnxPath(str(path), strongly_typed=flag or None)
        try:
            return self._engine_bytes(network, weak=False)
        finally:
            for f in (path, path.with_name(path.name + ".data")):
                f.unlink(missing_ok=True)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
