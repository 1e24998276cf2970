"""The net for ONNX Runtime's missing BF16 kernels (issue 35): where a
BF16 session is refused with NOT_IMPLEMENTED for an op, `backends.ort.session_keeping_fp32` keeps that op type FP32,
warns and makes the session again. Exercised on the CPU provider, which has no BF16 kernel for most ops and refuses
sessions the way the CUDA provider does for its missing ones (the backends themselves still refuse ort-cpu in BF16)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.ort import OrtBackend, missing_kernel, session_keeping_fp32
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.errors import UserError
from precision_doctor.graph.formats import BF16
from precision_doctor.graph.mixed import blocked_ops, build_mixed, forced_fp32_nodes
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.native import gated_native_graph
from precision_doctor.graph.ort_kernels import runtime_reason
from precision_doctor.graph.ort_session import make_session, with_outputs

CPU = ["CPUExecutionProvider"]


def _model() -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> Tanh: none kept FP32 ahead of time; the CPU provider refuses them in BF16."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.normal(size=(4, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(size=(4,)).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("Tanh", ["r"], ["y"], name="tanh")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_refused_ops_are_kept_fp32_until_the_session_is_made():
    model = from_proto(_model())
    assert forced_fp32_nodes(model, precision="bf16") == {}  # nothing ahead of time
    kept: dict[str, str] = {}
    said: list[str] = []
    proto, session = session_keeping_fp32(lambda blocked: build_mixed(model, frozenset(), "bf16", op_block_list=blocked),
                                          lambda p: make_session(p, CPU), "bf16", kept, said.append, "ort-cpu", model)
    # ONNX Runtime 1.32's CPU optimizer fuses MatMul and Add into a Gemm ('mm/MatMulAddFusion'), which it has no
    # BF16 kernel for: the MatMul stays FP32; the Add, the Relu and the Tanh are refused each on its own
    assert set(kept) == {"MatMul", "Add", "Relu", "Tanh"} and len(said) == 4
    assert kept["MatMul"] == runtime_reason("MatMul", "Gemm") and kept["Add"] == runtime_reason("Add")
    assert all(line.startswith("ort-cpu: ") and "no BF16 kernel" in line and "stays FP32" in line for line in said)
    text = "\n".join(said)
    assert "for Gemm (node 'mm/MatMulAddFusion'; ONNX Runtime fused it from mm (MatMul)); every MatMul node" in text
    assert "for Add (node 'bias'); every Add node" in text
    x = np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)
    ref = ReferenceRunner(model).run({"x": x})["y"]
    got = session.run(["y"], {"x": x})[0]
    assert np.allclose(got, ref, atol=0.05)  # only the kept-FP32 arithmetic left, around BF16 inputs where any
    # fixed.onnx and the report read the same record (pipeline/artifacts.py: blocked_ops(precision, kept_ops))
    with_kept = forced_fp32_nodes(model, (), blocked_ops("bf16", kept), "bf16")
    assert with_kept == {n.name: kept[n.op_type] for n in model.nodes}
    assert onnx.checker.check_model(proto) is None


def test_the_gated_graph_names_the_models_node():
    """The gated graph's copies carry a `__pdn` suffix; the warning names the model's node."""
    model = from_proto(_model())
    kept: dict[str, str] = {}
    said: list[str] = []
    graph, _ = session_keeping_fp32(
        lambda blocked: gated_native_graph(model, BF16, op_block_list=blocked),
        lambda g: make_session(with_outputs(g.proto, ["y"], model.tensor_types), CPU), "bf16", kept, said.append,
        model=model)
    assert kept and not set(graph.candidates) & {n.name for n in model.nodes if n.op_type in kept}
    assert all("__pd" not in line and "node '" in line for line in said)


class _Refused(Exception):
    """An ONNX Runtime error as the bindings raise it."""


_Refused.__module__ = "onnxruntime.capi.onnxruntime_pybind11_state"
_TEXT = "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Relu(14) node with name 'r__pdn7'"


def test_what_is_not_retried():
    assert missing_kernel(_Refused(_TEXT)) == ("Relu", "r")
    assert missing_kernel(ValueError("Could not find")) is None

    def refuse(_):
        raise _Refused(_TEXT)

    calls: list[dict] = []
    for precision in ("fp16", "bf16"):
        with pytest.raises(_Refused):  # FP16: as before; BF16: Relu kept once, then refused again (graph unchanged)
            session_keeping_fp32(calls.append, refuse, precision, {}, lambda _: None)
    assert len(calls) == 3 and "Relu" not in calls[1] and "Relu" in calls[2]  # fp16 once; bf16 twice

    def other(_):
        raise _Refused("[ONNXRuntimeError] : 1 : FAIL : Load model failed")

    kept: dict[str, str] = {}
    with pytest.raises(_Refused):
        session_keeping_fp32(lambda b: None, other, "bf16", kept, lambda _: None)
    assert kept == {}


def test_ort_cpu_still_refuses_bf16():
    with pytest.raises(UserError, match="CPU provider has no bf16 kernels"):
        OrtBackend(from_proto(_model()), "bf16", providers=CPU)


def test_a_node_made_of_an_ops_function_keeps_that_op_fp32():
    """ONNX Runtime puts a Clip's ONNX function (Less, Where) in its place where no provider has a BF16 Clip kernel,
    then refuses the body's unnamed Less (mpnet-base on the H200's CUDA provider, and the CPU provider here): the
    Clip is what stays FP32, said as such."""
    inits = [numpy_helper.from_array(np.array(-1, np.float32), "lo"), numpy_helper.from_array(np.array(1, np.float32), "hi")]
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"], name="clip"),
             helper.make_node("Identity", ["c"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits)
    model = from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    kept: dict[str, str] = {}
    said: list[str] = []
    _, session = session_keeping_fp32(lambda blocked: build_mixed(model, frozenset(), "bf16", op_block_list=blocked),
                                      lambda p: make_session(p, CPU), "bf16", kept, said.append, "ort-cpu", model)
    assert "Clip" in kept and "Less" not in kept
    assert kept["Clip"] == runtime_reason("Clip", "Less", inlined=True)
    assert any("(node ''; ONNX Runtime made it of Clip's ONNX function" in line for line in said)
    x = np.array([-2, -1.5, -1, -0.5, 0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3], np.float32).reshape(3, 4)  # BF16 values
    assert np.array_equal(session.run(["y"], {"x": x})[0], np.clip(x, -1, 1))


def test_a_named_node_the_model_lacks_keeps_its_own_op():
    """Only an unnamed node is traced to an op's ONNX function: a named one ONNX Runtime made (not by inlining)
    keeps its own op type, as before."""
    from precision_doctor.backends.ort import _model_node

    inits = [numpy_helper.from_array(np.array(-1, np.float32), "lo"), numpy_helper.from_array(np.array(1, np.float32), "hi")]
    nodes = [helper.make_node("LeakyRelu", ["x"], ["l"], name="leaky"),
             helper.make_node("Clip", ["l", "lo", "hi"], ["y"], name="clip")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits)
    model = from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    assert _model_node(model, "Mul", "MulFusedByOrt_12") == ("Mul", "MulFusedByOrt_12")
    first, _ = _model_node(model, "Less", "")
    assert first in {"LeakyRelu", "Clip"}
    assert _model_node(model, "Less", "", blocked={first})[0] == ({"LeakyRelu", "Clip"} - {first}).pop()


def test_backends_of_one_model_provider_and_format_share_what_was_refused():
    """Every backend of a run over one model on one provider, in one format and at one optimization level, starts from
    the op types already refused there (the kernel spread's and the confirmation's backends do not learn them again, a
    session each); another model (another run, a service's next job) or level learns its own."""
    model = from_proto(_model())
    a, b = OrtBackend(model, "fp16", CPU), OrtBackend(model, "fp16", CPU)
    other_level = OrtBackend(model, "fp16", CPU, level="disabled")
    another = OrtBackend(from_proto(_model()), "fp16", CPU)
    a.kept_fp32["Tanh"] = runtime_reason("Tanh")
    assert b.kept_fp32 == {"Tanh": runtime_reason("Tanh")}
    assert other_level.kept_fp32 == {} and another.kept_fp32 == {}
    for backend in (a, b, other_level, another):
        backend.close()


def test_an_op_refused_as_itself_is_refused_at_every_level_a_fused_kernel_only_at_its_own():
    """What a level learned of ops refused as themselves, every other level starts from (the TensorRT proxy, graph
    optimizations disabled, learned mpnet-base's three again on the H200: 34 s); an op kept FP32 because ONNX Runtime
    fused it into a kernel with no BF16 form (MatMul into a Gemm at the default level) stays that level's own."""
    from collections import ChainMap

    model = from_proto(_model())
    everywhere: dict[str, str] = {}
    kept = ChainMap({}, everywhere)
    session_keeping_fp32(lambda blocked: build_mixed(model, frozenset(), "bf16", op_block_list=blocked),
                         lambda p: make_session(p, CPU), "bf16", kept, lambda line: None, "ort-cpu", model, everywhere)
    assert set(kept) == {"MatMul", "Add", "Relu", "Tanh"} and set(everywhere) == {"Add", "Relu", "Tanh"}
    # a backend at another level starts from those (ort-cpu refuses BF16 backends: its record is read in FP16 here)
    model.ort_refused[("ort-cpu", "fp16", "any level")] = everywhere
    other = OrtBackend(model, "fp16", CPU, level="disabled")
    assert dict(other.kept_fp32) == everywhere and "MatMul" not in other.kept_fp32
    other.kept_fp32["Gemm"] = "learned at this level"
    default = OrtBackend(model, "fp16", CPU)
    assert "Gemm" not in everywhere and "Gemm" not in default.kept_fp32
    other.close()
    default.close()
