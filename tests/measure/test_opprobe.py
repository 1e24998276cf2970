"""The op probe (issue 21): subgraphs cut from a model (measure/node_fixture.py), and the
`probe-ops` command on the CPU provider (plumbing: the CPU computes FP16 in FP32 inside, so these tests
check structure, not GPU numbers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph.model import from_proto
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.node_fixture import subgraph_model
from precision_doctor.planted import CASES, IR_VERSION

ROOT = Path(__file__).resolve().parents[2]


def _hardswish_model():
    """Conv -> BatchNormalization-15 -> HardSwish -> GlobalAveragePool: a PP-LCNet block in miniature."""
    rng = np.random.default_rng(3)
    f32 = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)  # noqa: E731
    inits = [f32("w", rng.standard_normal((4, 3, 3, 3)) * 0.4), f32("s", rng.uniform(0.5, 2, 4)),
             f32("b", rng.standard_normal(4)), f32("m", rng.standard_normal(4) * 0.1), f32("v", rng.uniform(1e-4, 1e-2, 4))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn", epsilon=1e-5),
             node("HardSwish", ["n"], ["h"], name="hswish"),
             node("GlobalAveragePool", ["h"], ["y"], name="gap")]
    vi = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    g = helper.make_graph(nodes, "hswish", [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=IR_VERSION)


def test_subgraph_model_cuts_nodes_with_their_constants():
    case = CASES["three_defects"]()
    model = from_proto(case.model)
    names = [n.name for n in model.nodes][1:4]
    proto = subgraph_model(model, names)
    assert [n.name for n in proto.graph.node if n.op_type != "Constant"] == names
    ins = [i.name for i in proto.graph.input]
    s = case.samples(1, 0)[0]
    every = [t for n in model.nodes for t in n.outputs if t]
    full = dict(zip(every, make_session(with_outputs(model.proto, every, model.tensor_types), optimize=False).run(every, s)), **s)
    outs = [o.name for o in proto.graph.output]
    got = make_session(proto, optimize=False).run(outs, {t: full[t] for t in ins})
    for t, v in zip(outs, got):
        np.testing.assert_array_equal(v, full[t])


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "precision_doctor", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_probe_ops_on_the_cpu_provider(tmp_path):
    model = tmp_path / "hswish.onnx"
    onnx.save(_hardswish_model(), str(model))
    out = tmp_path / "run"
    res = _cli("probe-ops", str(model), "--provider", "cpu", "--samples", "2", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "| op | nodes |" in res.stdout and "within 1.1x of the emulation rule" in res.stdout
    data = json.loads((out / "probe_ops.json").read_text())
    assert data["provider"] == "cpu" and data["rules"] == "ort-cuda" and data["exceeding"] == []
    assert {r["op_type"] for r in data["ops"]} == {"Conv", "BatchNormalization", "HardSwish", "GlobalAveragePool"}
    assert {n["node"] for n in data["nodes"]} == {"conv", "bn", "hswish", "gap"}
    assert data["tensorrt"].startswith("not probed")
    assert (out / "probe_ops.md").read_text().startswith("# probe-ops: hswish.onnx")


def test_probe_ops_without_a_gpu_says_so_in_one_line(tmp_path):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has ONNX Runtime's CUDA provider")
    model = tmp_path / "hswish.onnx"
    onnx.save(_hardswish_model(), str(model))
    res = _cli("probe-ops", str(model), "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "no CUDA GPU here" in res.stderr
    assert not (tmp_path / "run").exists()
    bad = _cli("probe-ops", str(model), "--provider", "tpu", "--out", str(tmp_path / "run2"))
    assert bad.returncode == 2 and "--provider tpu: choose cuda or cpu" in bad.stderr
    bf16 = _cli("probe-ops", str(model), "--provider", "cpu", "--precision", "bf16", "--samples", "1", "--out",
                str(tmp_path / "run3"))  # ORT's CPU provider has no BF16 kernels
    assert bf16.returncode == 2 and "ONNX Runtime has no BF16 kernel" in bf16.stderr and bf16.stderr.count("\n") == 1
