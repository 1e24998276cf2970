"""Broken input files on disk: every refusal is a UserError naming the file (and the tensor), with
what to do, never numpy's or h5py's own words (issue #11)."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper

from precision_doctor import planted
from precision_doctor.data.inputs import generate_samples, load_samples, parse_input_shapes, parse_val_ranges, validate_samples
from precision_doctor.errors import UserError
from precision_doctor.graph.model import from_proto

X = np.arange(64, dtype=np.float32).reshape(2, 32) / 64


def _refused(path, *words: str, absent: tuple[str, ...] = ()) -> str:
    with pytest.raises(UserError) as info:
        load_samples([path])
    msg = str(info.value)
    assert str(path) in msg and len(msg.splitlines()) == 1
    for w in words:
        assert w in msg, msg
    for w in absent:
        assert w not in msg, msg
    return msg


def test_files_that_are_not_npz(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "random.npz").write_bytes(bytes(rng.integers(0, 256, 500, dtype=np.uint8)))
    _refused(tmp_path / "random.npz", "not an .npz archive", absent=("pickle",))
    (tmp_path / "text.npz").write_text("x = 1\n")
    _refused(tmp_path / "text.npz", "np.savez", absent=("pickle",))
    np.save(tmp_path / "arr.npy", X)
    (tmp_path / "arr.npy").rename(tmp_path / "arr.npz")
    _refused(tmp_path / "arr.npz", ".npy array", "np.savez", absent=("TypeError",))
    (tmp_path / "empty.npz").write_bytes(b"")
    _refused(tmp_path / "empty.npz", "is empty")
    (tmp_path / "dir.npz").mkdir()
    _refused(tmp_path / "dir.npz", "is a directory", absent=("not found",))


def test_damaged_npz_and_object_arrays(tmp_path):
    np.savez(tmp_path / "ok.npz", x=X)
    data = (tmp_path / "ok.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    _refused(tmp_path / "cut.npz", "damaged")
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}, None], dtype=object))
    _refused(tmp_path / "obj.npz", "array 'x'", "Python objects", absent=("allow_pickle",))
    assert np.array_equal(load_samples([tmp_path / "ok.npz"])[0]["x"], X)


def test_json_and_h5_refusals(tmp_path):
    from polygraphy.json import save_json

    save_json([{"x": X}, {"x": X + 1}], str(tmp_path / "two.json"))
    text = (tmp_path / "two.json").read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    _refused(tmp_path / "cut.json", "not valid JSON (line")
    (tmp_path / "none.json").write_text("[]")
    _refused(tmp_path / "none.json", "holds no samples")
    (tmp_path / "ragged.json").write_text('{"x": [[1, 2], [3]]}')
    _refused(tmp_path / "ragged.json", "'x'", "not a numeric array")
    (tmp_path / "bad.h5").write_bytes(b"\x00" * 300)
    _refused(tmp_path / "bad.h5", "not a readable HDF5 file")


def test_validation_names_the_file_and_sample_within_it(tmp_path):
    from polygraphy.json import save_json

    model = from_proto(planted.clean().model)  # x: float32 [2, 32]
    np.savez(tmp_path / "short.npz", x=X[:, :8])
    with pytest.raises(UserError, match=r"short\.npz: input 'x' has shape \[2, 8\]"):
        validate_samples(model, load_samples([tmp_path / "short.npz"]))
    save_json([{"x": X}, {"x": np.where(X > 0.5, np.nan, X)}], str(tmp_path / "two.json"))
    with pytest.raises(UserError, match=r"two\.json \(sample 1\): input 'x' contains NaN"):
        validate_samples(model, load_samples([tmp_path / "two.json"]))
    with h5py.File(tmp_path / "group.h5", "w") as f:
        f.create_group("x")
    with pytest.raises(UserError, match=r"group\.h5: missing input 'x'"):
        validate_samples(model, load_samples([tmp_path / "group.h5"]))
    with pytest.raises(UserError, match="sample 0: missing input 'x'"):  # not from a file
        validate_samples(model, [{}])


def _dynamic(elem=TensorProto.FLOAT):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", elem, ["n", 3])],
                          [helper.make_tensor_value_info("y", elem, ["n", 3])])
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", planted.OPSET)],
                                        ir_version=planted.IR_VERSION))


def test_empty_tensors_and_zero_dims_are_refused(tmp_path):
    model = _dynamic()
    np.savez(tmp_path / "empty.npz", x=np.zeros((0, 3), np.float32))
    with pytest.raises(UserError, match=r"empty\.npz: input 'x' is empty \(shape \[0, 3\]\)"):
        validate_samples(model, load_samples([tmp_path / "empty.npz"]))
    for bad in ("x:[0,3]", "x:[-1,3]", "x:[1.5,3]"):
        with pytest.raises(UserError, match=rf"inputs.input_shapes {bad.replace('[', '.').replace(']', '.')}: every"):
            parse_input_shapes([bad])
    assert parse_input_shapes(["x:[4,3]"]) == {"x": [4, 3]}


def test_generation_refusals():
    with pytest.raises(UserError, match="inputs.seed must be a non-negative integer"):
        generate_samples(_dynamic(), 1, seed=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning on the way to the message
        with pytest.raises(UserError, match=r"inputs.val_ranges x:\[1e\+39,1e\+40\] does not fit input 'x' \(float32"):
            generate_samples(_dynamic(), 1, val_ranges=parse_val_ranges(["x:[1e39,1e40]"]))
    g = helper.make_graph([helper.make_node("Cast", ["s"], ["f"], name="parse", to=TensorProto.FLOAT),
                           helper.make_node("Relu", ["f"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    strings = from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", planted.OPSET)],
                                           ir_version=planted.IR_VERSION))
    with pytest.raises(UserError, match="input 's' has type object: its values cannot be generated; give samples"):
        generate_samples(strings, 1)
    assert generate_samples(_dynamic(TensorProto.FLOAT16), 1)[0]["x"].dtype == np.float16


def test_npz_from_disk_round_trip_keeps_names(tmp_path):
    """FileSample behaves as the dict it was: saved and loaded again, copied, fed by name."""
    np.savez(tmp_path / "a.npz", x=X)
    s = load_samples([tmp_path / "a.npz"])[0]
    assert s.source == str(tmp_path / "a.npz") and dict(s).keys() == {"x"}
    np.savez(tmp_path / "b.npz", **s)
    onnx_model = planted.clean().model
    validate_samples(from_proto(onnx_model), load_samples([tmp_path / "b.npz"]))
