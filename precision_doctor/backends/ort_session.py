"""ONNX Runtime sessions from in-memory protos (models over 2 GB go through a temporary file)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import helper

_TWO_GB = 2**31
ORT_TYPES = {
    "tensor(float)": onnx.TensorProto.FLOAT,
    "tensor(float16)": onnx.TensorProto.FLOAT16,
    "tensor(bfloat16)": onnx.TensorProto.BFLOAT16,
    "tensor(double)": onnx.TensorProto.DOUBLE,
    "tensor(int64)": onnx.TensorProto.INT64,
    "tensor(int32)": onnx.TensorProto.INT32,
    "tensor(int8)": onnx.TensorProto.INT8,
    "tensor(uint8)": onnx.TensorProto.UINT8,
    "tensor(bool)": onnx.TensorProto.BOOL,
}


def make_session(
    proto: onnx.ModelProto,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    optimize: bool = True,
    threads: int = 0,
) -> ort.InferenceSession:
    """A session over `proto`. `optimize=False` stays at basic graph optimizations (no fusions), so
    the reference and the emulation graphs compute the same FP32 arithmetic."""
    so = ort.SessionOptions()
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    )
    so.enable_cpu_mem_arena = False  # let memory go back between bounded capture groups
    so.log_severity_level = 3
    threads = threads or int(os.environ.get("PRECISION_DOCTOR_ORT_THREADS") or 0)  # set by batch workers
    if threads:
        so.intra_op_num_threads = threads
    if proto.ByteSize() < _TWO_GB:
        return ort.InferenceSession(proto.SerializeToString(), so, providers=list(providers))
    with tempfile.TemporaryDirectory(prefix="pd-ort-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(proto, str(path), save_as_external_data=True, location="weights.bin")
        return ort.InferenceSession(str(path), so, providers=list(providers))


def with_outputs(proto: onnx.ModelProto, names: Sequence[str], types: dict[str, int]) -> onnx.ModelProto:
    """A shallow copy of `proto` whose graph outputs are exactly `names`."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.output[:]
    for n in names:
        out.graph.output.append(helper.make_tensor_value_info(n, types.get(n, 0), None))
    return out
