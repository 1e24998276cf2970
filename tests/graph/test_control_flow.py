"""Control flow: an If node is one unit that runs whole in FP32 (never a candidate), end to end."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api
from precision_doctor.data.activations import ActivationStore
from precision_doctor.data.inputs import InputValues
from precision_doctor.data.workload import load_workload
from precision_doctor.graph.model import load_model
from precision_doctor.measure.tolerance import Tolerance, check
from precision_doctor.spec import BackendSpec, CaptureSpec, InputSpec, RunSpec, SearchSpec


def if_model() -> onnx.ModelProto:
    """x -> proj (MatMul) -> a -> relu -> b; cond = sum(x) > 0; If(cond): then b*3 + a, else a - b (both
    branches compute float ops on the outer-scope a and b); then relu -> big_matmul (overflows FP16)
    -> rescale (Div by 1000) -> y. The minimal FP32 set is {big_matmul, rescale}."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(2000, 4000, (8, 4)).astype(np.float32), "big_w"),
        numpy_helper.from_array(np.float32(1000.0), "scale"),
        numpy_helper.from_array(np.float32(0.0), "zero"),
    ]
    then_g = helper.make_graph(
        [
            helper.make_node("Constant", [], ["k3"], value=numpy_helper.from_array(np.float32(3.0)), name="then_const"),
            helper.make_node("Mul", ["b", "k3"], ["t1"], name="then_mul"),
            helper.make_node("Add", ["t1", "a"], ["t_out"], name="then_add"),
        ],
        "then", [], [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2, 8])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["a", "b"], ["e_out"], name="else_sub")],
        "else", [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2, 8])],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"], name="proj"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="total", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["y_if"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["y_if"], ["r"], name="post_relu"),
        helper.make_node("MatMul", ["r", "big_w"], ["m"], name="big_matmul"),
        helper.make_node("Div", ["m", "scale"], ["y"], name="rescale"),
    ]
    g = helper.make_graph(
        nodes, "if_model", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.checker.check_model(m, full_check=True)
    return m


def test_if_node_is_one_fp32_unit_end_to_end(tmp_path):
    path = tmp_path / "if_model.onnx"
    onnx.save(if_model(), str(path))

    model = load_model(path)
    branch = model.node("branch")
    assert branch.op_type == "If" and not branch.is_candidate
    assert set(branch.implicit_inputs) == {"a", "b"}
    assert "branch" not in {n.name for n in model.candidates}

    # Range [-1, 1.3]: samples take both branches (sum(x) > 0 and < 0).
    # The standard rule: with ort-cuda's, ORT fuses big_matmul and rescale into FusedMatMul(alpha=1/1000),
    # whose FP32 accumulator never overflows, and nothing needs FP32 (tests/graph/test_fusions.py).
    spec = RunSpec(str(path), inputs=InputSpec(samples=4, seed=0, val_ranges=("[-1,1.3]",)),
                   tolerance=Tolerance(1e-2, 1e-2), backends=BackendSpec(rules="standard"),
                   capture=CaptureSpec(keep="all"),  # the test reads the If's output from the capture
                   search=SearchSpec(cost="nodes"))  # the node-minimal answer is known (deploy closes a gap too)
    work = load_workload(spec.model, spec.inputs, InputValues.parse(spec.inputs))
    taken = {bool(s["x"].sum() > 0) for s in work.samples}
    assert taken == {True, False}
    out = tmp_path / "run"
    rep = api.diagnose(spec, out).to_json()

    assert rep["status"] == "complete" and rep["passed"]
    assert "branch" not in rep["answer"]["fallback_nodes"]
    assert set(rep["answer"]["fallback_nodes"]) == {"big_matmul", "rescale"}
    assert all(layer["name"] != "branch" for layer in rep["analysis"]["layers"])  # not ranked: not a candidate
    assert rep["analysis"]["baseline"]["passed"] is False  # all-FP16 overflows in big_matmul

    # The capture holds the If's output in both runs; the local run only has candidates.
    with ActivationStore(out / "activations.h5") as store:
        ref = np.stack(list(store.iter_samples("reference", "y_if")))
        low = np.stack(list(store.iter_samples("lowp", "y_if")))
        assert ref.shape == low.shape == (len(work.samples), 2, 8)
        assert np.all(np.isfinite(low))

    # fixed.onnx keeps the If working with FP16 tensors around it, and meets the tolerance.
    sess = ort.InferenceSession(str(out / "fixed.onnx"), providers=["CPUExecutionProvider"])
    ref_sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for s in work.samples:
        got = sess.run(None, {"x": s["x"]})[0]
        want = ref_sess.run(None, {"x": s["x"]})[0]
        assert check(got, want, Tolerance(1e-2, 1e-2)).passed
