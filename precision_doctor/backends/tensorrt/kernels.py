"""Which ONNX nodes a TensorRT-family builder fused into each kernel of an engine.

The documented way is `ICudaEngine.create_engine_inspector()`, which needs a deserialized engine and so a
GPU the engine runs on; TensorRT-RTX builds ahead of time without one. With `ProfilingVerbosity.DETAILED`
the builder also logs, at VERBOSE, the engine's layer list ("Layers:", one "Name: ..., LayerType: ...,
Metadata: [ONNX Layer: <node>]..." line per kernel), which is what this reads. That log text is not a
documented format: seen with TensorRT-RTX 1.7.1 (docs/BENCHMARKS.md); a release that changes it gives no
kernels (an empty list), never wrong ones silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from precision_doctor.backends.tensorrt.build import LAYER_DUMP, BuildSettings, make_config, parse_onnx
from precision_doctor.backends.tensorrt.layers import metadata_entries
from precision_doctor.backends.tensorrt.library import TrtLibrary, load_library
from precision_doctor.errors import UserError

_SYNC_TYPES = frozenset({"signal", "wait"})  # stream events, not kernels


@dataclass(frozen=True)
class Kernel:
    """One layer of a built engine: its name, type (e.g. Myelin's `runtime_fusion`, `kgen`) and the ONNX nodes
    its metadata names (empty for layers the builder added, such as layout moves)."""

    name: str
    type: str
    nodes: tuple[str, ...]


def parse_layer_dump(text: str) -> list[Kernel]:
    """The kernels of a builder's "Layers:" message (stream signal/wait entries left out)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"Name: (.*?), LayerType: (\w+)", line)
        if not m or m.group(2) in _SYNC_TYPES:
            continue
        meta = line.split("Metadata: ", 1)[1] if "Metadata: " in line else ""
        out.append(Kernel(m.group(1), m.group(2), tuple(metadata_entries(meta))))
    return out


def engine_kernels(onnx_path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
                   lib: TrtLibrary | None = None) -> list[Kernel]:
    """Build `onnx_path` strongly typed (TensorRT-RTX: ahead of time, no GPU needed) and list its kernels;
    UserError when the library is missing or the build fails."""
    lib = lib or load_library()
    trt = lib.module
    parsed = parse_onnx(lib, onnx_path, strongly_typed=True, keep_layer_dump=True)
    config, _ = make_config(parsed, BuildSettings(input_shapes=dict(input_shapes or {})))
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if parsed.builder.build_serialized_network(parsed.network, config) is None:
        raise UserError(f"{lib.label} could not build {Path(onnx_path).name}: {parsed.logger.first_error() or 'no reason given'}")
    dumps = [m for _, m in parsed.logger.messages if m.startswith(LAYER_DUMP)]
    return parse_layer_dump(dumps[-1]) if dumps else []
