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


def _conv(opset: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_an_op_whose_schema_at_the_models_opset_takes_no_bf16_stays_fp32_in_bf16_only():
    """ONNX's Conv takes bfloat16 from opset 22: at opset 17 a BF16 Conv is not valid ONNX, and ONNX Runtime refused
    the gated graph of nudenet-320n (opset 17) on the H200 with a Type Error. The schema says so ahead of time."""
    from precision_doctor.graph.mixed import no_bf16_in_schema

    model = from_proto(_conv(17))
    why = "Conv: ONNX opset 17 has no bfloat16 for Conv (it does from opset 22); the model's opset decides"
    assert forced_fp32_nodes(model, precision="bf16") == {"conv": why} and no_bf16_in_schema("Conv", "", 17) == why
    assert forced_fp32_nodes(model, precision="fp16") == {}
    assert forced_fp32_nodes(from_proto(_conv(22)), precision="bf16") == {}
    fixed = build_mixed(model, frozenset(), "bf16")
    onnx.checker.check_model(fixed, full_check=True)  # valid ONNX: the Conv computes in FP32
    assert set(gated_native_graph(model, BF16).candidates) == {"relu"}
    assert no_bf16_in_schema("Resize", "", 13) is None  # its data path takes bfloat16 (roi and scales aside)
    assert no_bf16_in_schema("Add", "", 14) is None and no_bf16_in_schema("Gelu", "com.microsoft", 1) is None


def test_the_net_reads_onnx_type_errors_as_well_as_missing_kernels():
    """The H200's message for nudenet-320n's gated graph in BF16 (onnxruntime-gpu 1.31.1, 2026-12-02)."""
    from precision_doctor.backends.ort import missing_kernel

    text = ("[ONNXRuntimeError] : 1 : FAIL : Node (/model.0/conv/Conv__pdn13) Op (If) [TypeInferenceError] Graph "
            "attribute inferencing failed: This is an invalid model. Type Error: Type 'tensor(bfloat16)' of input "
            "parameter (images_lp__pdn4) of operator (Conv) in node (/model.0/conv/Conv__pdn3) is invalid.")
    assert missing_kernel(Exception(text)) == ("Conv", "/model.0/conv/Conv")
    assert missing_kernel(Exception("NOT_IMPLEMENTED : Could not find an implementation for Pow(15) node with name "
                                    "'p__pd1'")) == ("Pow", "p")
    # onnxruntime-gpu 1.31.1 on the H200, mpnet-base's gated graph in BF16 with the CUDA and CPU providers
    assert missing_kernel(Exception(
        "[ONNXRuntimeError] : 1 : FAIL : Exception during initialization: /onnxruntime_src/onnxruntime/core/optimizer/"
        "transformer_memcpy.cc:253 bool onnxruntime::TransformerMemcpyImpl::IsNodeCompatibleWithProvider(const "
        "onnxruntime::Node&) const !node_provider_type.empty() was false. Provider type for Log node with name "
        "'/m/encoder/Log__pdn98' is not set.")) == ("Log", "/m/encoder/Log")
