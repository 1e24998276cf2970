"""BF16 keeps FP32 the op types ONNX Runtime's CUDA provider has no BF16 kernel for (`graph/ort_kernels.py`, issue
35), with their reason, everywhere the graph is built: fixed.onnx, the forced set, the cost model's border Casts,
the gated native graph. FP16 is unchanged."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph.cost import CostModel
from precision_doctor.graph.formats import BF16, FP16
from precision_doctor.graph.mixed import FP32_OPS, blocked_ops, border_casts, build_mixed, forced_fp32, forced_fp32_nodes
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.native import gated_native_graph
from precision_doctor.graph.ort_kernels import NO_BF16_CUDA, ORT_VERSION, reason

TABLE_OPS = {"mean": "ReduceMean", "pow": "Pow", "sqrt": "Sqrt", "recip": "Reciprocal"}


def _rmsnorm_like() -> onnx.ModelProto:
    """x -> MatMul -> Pow -> ReduceMean -> Sqrt -> Reciprocal -> Mul -> Relu: the table's ops between ops with BF16
    kernels (MatMul, Mul, Relu)."""
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


def test_the_tables_ops_stay_fp32_in_bf16_with_their_reason():
    model = from_proto(_rmsnorm_like())
    forced = forced_fp32_nodes(model, precision="bf16")
    assert forced == {name: reason(op) for name, op in TABLE_OPS.items()}
    assert forced["pow"] == f"Pow: no BF16 kernel in ONNX Runtime CUDA (its operator table, version {ORT_VERSION})"
    assert forced_fp32_nodes(model, {"pow"}, precision="bf16").keys() == TABLE_OPS.keys() - {"pow"}  # the answer's own
    assert forced_fp32(model) == set() and forced_fp32_nodes(model, precision="fp16") == {}  # FP16: none


def test_fixed_onnx_computes_them_in_fp32_in_bf16_only():
    model = from_proto(_rmsnorm_like())
    for precision, low in (("bf16", TensorProto.BFLOAT16), ("fp16", TensorProto.FLOAT16)):
        fixed = build_mixed(model, frozenset(), precision)
        types = {v.name: v.type.tensor_type.elem_type for v in
                 [*fixed.graph.value_info, *fixed.graph.input, *fixed.graph.output]}
        types.update({i.name: i.data_type for i in fixed.graph.initializer})
        by_name = {n.name: n for n in fixed.graph.node}
        for name in TABLE_OPS:
            out = types[by_name[name].output[0]]
            assert out == (TensorProto.FLOAT if precision == "bf16" else low), (precision, name)
        assert types[by_name["mm"].output[0]] == low and types[by_name["relu"].input[0]] == low
    bf16 = build_mixed(model, frozenset(), "bf16")
    assert sum(n.op_type == "Cast" for n in bf16.graph.node) == 4  # x in, h out of MatMul (to FP32), inv in, y out


def test_the_cost_model_and_border_casts_follow():
    model = from_proto(_rmsnorm_like())
    casts16, casts_bf = border_casts(model, frozenset(), "fp16"), border_casts(model, frozenset(), "bf16")
    assert casts16 != casts_bf and len(casts_bf) == 4
    flops = {n.name: 1 for n in model.nodes}
    cm = CostModel(model, "bf16", flops, {}, 1, "test")
    assert cm.fp32_nodes(()) == frozenset(TABLE_OPS) and cm.casts(()) == casts_bf
    assert CostModel(model, "fp16", flops, {}, 1, "test").fp32_nodes(()) == frozenset()


def test_the_gated_graph_gates_them_only_in_fp16():
    model = from_proto(_rmsnorm_like())
    assert set(gated_native_graph(model, FP16).candidates) == {n.name for n in model.candidates}
    assert set(gated_native_graph(model, BF16).candidates) == {"mm", "scale", "relu"}


def test_fp16_block_list_is_fp32_ops_with_the_old_reason():
    assert blocked_ops("fp16") == {op: f"{op}: no FP16/BF16 kernel in ONNX Runtime" for op in FP32_OPS}
    bf16 = blocked_ops("bf16", {"Gemm": "Gemm: refused"})
    assert bf16["Range"] == "Range: no FP16/BF16 kernel in ONNX Runtime"  # FP32_OPS's reason holds in both
    assert bf16["ReduceMean"] == reason("ReduceMean") and bf16["Gemm"] == "Gemm: refused"
    assert set(bf16) == FP32_OPS | NO_BF16_CUDA | {"Gemm"}


def test_the_table_has_what_the_issue_names_and_not_what_has_bf16():
    assert {"ReduceMean", "Pow", "Sqrt", "Reciprocal", "Erf", "Resize", "Pad", "BatchNormalization"} <= NO_BF16_CUDA
    # newest CUDA kernels with tensor(bfloat16) in the table's snapshot
    has_bf16 = {"Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Relu", "Sigmoid", "Tanh", "Softmax", "LayerNormalization",
                "ReduceSum", "Transpose", "Reshape", "Concat", "Gather", "Cast", "FastGelu", "BiasGelu", "FusedMatMul"}
    assert not has_bf16 & NO_BF16_CUDA
