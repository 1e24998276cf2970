"""Measured latency with I/O binding: the plumbing on ORT's CPU provider (the numbers mean something on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from pricing_helpers import conv_model

from precision_doctor import planted
from precision_doctor.backends.registry import cuda_machine
from precision_doctor.costs import DeployLatency
from precision_doctor.graph.model import from_proto, load_model
from precision_doctor.measure.latency import batched, deploy_latency


def test_batched_repeats_each_input_along_its_batch_axis(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Identity", ["state"], ["y"])], "g",
                          [vi("audio", TensorProto.FLOAT, ["B", "T"]), vi("state", TensorProto.FLOAT, [2, "B", 4]),
                           vi("sr", TensorProto.INT64, [])], [vi("y", TensorProto.FLOAT, [2, "B", 4])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    model = load_model(path)
    feeds = {"audio": np.arange(6, dtype=np.float32).reshape(1, 6), "state": np.ones((2, 1, 4), np.float32),
             "sr": np.array(16000)}
    out = batched(model, feeds, 5)
    assert out["audio"].shape == (5, 6) and out["state"].shape == (2, 5, 4) and out["sr"].shape == ()
    assert (out["audio"][4] == feeds["audio"][0]).all()


def test_deploy_latency_times_three_models():
    model = from_proto(conv_model([-1, 3, 16, 16]))
    sample = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    lat = deploy_latency(model, frozenset({"scale_up"}), "fp16", sample, batch=4, device="cpu", runs=3)
    assert isinstance(lat, DeployLatency) and lat.batch == 4 and lat.runs == 3 and lat.device == "cpu"
    assert min(lat.fp32_ms, lat.lowp_ms, lat.fixed_ms) > 0
    assert lat.fixed_p90_ms >= lat.fixed_ms
    kept = DeployLatency(1, "cuda", 1, 10.0, 4.0, 5.5, 10.0, 4.0, 5.5).latency_kept
    assert kept == pytest.approx(0.75)
    assert DeployLatency(1, "cuda", 1, 4.0, 4.0, 5.0, 4.0, 4.0, 5.0).latency_kept is None  # FP16 does not pay


@pytest.mark.skipif(cuda_machine(), reason="ONNX Runtime has a CUDA GPU here")
def test_no_gpu_no_latency():
    model = from_proto(planted.CASES["clean"]().model)
    assert deploy_latency(model, frozenset(), "fp16", planted.CASES["clean"]().samples(1)[0]) is None
