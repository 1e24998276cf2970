"""Constants saturate, activations overflow: the emulator and fixed.onnx agree on a -3.4e38 mask model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.formats import BF16, FP16
from precision_doctor.graph.mixed import build_mixed, lowp_nodes
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.saturate import saturate_round, saturated_constants, to_format
from precision_doctor.planted import IR_VERSION, OPSET

F32_MIN = float(np.finfo(np.float32).min)  # what HF transformers multiply a padding mask with


def mask_model():
    """Attention scores + (1 - mask) * -3.4e38 (a Constant, as HF transformers export a padding mask),
    then softmax; the mask times `v` (an initializer with a 1e5 outlier) and times a ConstantOfShape
    of 1e6; the mask Constant is also read by `mask_fp32`, so fallback sets can split its readers.

    Built so that ONNX Runtime's CPU provider computes it as the emulation rule does: it runs chains of
    FP16 nodes in FP32 and drops the Cast pairs between them (even the last rounding before an FP32
    output), so every intermediate value here is exact in FP16 and each output has one rounding
    (fixed.onnx is built with FP16 outputs). Saturated, the masked positions are -65504 - s and exp()
    gives 0 in both; without saturation the mask is 0 * -inf = NaN."""
    v = np.linspace(-2, 2, 8, dtype=np.float32)
    v[0] = 1e5
    nodes = [
        helper.make_node("Constant", [], ["neg"], name="neg_const", value=numpy_helper.from_array(np.array(F32_MIN, np.float32))),
        helper.make_node("Sub", ["one", "mask"], ["inv"], name="invert"),
        helper.make_node("Mul", ["inv", "neg"], ["ext"], name="extend"),
        helper.make_node("Unsqueeze", ["ext", "axis1"], ["ext3"], name="unsq"),
        helper.make_node("Add", ["scores", "ext3"], ["masked"], name="add_mask"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
        helper.make_node("Mul", ["mask", "v"], ["weighted"], name="weight"),
        helper.make_node("Shape", ["mask"], ["mshape"], name="shape"),
        helper.make_node("ConstantOfShape", ["mshape"], ["fill"], name="fill",
                         value=numpy_helper.from_array(np.array([1e6], np.float32))),
        helper.make_node("Mul", ["mask", "fill"], ["scaled"], name="scale"),
        helper.make_node("Mul", ["mask", "neg"], ["mask_fp32"], name="mask_fp32"),
        helper.make_node("ReduceMin", ["mask_fp32"], ["side"], name="side_min", keepdims=0),
    ]
    inits = [
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(v, "v"),
    ]
    g = helper.make_graph(
        nodes, "mask_model",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 3, 8]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("probs", "weighted", "scaled", "side")],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    return from_proto(onnx.shape_inference.infer_shapes(m))


def feeds():
    rng = np.random.default_rng(1)
    mask = np.ones((2, 8), np.float32)
    mask[0, 5:] = 0
    mask[1, 3:] = 0
    return {"scores": rng.standard_normal((2, 3, 8)).astype(np.float32), "mask": mask}


def test_saturate_round_clips_finite_values_only():
    x = np.array([F32_MIN, -7e4, -65519.0, 65520.0, 1e-9, 3e-8, np.inf, -np.inf, np.nan, 1.0], np.float32)
    r = saturate_round(x, FP16)
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r[:4], [-65504.0, -65504.0, -65504.0, 65504.0])
    assert r[4] == 0.0 and r[5] == np.float32(np.float16(2**-24))  # below the smallest subnormal: rounds as FP16 does
    assert r[6] == np.inf and r[7] == -np.inf and np.isnan(r[8]) and r[9] == 1.0
    assert to_format(x, FP16).dtype == np.float16
    b = saturate_round(np.array([F32_MIN, 1.0], np.float32), BF16)
    assert np.isfinite(b).all() and b[0] == -BF16.max  # -3.4e38 rounds to -inf in bf16 too, so it saturates


@pytest.mark.parametrize("fallback", [frozenset(), frozenset({"mask_fp32"}), frozenset({"softmax", "mask_fp32"})])
def test_emulator_and_fixed_onnx_agree_bit_for_bit(fallback):
    model = mask_model()
    f = feeds()
    emulated = EmulateBackend(model, "fp16").prepare(fallback).run(f)
    real = OrtBackend(model, "fp16", providers=["CPUExecutionProvider"], keep_io_types=False).prepare(fallback).run(f)
    for name in model.outputs:
        assert not np.isnan(emulated[name]).any(), name
        np.testing.assert_array_equal(emulated[name].view(np.uint32), real[name].view(np.uint32), err_msg=name)
    ref = ReferenceRunner(model).run(f)
    np.testing.assert_allclose(emulated["probs"], ref["probs"], atol=1e-3)  # the attention runs in FP16
    assert (emulated["scaled"].max(), emulated["weighted"].max()) == (65504.0, 65504.0)


def test_the_mask_would_give_nan_without_saturation():
    """The case is real: a runtime Cast of -3.4e38 to FP16 is -inf (ORT CPU), and 0 * -inf is NaN."""
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.array([F32_MIN], np.float32)})[0][0] == -np.inf


def test_fixed_onnx_writes_saturated_constants():
    model = mask_model()
    fixed = build_mixed(model, frozenset({"mask_fp32"}), "fp16")
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in fixed.graph.node if n.op_type == "Constant"}
    assert consts["neg"].dtype == np.float32 and consts["neg"] == np.float32(F32_MIN)  # the FP32 reader's original
    low = [v for k, v in consts.items() if k != "neg"]
    assert len(low) == 1 and low[0].dtype == np.float16 and low[0] == -65504.0  # the low readers' twin
    assert not any(n.op_type == "Cast" and n.input[0] == "neg" for n in fixed.graph.node)
    inits = {i.name: numpy_helper.to_array(i) for i in fixed.graph.initializer}
    low_v = next(v for k, v in inits.items() if k.startswith("v") and v.dtype == np.float16)
    assert low_v[0] == 65504.0
    fill = next(n for n in fixed.graph.node if n.op_type == "ConstantOfShape")
    assert numpy_helper.to_array(fill.attribute[0].t)[0] == 65504.0


def test_saturated_constants_lists_what_changed():
    model = mask_model()
    everything = saturated_constants(model, FP16, lowp_nodes(model, frozenset()))
    by_name = {c["name"]: c for c in everything}
    assert set(by_name) == {"v", "neg"}  # (the ConstantOfShape's value is an attribute, not a tensor read)
    assert by_name["neg"]["kind"] == "Constant" and by_name["neg"]["max_abs"] == pytest.approx(-F32_MIN)
    assert by_name["neg"]["saturated"] == 1 and by_name["v"]["saturated"] == 1 and by_name["v"]["size"] == 8
    assert by_name["v"]["kind"] == "initializer" and by_name["v"]["max_abs"] == 1e5
    assert sorted(by_name["neg"]["read_by"]) == ["extend", "mask_fp32"]
    kept = saturated_constants(model, FP16, lowp_nodes(model, frozenset({"extend", "mask_fp32"})))
    assert [c["name"] for c in kept] == ["v"]  # every reader of `neg` in FP32: it is not converted
    assert [c["name"] for c in saturated_constants(model, BF16, lowp_nodes(model, frozenset()))] == ["neg"]
