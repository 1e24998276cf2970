"""A BF16 run's fixed.onnx and report keep FP32 the op types a run's ONNX Runtime backends found refused for want of
a BF16 kernel (`Backends.kept_fp32`), each with its reason, and nothing else (no table ahead of time); an FP16 run of
the same model keeps none (issue 35). Through the emulator, on the CPU."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph.ort_kernels import runtime_reason
from precision_doctor.pipeline.context import Backends


def _model(path) -> None:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Pow", ["h", "two"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"], ["ms"], name="mean", axes=[-1], keepdims=1),
             helper.make_node("Add", ["h", "ms"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


def _run(run_cli, tmp_path, precision: str, name: str) -> tuple[dict, onnx.ModelProto]:
    path = tmp_path / "m.onnx"
    if not path.exists():
        _model(path)
        np.savez(tmp_path / "x.npz", x=np.random.default_rng(1).uniform(-1, 1, (2, 8)).astype(np.float32))
    out = tmp_path / name
    code, _, err = run_cli("diagnose", path, "--inputs", tmp_path / "x.npz", "--precision", precision,
                           "--backend", "emulate", "--atol", "0.5", "--rtol", "0.5", "--out", out)
    assert code == 0, err
    return json.loads((out / "report.json").read_text()), onnx.load(str(out / "fixed.onnx"))


def _fp32_nodes(fixed: onnx.ModelProto) -> set[str]:
    """The nodes of fixed.onnx whose first output is FLOAT (Casts aside)."""
    types = {v.name: v.type.tensor_type.elem_type for v in [*fixed.graph.value_info, *fixed.graph.output]}
    return {n.name for n in fixed.graph.node if n.op_type != "Cast" and types.get(n.output[0]) == TensorProto.FLOAT}


def test_a_bf16_run_keeps_nothing_fp32_ahead_of_time_nor_does_fp16(run_cli, tmp_path):
    rep, fixed = _run(run_cli, tmp_path, "bf16", "bf16")
    assert rep["answer"]["fallback_nodes"] == [] and rep["answer"]["forced_fp32_nodes"] == {} and _fp32_nodes(fixed) == set()
    rep16, fixed16 = _run(run_cli, tmp_path, "fp16", "fp16")
    assert rep16["answer"]["forced_fp32_nodes"] == {} and _fp32_nodes(fixed16) == set()


def test_ops_a_backend_found_refused_join_them(run_cli, tmp_path, monkeypatch):
    monkeypatch.setattr(Backends, "kept_fp32", lambda self: {"Relu": runtime_reason("Relu")})
    rep, fixed = _run(run_cli, tmp_path, "bf16", "kept")
    assert rep["answer"]["forced_fp32_nodes"]["relu"] == runtime_reason("Relu") and "relu" in _fp32_nodes(fixed)
    assert "no BF16 kernel in this ONNX Runtime for Relu" in (tmp_path / "kept" / "report.md").read_text()
    code, out, _ = run_cli("report", tmp_path / "kept")  # the terminal lists them too, apart from the answer
    assert code == 0 and "Also in FP32, whatever the tolerance (1 node; report.md says why):\n  relu\n" in out
