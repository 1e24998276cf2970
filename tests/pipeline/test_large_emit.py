"""A model past protobuf's 2 GB, given with its weights in an external data file, as such models come: it loads,
and fixed.onnx is written with its weights in `fixed.onnx.data` beside it (not a hidden or random name), loads with
them and runs. The limit is patched down (the one stand-in: a real 2 GB model needs minutes and about 16 GB here;
tests/graph/test_model_loading.py's slow test builds one to check that it is known as such)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from precision_doctor import manifest
from precision_doctor.graph import model as model_module


def test_a_model_past_the_limit_gets_fixed_onnx_with_its_weights_beside_it(tmp_path, monkeypatch, run_cli,
                                                                          planted_file):
    case, path, files = planted_file("overflow_island", n=6)
    onnx.save(onnx.load(str(path)), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").is_file()
    monkeypatch.setattr(model_module, "_TWO_GB", 4096)  # this model's 7 KB are "past the limit"
    out = tmp_path / "run"
    code, _, err = run_cli("diagnose", path, *[a for f in files for a in ("--inputs", f)], "--atol", case.atol,
                           "--rtol", case.rtol, "--backend", "emulate", "--out", out)
    assert code == 0, err
    fixed = onnx.load(str(out / "fixed.onnx"), load_external_data=False)
    places = {e.value for t in fixed.graph.initializer for e in t.external_data if e.key == "location"}
    assert places == {"fixed.onnx.data"} and (out / "fixed.onnx.data").is_file()
    assert not list(out.glob(".fixed*")), "no partial file is left"
    assert "fixed.onnx.data" in manifest.listed(out), "a rerun with --force may replace it"
    sess = ort.InferenceSession(str(out / "fixed.onnx"), providers=["CPUExecutionProvider"])
    sample = dict(np.load(files[0]))
    got = sess.run(None, sample)
    assert all(np.isfinite(np.asarray(g, np.float64)).all() for g in got)
    # the weights travelled whole: the same as the user's, widened where fixed.onnx keeps them FP32
    user = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    loaded = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(out / "fixed.onnx")).graph.initializer}
    assert user and all(np.allclose(loaded[n].astype(np.float64), user[n], rtol=1e-3) for n in user if n in loaded)


def test_saving_past_the_limit_again_replaces_the_data_and_ignores_the_working_directory(tmp_path, monkeypatch):
    """fixed.onnx.data written a second time (a resumed run's artifacts) is replaced, not appended to; a file of
    that name in the working directory (onnx's own conversion looks there) changes nothing."""
    from precision_doctor.graph.toolnames import save_model

    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.normal(size=(64, 64)).astype(np.float32), "w")
    g = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                               [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])], [w])
    proto = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    monkeypatch.setattr(model_module, "_TWO_GB", 4096)
    out = tmp_path / "run"
    out.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "fixed.onnx.data").write_bytes(b"the user's")
    monkeypatch.chdir(cwd)
    for _ in range(2):
        save_model(proto, out / "fixed.onnx")
    assert (out / "fixed.onnx.data").stat().st_size == 64 * 64 * 4
    assert (cwd / "fixed.onnx.data").read_bytes() == b"the user's"
    x = rng.normal(size=(1, 64)).astype(np.float32)
    got = ort.InferenceSession(str(out / "fixed.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.allclose(got, x @ onnx.numpy_helper.to_array(w), rtol=1e-5, atol=1e-5)
    assert proto.graph.initializer[0].HasField("raw_data"), "the proto given keeps its weights"
