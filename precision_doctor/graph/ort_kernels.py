"""Why an op stays FP32 where ONNX Runtime refused a BF16 session for it (issue 35).

ONNX Runtime's CUDA provider has no bfloat16 kernel for a number of ops, a number that shrinks with each version
(its 1.17-era operator list lacked Conv, Exp, Gelu, Pow, ReduceMean...; later versions added several). A session
over a graph with a BF16 node of such an op fails at creation (`NOT_IMPLEMENTED : Could not find an implementation
for Pow(15) node with name '...'`): ONNX Runtime inserts Casts around a node its provider cannot run only for FP16,
not for BF16. No table is applied ahead of time (it would keep FP32 what the running version, or TensorRT, runs in
BF16): `backends.ort.session_keeping_fp32` keeps each refused op type FP32, with `runtime_reason`, and makes the
session again. Not run on a GPU yet.
"""

from __future__ import annotations


def runtime_reason(op: str, fused: str | None = None) -> str:
    """Why a node of `op` stays FP32 where the running ONNX Runtime refused a BF16 session for it; `fused`: the op
    ONNX Runtime's optimizer made of it that has no BF16 kernel (a MatMul fused with its Add into a Gemm)."""
    what = f"{op} fused into {fused}" if fused else op
    return f"{op}: no BF16 kernel in this ONNX Runtime for {what} (a session refused it; kept FP32, made again)"
