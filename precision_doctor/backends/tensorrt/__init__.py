"""TensorRT family: one code path for `tensorrt` 10.x (weak typing available), 11.x (strongly typed
only) and TensorRT-RTX (`tensorrt_rtx`: strongly typed, ahead-of-time builds without a GPU).

    library.py  which library is here, its capabilities, whether this GPU can run its engines
    layers.py   layer -> ONNX node mapping (metadata, `node_of_<output>` for unnamed nodes)
    tactics.py  tactic sources: parse and resolve against the installed library
    build.py    parse ONNX, builder config (targets, TF32, tactic sources, timing cache), build
    check.py    `trt_check`: each layer's precision in fixed.onnx against the answer
    backend.py  `TrtBackend`: an engine per fallback set, for the search

Importing this package imports no TensorRT library; that happens when one is needed.
"""

from precision_doctor.backends.tensorrt.backend import TrtBackend, TrtEngineRunner, pin_fp32_layers
from precision_doctor.backends.tensorrt.build import EngineBuild, build_engine, parse_onnx
from precision_doctor.backends.tensorrt.check import TrtCheck, trt_check
from precision_doctor.backends.tensorrt.layers import (
    layers_for_fallback,
    map_layers,
    metadata_entries,
    onnx_node_of_layer,
    onnx_nodes_of_layer,
    tensorrt_node_name,
    unmapped_nodes,
)
from precision_doctor.backends.tensorrt.library import TrtLibrary, find_library, load_library, trt_major_version
from precision_doctor.backends.tensorrt.tactics import TacticSpec, parse_tactic_sources, resolve_tactic_sources

__all__ = [
    "EngineBuild", "TacticSpec", "TrtBackend", "TrtCheck", "TrtEngineRunner", "TrtLibrary", "build_engine",
    "find_library", "layers_for_fallback", "load_library", "map_layers", "metadata_entries", "onnx_node_of_layer",
    "onnx_nodes_of_layer", "parse_onnx", "parse_tactic_sources", "pin_fp32_layers", "resolve_tactic_sources",
    "tensorrt_node_name", "trt_check", "trt_major_version", "unmapped_nodes",
]
