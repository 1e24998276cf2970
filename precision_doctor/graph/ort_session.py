"""ONNX Runtime sessions from in-memory protos (models over 2 GB go through a temporary file; graphs whose large
weights are in files, `graph/weights.py`, are loaded from a path beside them).

In the graph layer, below everything that runs a proto: `graph/model.py` asks ONNX Runtime for the element types of
custom ops, the references (data), the capture (measure) and the backends run their graphs through it."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Sequence
from typing import Any

import onnx
import onnxruntime as ort
from google.protobuf.message import EncodeError
from onnx import helper

from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph import weights
from precision_doctor.graph.model import save_with_external_data

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


# ONNX Runtime's graph optimization levels by the names the backends use (`level`)
LEVELS = {"all": "ORT_ENABLE_ALL", "extended": "ORT_ENABLE_EXTENDED", "basic": "ORT_ENABLE_BASIC",
          "disabled": "ORT_DISABLE_ALL"}


def make_session(
    proto: onnx.ModelProto,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    optimize: bool = True,
    threads: int = 0,
    level: str | None = None,
    shrinkable: bool = False,
) -> ort.InferenceSession:
    """A session over `proto`. `optimize=False` stays at basic graph optimizations (no fusions), so
    the reference and the emulation graphs compute the same FP32 arithmetic; `level` (a key of LEVELS), where
    given, sets the level instead ("disabled": no graph optimization at all, every node its own kernel).
    `shrinkable`: one of many sessions alive at once whose runs give their GPU arena back (`shrinking_gpu_arena`):
    its weights outside the arena, which a shrink never frees past its first allocation (ONNX Runtime's
    maintainers' advice, microsoft/onnxruntime#9509), and no memory pattern (whose block would be that
    allocation). (One arena shared by all of them, `session.use_env_allocators`, left the capture's peak where it
    was on the H200: 64.8 GiB for isnet-1024 either way, 2026-12-03.)"""
    so = ort.SessionOptions()
    if shrinkable:
        so.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
        # no memory pattern: with one, a run's first arena allocation is the block planned for all its tensors, and a
        # shrink never frees an arena's first allocation (#13464, #9509): each of a chain's ~40 sessions would keep
        # a whole run's activations (isnet-1024's capture: 64.8 GiB of the GPU; whisper-base's: 139.8 GB). Not
        # measured on a GPU yet.
        so.enable_mem_pattern = False
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level]) if level is not None else (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    )
    so.enable_cpu_mem_arena = False  # let memory go back between bounded capture groups
    so.log_severity_level = 4  # errors reach us as exceptions (one line to the user), not as log lines
    threads = threads or int(os.environ.get("PRECISION_DOCTOR_ORT_THREADS") or 0)  # set by batch workers
    if threads:
        so.intra_op_num_threads = threads
    providers = bounded_arena(providers)
    data = serialized(proto)
    if data is not None and not weights.in_files(proto):
        return ort.InferenceSession(data, so, providers=providers)
    return _session_from_file(proto, data, so, providers)


CUDA_PROVIDER = "CUDAExecutionProvider"


def bounded_arena(providers: Sequence) -> list:
    """`providers` with the CUDA provider's arena growing by what a run asks for (`arena_extend_strategy`
    kSameAsRequested), unless the caller set it: ONNX Runtime's default doubles each new region of the arena, which
    it never gives back, so a session run on samples of many shapes can hold far more than a run needs (whisper-base's
    search session held 92-103 GB of the H200, and a later session failed in cuBLAS; bench/gpu_memory.py: 0.94x on one
    session of a small transformer, 0.88x on six; not measured on whisper-base itself)."""
    out = []
    for p in providers:
        if p == CUDA_PROVIDER:
            p = (CUDA_PROVIDER, {})
        if isinstance(p, tuple) and p[0] == CUDA_PROVIDER and "arena_extend_strategy" not in p[1]:
            p = (CUDA_PROVIDER, {**p[1], "arena_extend_strategy": "kSameAsRequested"})
        out.append(p)
    return out


def _session_from_file(proto: onnx.ModelProto, data: bytes | None, so: ort.SessionOptions, providers: Sequence[str]):
    """A session over `proto` loaded from a file in `weights.root()`: where its large initializers refer to weight
    files there (ONNX Runtime maps them: no copy of their bytes in the session), or where protobuf refuses it (`data`
    None, past 2 GB: its weights saved beside it, the caller's proto untouched). The files go once it is made."""
    path = weights.root() / f"graph-{uuid.uuid4().hex}.onnx"
    try:
        if data is not None:
            path.write_bytes(data)
        else:
            save_with_external_data(proto, path)
        return ort.InferenceSession(str(path), so, providers=list(providers))
    finally:
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".data").unlink(missing_ok=True)


def serialized(proto: onnx.ModelProto) -> bytes | None:
    """`proto` as one message, or None where protobuf refuses (past 2 GB: EncodeError). One serialization: asking
    `ByteSize()` first (`over_protobuf_limit`) serializes it too, and cost mpnet-base's capture a third of its time."""
    try:
        return proto.SerializeToString()
    except EncodeError:
        return None


def shrinking_gpu_arena(session: ort.InferenceSession) -> ort.RunOptions | None:
    """For a session that runs on the CUDA provider, run options that give its unused arena memory back after each
    run (for sessions that live side by side and run in turn, a chain's segments: each holds its weights and no more
    between its runs); None for any other (ONNX Runtime refuses the option where no GPU arena is registered)."""
    if "CUDAExecutionProvider" not in session.get_providers():
        return None
    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:0")
    return ro


class ModelRunError(SpecError):
    """ONNX Runtime failed while running the model (a dynamic dimension that does not fit, a shape the
    graph cannot take): one line naming the model, the node and its op, suggesting --input-shapes."""

    def __init__(self, model: str, node: str | None, op: str | None, detail: str, shapes: str):
        self.model, self.node, self.op = model, node, op
        where = f"node '{node}' ({op})" if node else (f"a {op} node" if op else "the model")
        super().__init__("inputs.input_shapes", (
            f"{model}: ONNX Runtime failed running {where}: {detail}; inputs were {shapes}. If the model has "
            "dynamic dimensions (generated inputs use 1 for each), set them with {inputs.input_shapes} "
            "NAME:[d0,d1,...], or give real samples with {inputs.files}"))


_ORT_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")
_ORT_STATUS = re.compile(r"Status Message:\s*(?:\S+:\d+\s+)?(?:\S+\s+)?(.*)", re.S)


def run_session(session: ort.InferenceSession, names: Sequence[str] | None, feed: dict, model: Any = None,
                options: ort.RunOptions | None = None) -> list:
    """`session.run(names, feed, options)`; an ONNX Runtime failure becomes a ModelRunError naming `model` (a Model
    or a path), the node (by its name in the model, not the tool's rewritten name) and its op."""
    try:
        return session.run(list(names) if names is not None else None, feed, options)
    except Exception as exc:
        if not type(exc).__module__.startswith("onnxruntime"):
            raise
        raise run_error(exc, model, feed) from None


_GPU_FAILURE = re.compile(r"CudaCall|CUDA failure|CUDA error|cudnnStatus|cublasStatus|CUBLAS_STATUS|CUDNN_STATUS|"
                          r"out of memory|Failed to allocate memory", re.I)

_GPU_STATUS = re.compile(r"\b(?:CUBLAS|CUDNN)_STATUS_[A-Z_]+|cuda(?:Error)?[A-Z][A-Za-z]+|out of memory", re.I)


class GpuRunError(UserError):
    """ONNX Runtime's CUDA provider failed while running the model (cuDNN, cuBLAS, memory): the GPU's state, not
    the inputs, in one line naming the model and the node (`what`: "MODEL: ... failed at node 'N' (KIND)"), then
    what to do (`advice`; `elsewhere(advice)`: the same failure with another's, where the caller knows better)."""

    ADVICE = ("the GPU may be out of memory or busy with other processes; run again with the GPU to itself, or with "
              "--backend emulate")

    def __init__(self, what: str, advice: str = ADVICE):
        self.what, self.advice = what, advice
        super().__init__(f"{what}: {advice}")

    def elsewhere(self, advice: str) -> GpuRunError:
        return GpuRunError(self.what, advice)


def run_error(exc: Exception, model: Any, feed: dict) -> UserError:
    text = " ".join(str(exc).split())
    if _GPU_FAILURE.search(text):
        m = _ORT_NODE.search(text)
        node = re.sub(r"__pd.*$", "", m.group(2)) if m else None
        path = getattr(model, "path", model)
        where = f" at node '{node}'" if node else ""
        kind = next((k for k in ("cudnn", "cublas", "memory") if k in text.lower()), "CUDA")
        code = _GPU_STATUS.search(text)  # the library's own status, where it gives one
        kind += " error" + (f": {code.group(0)}" if code else "")
        return GpuRunError(f"{path or 'the model'}: ONNX Runtime's CUDA provider failed{where} ({kind})")
    m = _ORT_NODE.search(text)
    op, node = (m.group(1), m.group(2)) if m else (None, None)
    if node:
        node = re.sub(r"__pd.*$", "", node)  # the tool's copies of a node carry its name plus a suffix
    s = _ORT_STATUS.search(text)
    detail = (s.group(1) if s else re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)).strip()
    path = getattr(model, "path", model)
    shapes = ", ".join(f"{k}{list(getattr(v, 'shape', ()))}" for k, v in feed.items()
                       if not k.startswith("pd_") and "_pd" not in k)
    return ModelRunError(str(path or "the model"), node or None, op, detail[:200], shapes or "none")


def with_outputs(proto: onnx.ModelProto, names: Sequence[str], types: dict[str, int]) -> onnx.ModelProto:
    """A shallow copy of `proto` whose graph outputs are exactly `names`."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.output[:]
    for n in names:
        out.graph.output.append(helper.make_tensor_value_info(n, types.get(n, 0), None))
    return out
