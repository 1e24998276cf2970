"""Inputs: .npz, polygraphy JSON, HDF5, generated samples, and the refusals."""

from __future__ import annotations

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from precision_doctor import planted
from precision_doctor.data.inputs import generate_samples, load_samples, parse_input_shapes, parse_val_ranges, validate_samples
from precision_doctor.errors import UserError
from precision_doctor.graph.model import from_proto, load_model
from precision_doctor.planted import IR_VERSION, OPSET


def _dynamic_model():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def test_generated_samples_are_seeded_ranged_and_shaped(tmp_path):
    path = tmp_path / "dyn.onnx"
    onnx.save(_dynamic_model(), str(path))
    model = load_model(path, input_shapes=parse_input_shapes(["x:[5,3]"]))
    a = generate_samples(model, 3, seed=1, val_ranges=parse_val_ranges(["x:[-2,-1]"]))
    b = generate_samples(model, 3, seed=1, val_ranges=parse_val_ranges(["x:[-2,-1]"]))
    assert len(a) == 3 and a[0]["x"].shape == (5, 3)
    assert all(np.array_equal(x["x"], y["x"]) for x, y in zip(a, b))
    assert a[0]["x"].min() >= -2 and a[0]["x"].max() <= -1
    default = generate_samples(load_model(path), 1)[0]["x"]
    assert default.shape == (1, 3) and 0 <= default.min() and default.max() <= 1


def test_npz_polygraphy_json_and_h5(tmp_path):
    from polygraphy.json import save_json

    s = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    np.savez(tmp_path / "a.npz", **s)
    save_json([s, {"x": s["x"] + 1}], str(tmp_path / "b.json"))
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f["x"] = s["x"] + 2
    samples = load_samples([tmp_path / "a.npz", tmp_path / "b.json", tmp_path / "c.h5"])
    assert len(samples) == 4
    assert [float(x["x"][0, 0]) for x in samples] == [0.0, 0.0, 1.0, 2.0]


@pytest.mark.parametrize(
    "sample, message",
    [
        ({}, "missing input 'x'"),
        ({"x": np.zeros((2, 32), np.float32), "z": np.zeros(1)}, "unknown input 'z'"),
        ({"x": np.zeros((2, 31), np.float32)}, "has shape"),
        ({"x": np.zeros((2, 32), np.int32)}, "has dtype"),
        ({"x": np.full((2, 32), np.nan, np.float32)}, "NaN or Inf"),
    ],
)
def test_bad_samples_are_refused(sample, message):
    model = from_proto(planted.clean().model)
    with pytest.raises(UserError, match=message):
        validate_samples(model, [sample])


def test_nonfinite_allowed_on_request():
    model = from_proto(planted.clean().model)
    validate_samples(model, [{"x": np.full((2, 32), np.inf, np.float32)}], allow_nonfinite=True)


@pytest.mark.parametrize("bad", ["x:[1,2", "x:1,2", "[3,1]"])
def test_bad_val_ranges(bad):
    with pytest.raises(UserError):
        parse_val_ranges([bad])
