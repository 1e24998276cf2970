"""Shapes as ONNX Runtime knows them (graph/ort_shapes.py). A decoder's positions come from Range over a length taken
from its input's shape; ONNX's shape inference loses the batch dim there (whisper-base's decoder: (None, 40, 512)
with every input fixed), ONNX Runtime does not, and fuses MatMul + bias into Gemm, which the fusion sites, and the
gated graph's units, must then model too (on the H200 the gated graph computed other values than the deployed one
for sets keeping such a site's neighbours in FP32: bench/fidelity_bisect.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph import ort_shapes
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.native import fusion_units, gated_native_graph
from precision_doctor.graph.ort_shapes import with_ort_dims
from precision_doctor.graph.rules import resolve_rules


def _decoder_block() -> onnx.ModelProto:
    """x (1, 40, 16) plus a position embedding gathered at Range(0, len(x)) tiled to the batch, then MatMul by a
    weight and Add of a bias: ONNX infers the sum as (None, 40, 16)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "pos_table"),
             numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32) * 0.2, "w"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([1], np.int64), "i1"), numpy_helper.from_array(np.array([0], np.int64), "i0")]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "one"], ["length"], name="length", axis=0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        helper.make_node("Range", ["zero", "length", "one"], ["positions"], name="range"),
        helper.make_node("Unsqueeze", ["positions", "i0"], ["positions2"], name="unsq"),
        helper.make_node("Unsqueeze", ["batch", "i0"], ["batch1"], name="unsq_b"),
        helper.make_node("Concat", ["batch1", "i1"], ["reps"], name="reps", axis=0),
        helper.make_node("Tile", ["positions2", "reps"], ["tiled"], name="tile"),
        helper.make_node("Gather", ["pos_table", "tiled"], ["pos"], name="embed", axis=0),
        helper.make_node("Add", ["x", "pos"], ["h"], name="add_pos"),
        helper.make_node("MatMul", ["h", "w"], ["hw"], name="proj"),
        helper.make_node("Add", ["hw", "b"], ["y"], name="bias"),
    ]
    graph = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _fused(proto: onnx.ModelProto, tmp_path: Path) -> Counter:
    """Op types after ONNX Runtime's CPU optimizer at ORT_ENABLE_ALL, in the main graph and every branch."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out: Counter = Counter()

    def count(g: onnx.GraphProto) -> None:
        for n in g.node:
            out[n.op_type] += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    count(a.g)

    count(onnx.load(so.optimized_model_filepath).graph)
    return out


def test_onnx_runtime_knows_the_batch_dim_onnx_loses_and_the_bias_site_is_a_gemm_fusion():
    proto = _decoder_block()
    onnx_only = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    lost = {v.name: [d.dim_value or None for d in v.type.tensor_type.shape.dim] for v in onnx_only.graph.value_info}
    assert lost["h"][0] is None  # what the tool knew before ONNX Runtime's inference was asked
    model = from_proto(proto)
    assert model.tensor_shapes["h"] == (1, 40, 16)
    assert model.tensor_shapes["y"] == (1, 40, 32)
    sites = resolve_rules("ort-cuda").sites(model, FP16)
    assert any(s.fusion == "matmul-add-gemm" and s.anchor == "bias" for s in sites.values())


def test_the_unit_branch_fuses_the_gemm_the_deployed_graph_fuses(tmp_path):
    """The gated graph's unit {proj, bias} fuses into Gemm inside its branch as the deployed graph does, the tensors
    it reads declared with their shapes (ONNX Runtime's inference loses them through long chains of If: whisper-base,
    below; this small graph keeps them either way), and the gated graph computes the deployed graph's values."""
    model = from_proto(_decoder_block())
    units = fusion_units(model, FP16)
    assert ("proj", "bias") in units
    gated = gated_native_graph(model, FP16, "if", units=units)
    declared = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in gated.proto.graph.value_info}
    assert declared["h"] == [1, 40, 16]  # an If's output: ONNX Runtime infers none through deep chains of them
    assert _fused(gated.proto, tmp_path)["Gemm"] == 1
    x = np.random.default_rng(1).standard_normal((1, 40, 16)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(gated.proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    low = sess.run(["y"], {"x": x, **gated.feeds([])})[0]
    fp32 = sess.run(["y"], {"x": x, **gated.feeds(gated.candidates)})[0]
    ref = ort.InferenceSession(model.proto.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(fp32, ref, rtol=1e-5, atol=1e-5)
    assert np.abs(low - ref).max() < 0.1  # FP16 runs, finite and close


def test_known_dims_stay_and_nothing_is_written_where_some_value_stays_unknown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proto = _decoder_block()
    proto.graph.node.append(helper.make_node("Mystery", ["y"], ["z"], name="mystery", domain="example.custom"))
    proto.opset_import.append(helper.make_opsetid("example.custom", 1))
    shapes = {"h": (None, 40, 16), "y": (7, None, 32), "hw": (None, 40)}  # a disagreeing dim, a rank that differs
    merged = with_ort_dims(proto, shapes)
    assert merged["h"] == (1, 40, 16)
    assert merged["y"] == (7, None, 32) and merged["hw"] == (None, 40)
    assert merged.get("z") in (None, ()) or None in merged["z"]  # a custom op's output: nothing made up
    assert list(tmp_path.iterdir()) == []  # ONNX Runtime's infer_shapes saves sym_shape_infer_temp.onnx here


def test_a_failed_inference_changes_nothing(monkeypatch):
    class Failing:
        def __init__(self, *args):
            raise RuntimeError("no inference here")

    monkeypatch.setattr(ort_shapes, "_inference_class", lambda: Failing)
    shapes = {"h": (None, 40, 16)}
    assert with_ort_dims(_decoder_block(), shapes) == shapes


def test_a_dynamic_dim_is_not_made_concrete_by_a_broadcast():
    """x (N, 4) through Relu, then added to a (3, 4) constant: r stays (None, 4) (with its `auto_merge`, ONNX Runtime's
    inference would call it (3, 4), and a gated graph declaring that fails at N = 1)."""
    y = numpy_helper.from_array(np.ones((3, 4), np.float32), "y")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "y"], ["out"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [y])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    merged = with_ort_dims(proto, {"r": (None, 4)})
    assert merged["r"] == (None, 4)


WHISPER = Path(__file__).resolve().parents[2] / ".large" / "whisper-base" / "model.onnx"


@pytest.mark.slow
@pytest.mark.skipif(not WHISPER.exists(), reason="whisper-base is not here (bench/large_prepare.py makes it)")
def test_whisper_bases_gated_graph_fuses_every_gemm_its_deployed_graph_fuses(tmp_path):
    """On whisper-base (decoder tokens fixed to 40) ONNX Runtime makes 78 Gemm of the deployed all-FP16 graph; the
    gated graph's units made 67 in their branches (36 before ONNX Runtime's shapes were asked) until the branches
    were given the shapes (layers 4 and 5 of the decoder lost them)."""
    shapes = {"input_features": [1, 80, 3000], "decoder_input_ids": [1, 40]}
    from precision_doctor.graph.mixed import build_mixed
    from precision_doctor.graph.model import load_model

    model = load_model(WHISPER, shapes)
    gated = gated_native_graph(model, FP16, "if", units=fusion_units(model, FP16))
    deployed = build_mixed(model, frozenset(), "fp16", True)
    assert _fused(gated.proto, tmp_path)["Gemm"] == _fused(deployed, tmp_path)["Gemm"] == 78
