"""Small models for the cost, grouping and latency tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_model(dims: list) -> onnx.ModelProto:
    """x [N, 3, H, W] -> Conv 3x3 -> BatchNormalization -> Relu -> Conv 1x1 -> Mul by 1e5 -> Mul by 1e-5 -> y;
    `dims` is the declared input shape (ints, dim_params or -1)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "shift"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "var"),
        numpy_helper.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array(1e5, np.float32), "up"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "down"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "scale", "shift", "mean", "var"], ["bn"], name="bn1"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu1"),
        helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
        helper.make_node("Mul", ["c2", "up"], ["u"], name="scale_up"),
        helper.make_node("Mul", ["u", "down"], ["y"], name="scale_down"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph(nodes, "conv", [x], [y], inits),
                          opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return onnx.shape_inference.infer_shapes(m)
