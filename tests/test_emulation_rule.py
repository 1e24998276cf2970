"""The emulation rule, checked against numpy rounding on small graphs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.model import from_proto
from precision_doctor.planted import IR_VERSION, OPSET

FMT = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def r(x, fmt):
    return np.asarray(x, np.float32).astype(FMT[fmt]).astype(np.float32)


def _model(const_node: bool = False):
    """y = (x * w) + b, with b an initializer or a Constant node; plus an int64 Reshape."""
    w = numpy_helper.from_array(np.array([1.0001, 3.14159, 70000.0, 1e-6], np.float32), "w")
    shape = numpy_helper.from_array(np.array([2, 2], np.int64), "shape")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="mul")]
    inits = [w, shape]
    b = np.array([0.1, 2049.0, -0.3333, 5e-5], np.float32)
    if const_node:
        nodes.append(helper.make_node("Constant", [], ["b"], name="bconst", value=numpy_helper.from_array(b)))
    else:
        inits.append(numpy_helper.from_array(b, "b"))
    nodes += [
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Reshape", ["a", "shape"], ["y"], name="reshape"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION), b


X = np.array([1.0009765625 + 1e-4, 0.333333, 1.5, 7.0], np.float32)
W = np.array([1.0001, 3.14159, 70000.0, 1e-6], np.float32)


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("const_node", [False, True])
@pytest.mark.parametrize("fallback", [(), ("mul",), ("add",), ("mul", "add")])
def test_rule_matches_numpy(fmt, const_node, fallback):
    proto, b = _model(const_node)
    model = from_proto(proto)
    be = EmulateBackend(model, fmt)
    got = be.prepare(frozenset(fallback)).run({"x": X})["y"].ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        if "mul" in fallback:  # FP32 on what it receives, output not rounded
            m = X * W
        else:  # rounds inputs (the initializer too) and its output
            m = r(r(X, fmt) * r(W, fmt), fmt)
        if "add" in fallback:  # fed by a low-precision node: takes the rounded value as it is
            a = m + b
        else:  # fed by an FP32 node: rounds that input itself
            a = r(r(m, fmt) + r(b, fmt), fmt)
        y = r(a, fmt)  # the Reshape is a low-precision node too: it rounds what it receives
    np.testing.assert_array_equal(got, y)


def test_all_lowp_overflows_fp16_but_not_bf16():
    proto, _ = _model()
    model = from_proto(proto)
    fp16 = EmulateBackend(model, "fp16").prepare(frozenset()).run({"x": X})["y"].ravel()
    bf16 = EmulateBackend(model, "bf16").prepare(frozenset()).run({"x": X})["y"].ravel()
    assert np.isinf(fp16[2])  # 70000 does not fit FP16
    assert np.isfinite(bf16[2])


def test_candidates_exclude_constants_and_integer_nodes():
    proto, _ = _model(const_node=True)
    model = from_proto(proto)
    assert [n.name for n in model.candidates] == ["mul", "add", "reshape"]
    assert model.node("bconst").is_candidate is False


def test_gated_graph_is_one_session_for_all_sets():
    proto, _ = _model()
    be = EmulateBackend(from_proto(proto), "fp16")
    session = be.session
    for fb in [(), ("mul",), ("add",)]:
        be.prepare(frozenset(fb)).run({"x": X})
    assert be.session is session
