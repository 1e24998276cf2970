"""BF16 keeps FP32 the op types the running ONNX Runtime refused for want of a BF16 kernel (`mixed.blocked_ops`'s
`extra`, from `backends.ort.session_keeping_fp32`; issue 35), with their reason, everywhere the graph is built:
fixed.onnx, the forced set, the border Casts, the gated native graph. Nothing is kept FP32 ahead of time, and FP16
is unchanged."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph.formats import BF16, FP16
from precision_doctor.graph.mixed import FP32_OPS, blocked_ops, border_casts, build_mixed, forced_fp32_nodes
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.native import gated_native_graph
from precision_doctor.graph.ort_kernels import runtime_reason

REFUSED = {"mean": "ReduceMean", "pow": "Pow", "sqrt": "Sqrt", "recip": "Reciprocal"}


def _rmsnorm_like() -> onnx.ModelProto:
    """x -> MatMul -> Pow -> ReduceMean -> Sqrt -> Reciprocal -> Mul -> Relu."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Pow", ["h", "two"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"], ["ms"], name="mean", axes=[-1], keepdims=1),
             helper.make_node("Sqrt", ["ms"], ["rms"], name="sqrt"),
             helper.make_node("Reciprocal", ["rms"], ["inv"], name="recip"),
             helper.make_node("Mul", ["h", "inv"], ["n"], name="scale"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _refused() -> dict[str, str]:
    return blocked_ops("bf16", {op: runtime_reason(op) for op in REFUSED.values()})


def test_nothing_is_kept_fp32_ahead_of_time_in_either_format():
    model = from_proto(_rmsnorm_like())
    assert forced_fp32_nodes(model, precision="bf16") == {} and forced_fp32_nodes(model, precision="fp16") == {}
    assert blocked_ops("bf16") == blocked_ops("fp16") == {op: f"{op}: no FP16/BF16 kernel in ONNX Runtime"
                                                           for op in FP32_OPS}


def test_the_refused_ops_stay_fp32_with_their_reason_and_the_answers_own_are_not_listed():
    model = from_proto(_rmsnorm_like())
    forced = forced_fp32_nodes(model, op_block_list=_refused(), precision="bf16")
    assert forced == {name: runtime_reason(op) for name, op in REFUSED.items()}
    assert forced_fp32_nodes(model, {"pow"}, _refused(), "bf16").keys() == REFUSED.keys() - {"pow"}
    both = blocked_ops("bf16", {"Gemm": "Gemm: refused", "Range": "Range: refused"})
    assert both["Range"] == "Range: no FP16/BF16 kernel in ONNX Runtime" and both["Gemm"] == "Gemm: refused"


def test_fixed_onnx_computes_them_in_fp32_and_the_border_casts_follow():
    model = from_proto(_rmsnorm_like())
    fixed = build_mixed(model, frozenset(), "bf16", op_block_list=_refused())
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*fixed.graph.value_info, *fixed.graph.input, *fixed.graph.output]}
    by_name = {n.name: n for n in fixed.graph.node}
    for name in REFUSED:
        assert types[by_name[name].output[0]] == TensorProto.FLOAT, name
    assert types[by_name["mm"].output[0]] == TensorProto.BFLOAT16 and types[by_name["relu"].input[0]] == TensorProto.BFLOAT16
    assert sum(n.op_type == "Cast" for n in fixed.graph.node) == 4  # x in, h out of MatMul (to FP32), inv in, y out
    assert len(border_casts(model, frozenset(), "bf16", op_block_list=_refused())) == 4


def test_the_gated_graph_leaves_them_ungated():
    model = from_proto(_rmsnorm_like())
    assert set(gated_native_graph(model, FP16).candidates) == {n.name for n in model.candidates}
    assert set(gated_native_graph(model, BF16).candidates) == {n.name for n in model.candidates}
    assert set(gated_native_graph(model, BF16, op_block_list=_refused()).candidates) == {"mm", "scale", "relu"}
