"""Why an op stays FP32 where ONNX Runtime refused a BF16 session for it (issue 35).

ONNX Runtime's CUDA provider has no bfloat16 kernel for a number of ops, a number that shrinks with each version
(its 1.17-era operator list lacked Conv, Exp, Gelu, Pow, ReduceMean...; later versions added several). A session
over a graph with a BF16 node of such an op fails at creation (`NOT_IMPLEMENTED : Could not find an implementation
for Pow(15) node with name '...'`): ONNX Runtime inserts Casts around a node its provider cannot run only for FP16,
not for BF16. No table is applied ahead of time (it would keep FP32 what the running version, or TensorRT, runs in
BF16): `backends.ort.session_keeping_fp32` keeps each refused op type FP32, with `runtime_reason`, and makes the
session again. A node ONNX Runtime made by inlining an op's ONNX function (a BF16 Clip with no kernel becomes its
body, Less and Where, unnamed) stands for that op (`inlined_from`). Ran on the H200 with mpnet-base (2026-12-03).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
from onnx import defs, helper


def runtime_reason(op: str, fused: str | None = None, inlined: bool = False) -> str:
    """Why a node of `op` stays FP32 where the running ONNX Runtime refused a BF16 session for it; `fused`: the op
    ONNX Runtime's optimizer made of it that has no BF16 kernel (a MatMul fused with its Add into a Gemm), or with
    `inlined`, an op of the ONNX function it put in the place of `op` (a Clip's Less)."""
    what = (f"{op} or for the {fused} of its ONNX function" if inlined else f"{op} fused into {fused}") if fused else op
    return f"{op}: no BF16 kernel in this ONNX Runtime for {what} (a session refused it; kept FP32, made again)"


def inlined_from(op: str, ops: Iterable[tuple[str, str, int]], elem_type: int = onnx.TensorProto.BFLOAT16) -> list[str]:
    """The op types among `ops` ((op type, domain, opset) of a model's nodes) whose ONNX function, expanded for
    inputs of `elem_type`, has a node of type `op`: what an unnamed node ONNX Runtime refused came from, where it
    inlined a function because no provider has a kernel for the op itself (mpnet-base's Clip, in BF16 on ORT CUDA
    1.31.1: "Provider type for Less node with name '' is not set")."""
    found = []
    for op_type, domain, opset in ops:
        if op_type in found:
            continue
        try:
            schema = defs.get_schema(op_type, opset, domain)
        except Exception:  # noqa: BLE001 - an op ONNX does not define (a custom or contrib op): no function
            continue
        body = [n.op_type for n in schema.function_body.node] if schema.has_function else []
        if schema.has_context_dependent_function:
            n = schema.max_input if schema.max_input <= 8 else max(1, schema.min_input)  # Clip: x, min and max
            node = helper.make_node(op_type, [f"i{k}" for k in range(n)], ["o"], domain=domain)
            types = [helper.make_tensor_type_proto(elem_type, None).SerializeToString()] * n
            try:
                body += [n.op_type for n in onnx.FunctionProto.FromString(
                    schema.get_context_dependent_function(node.SerializeToString(), types)).node]
            except Exception:  # noqa: BLE001 - a body that needs attributes or inputs this generic node lacks
                pass
        if op in body:
            found.append(op_type)
    return found
