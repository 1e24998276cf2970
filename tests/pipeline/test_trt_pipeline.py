"""The pipeline with the real TensorRT-RTX parser and builder (the `trt` extra, installed by `make`), through
`precision-doctor diagnose` as a real process: every passing run's report.json has a `trt_check` of fixed.onnx
with 0 mismatches, `--engine` builds fixed.plan, and the `--layerPrecisions` names the commands carry are the
parser's layer names of the file they read (named.onnx for a model with unnamed nodes).

Skipped where no TensorRT-RTX imports, unless PRECISION_DOCTOR_REQUIRE_TRT=1 (CI on x86-64 Linux)."""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from trt_helpers import require_tensorrt_rtx

from precision_doctor import planted
from precision_doctor.backends.tensorrt import parse_onnx
from precision_doctor.backends.tensorrt.library import ENV_LIBRARY, find_library
from precision_doctor.graph.model import load_model
from precision_doctor.render.files import ARTIFACT_TITLES
from precision_doctor.runfiles import RunDir

pytestmark = pytest.mark.tensorrt

LIB = require_tensorrt_rtx()

CLI = [sys.executable, "-m", "precision_doctor"]


def cli(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """precision-doctor as a user runs it: a process of its own."""
    full = {k: v for k, v in os.environ.items() if k != ENV_LIBRARY}
    full.update({"COLUMNS": "400", **(env or {})})
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, env=full, timeout=300)


def _write(proto: onnx.ModelProto, samples: list[dict], where: Path, name: str) -> list[str]:
    """The model and its samples on disk; returns the diagnose arguments naming them."""
    where.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(where / f"{name}.onnx"))
    args = [str(where / f"{name}.onnx")]
    for i, s in enumerate(samples):
        np.savez(where / f"{name}_{i}.npz", **s)
        args += ["--inputs", str(where / f"{name}_{i}.npz")]
    return args


def _planted(name: str, where: Path, n: int = 4) -> list[str]:
    case = planted.CASES[name]()
    return [*_write(case.model, case.samples(n, 0), where, name), "--atol", str(case.atol), "--rtol", str(case.rtol)]


def _unnamed(where: Path) -> list[str]:
    """three_defects with every other node unnamed and two sharing a name."""
    case = planted.three_defects()
    proto = copy.deepcopy(case.model)
    for i, node in enumerate(proto.graph.node):
        if i % 2 == 0:
            node.name = ""
        elif i in (3, 5):
            node.name = "dup"
    return [*_write(proto, case.samples(6, 0), where, "unnamed"), "--atol", str(case.atol), "--rtol", str(case.rtol)]


def _layer_precisions(cmd: str) -> list[str]:
    spec = next(t for t in shlex.split(cmd) if t.startswith("--layerPrecisions=")).removeprefix("--layerPrecisions=")
    return [pair.rpartition(":")[0] for pair in spec.split(",")]


def _diagnosed(args: list[str], out: Path, *extra: str) -> dict:
    res = cli("diagnose", *args, *extra, "--out", out)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads((out / "report.json").read_text()) | {"_stdout": res.stdout}


def _check_clean(rep: dict, model_path: str) -> None:
    check = rep["tensorrt"]["check"]
    assert check["ran"] and check["passed"] and check["mismatches"] == [], check
    assert check["library"] == "TensorRT-RTX" and check["version"] == LIB.version and check["onnx"] == "fixed.onnx"
    assert check["checked_nodes"] == rep["model"]["candidates"] == len(load_model(model_path).candidates)
    assert f"{check['layers']} layers, {check['checked_layers']} checked over {check['checked_nodes']} nodes, 0 mismatches" \
        in rep["_stdout"]


@pytest.mark.parametrize("name", ["three_defects", *sorted(set(planted.CASES) - {"three_defects"})])
def test_diagnose_checks_fixed_onnx_and_builds_the_engine(name, tmp_path):
    """The demo (three_defects) and every planted model: trt_check clean, fixed.plan built."""
    args = _planted(name, tmp_path)
    out = tmp_path / "run"
    rep = _diagnosed(args, out, "--engine")
    _check_clean(rep, args[0])
    engine = rep["tensorrt"]["engine"]
    assert engine["built"] and engine["plan"] == "fixed.plan" and rep["answer"]["artifacts"]["engine"] == "fixed.plan"
    assert (out / "fixed.plan").stat().st_size == engine["size_bytes"] > 0
    assert engine["targets"] == ["8.0", "8.6", "8.9", "12.0", "12.1"] and not engine["tf32"]
    assert engine["cache"] == "runtime.cache"  # where TensorRT-RTX keeps JIT kernels when it runs: the run directory
    assert rep["answer"]["forced_fp32_nodes"] == {} and "named_onnx" not in rep["answer"]["artifacts"]
    # the TensorRT 10 line names exactly the answer, and those are layers of the file it reads
    if rep["answer"]["fallback_nodes"]:
        emitted = _layer_precisions(rep["answer"]["commands"]["trtexec_trt10"])
        assert emitted == rep["answer"]["fallback_nodes"]
        assert set(emitted) <= {layer.name for layer in parse_onnx(LIB, args[0]).layers()}
    assert "engine: fixed.plan (TensorRT-RTX" in rep["_stdout"]


def test_unnamed_nodes_named_onnx_and_chosen_targets(tmp_path):
    args = _unnamed(tmp_path)
    out = tmp_path / "run"
    rep = _diagnosed(args, out, "--engine", "--engine-targets", "8.6,12.0")
    _check_clean(rep, args[0])
    assert rep["tensorrt"]["engine"]["built"] and rep["tensorrt"]["engine"]["targets"] == ["8.6", "12.0"]
    assert rep["answer"]["artifacts"]["named_onnx"] == "named.onnx" and (out / "named.onnx").is_file()
    layers = {layer.name for layer in parse_onnx(LIB, out / "named.onnx").layers()}
    for key in ("trtexec_trt10", "polygraphy_trt10"):
        assert "named.onnx" in rep["answer"]["commands"][key], key
    emitted = _layer_precisions(rep["answer"]["commands"]["trtexec_trt10"])
    assert emitted == rep["answer"]["fallback_nodes"] and set(emitted) <= layers  # the parser's layer names, one for one
    original = {layer.name for layer in parse_onnx(LIB, args[0]).layers()}
    assert not set(emitted) <= original  # what went wrong before named.onnx
    md = (out / "report.md").read_text()
    assert "Every command reads named.onnx" in md and "node_of_<first output>" in md
    assert "`named.onnx`: the model with the node names this report uses" in md
    assert set(rep["answer"]["artifacts"]) <= set(ARTIFACT_TITLES)  # every file the run wrote is described in words


def test_nodes_kept_fp32_beyond_the_answer_are_listed_and_checked(tmp_path):
    """Range has no FP16 kernel in ONNX Runtime, so fixed.onnx keeps it FP32: report.json lists it with the
    reason, the TensorRT 10 and AutoCast commands pin it, and the check expects FLOAT there."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("start", 0.0), ("limit", 8.0), ("delta", 1.0))]
    inits.append(numpy_helper.from_array(np.full([8], 0.5, np.float32), "w"))
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
             helper.make_node("Mul", ["r", "w"], ["rw"], name="scale"),
             helper.make_node("Add", ["x", "rw"], ["y0"], name="add"),
             helper.make_node("Exp", ["y0"], ["y"], name="exp")]
    graph = helper.make_graph(nodes, "range", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", planted.OPSET)], ir_version=planted.IR_VERSION)
    samples = [{"x": np.random.default_rng(i).uniform(0, 1, (2, 8)).astype(np.float32)} for i in range(3)]
    out = tmp_path / "run"
    rep = _diagnosed(_write(proto, samples, tmp_path, "range"), out, "--atol", "1e-2", "--rtol", "1e-2")
    assert rep["answer"]["forced_fp32_nodes"] == {"range": "Range: no FP16/BF16 kernel in ONNX Runtime"}
    _check_clean(rep, str(tmp_path / "range.onnx"))
    assert _layer_precisions(rep["answer"]["commands"]["trtexec_trt10"]) == [*rep["answer"]["fallback_nodes"], "range"]
    assert "^range$" in rep["answer"]["commands"]["autocast"]
    assert "## Nodes fixed.onnx keeps in FP32 beyond the answer (1)" in (out / "report.md").read_text()


def _lstm_in_if() -> onnx.ModelProto:
    """An LSTM inside an If: parses, but TensorRT-RTX 1.7's builder stops with an internal assertion (as on
    silero-vad, whose LSTM sits inside an If too), on fixed.onnx and on the FP32 model alike."""
    hidden, steps = 4, 3
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), n) for n in "WR"]
    inits.append(numpy_helper.from_array(np.array(0, np.float32), "zero"))

    def branch(name: str, op: str) -> onnx.GraphProto:
        nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["", f"{name}_h"], hidden_size=hidden, name=f"{name}_lstm"),
                 helper.make_node(op, [f"{name}_h"], [f"{name}_y"], name=f"{name}_act")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, 1, hidden])])

    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["y0"], then_branch=branch("t", "Relu"), else_branch=branch("e", "Tanh"), name="if"),
             helper.make_node("Exp", ["y0"], ["y"], name="exp")]
    graph = helper.make_graph(nodes, "lstm_in_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_model_that_does_not_build_still_gets_its_diagnosis(tmp_path):
    onnx.save(_lstm_in_if(), str(tmp_path / "m.onnx"))
    out = tmp_path / "run"
    rep = _diagnosed([str(tmp_path / "m.onnx")], out, "--engine", "--atol", "1e-3", "--rtol", "1e-3")
    assert rep["passed"] and rep["tensorrt"]["check"]["passed"]  # the check needs no build
    engine = rep["tensorrt"]["engine"]
    assert not engine["built"] and "engine" not in rep["answer"]["artifacts"] and not (out / "fixed.plan").exists()
    assert engine["reason"].startswith(f"TensorRT-RTX {LIB.version} could not build an engine from fixed.onnx: ")
    assert "Internal Error" in engine["reason"] and "\n" not in engine["reason"]
    assert f"engine: not built: {engine['reason']}" in rep["_stdout"]
    assert f"Fixed engine: not built: {engine['reason']}" in (out / "report.md").read_text()
    res = cli("emit", out, "--format", "engine")  # afterwards: the same reason, one line, exit 1
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "engine not built: TensorRT-RTX" in res.stderr


def test_emit_format_engine_builds_from_a_run_directory(tmp_path, run_cli):
    """Afterwards, from the run directory; the model's batch dimension is dynamic, so the build takes its shape
    from the run's samples (inputs.json)."""
    case = planted.overflow_island()
    proto = copy.deepcopy(case.model)
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    args = [*_write(proto, case.samples(3, 0), tmp_path, "dyn"), "--atol", str(case.atol), "--rtol", str(case.rtol)]
    out = tmp_path / "run"
    rep = _diagnosed(args, out)
    assert rep["tensorrt"]["engine"] is None and not (out / "fixed.plan").exists()
    res = cli("emit", out, "--format", "engine", "--engine-targets", "8.9")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"{out / 'fixed.plan'}: built with TensorRT-RTX {LIB.version} for 8.9 in " \
        f"{json.loads((out / 'report.json').read_text())['tensorrt']['engine']['seconds']:.2f} s"
    after = json.loads((out / "report.json").read_text())
    assert after["tensorrt"]["engine"]["built"] and after["tensorrt"]["engine"]["targets"] == ["8.9"] \
        and after["answer"]["artifacts"]["engine"] == "fixed.plan"
    batch = case.samples(1, 0)[0]["x"].shape
    assert after["tensorrt"]["engine"]["input_shapes"] == {"x": list(batch)}
    assert "Fixed engine: fixed.plan built with TensorRT-RTX" in (out / "report.md").read_text()
    for bad, why in ((["--engine-targets", "9.0"], "compute capability 9.0: TensorRT-RTX"),
                     (["--engine-targets", "x"], "compute capability 'x'")):
        code, _, err = run_cli("emit", out, "--format", "engine", *bad)
        assert code == 2 and why in err and err.count("\n") == 1, err


@pytest.mark.skipif(find_library("tensorrt")[0] is not None, reason="NVIDIA's tensorrt is installed here")
def test_without_a_library_the_diagnosis_says_why(tmp_path):
    """PRECISION_DOCTOR_TRT_LIBRARY=tensorrt asks for NVIDIA's TensorRT, which is not installed here."""
    args = _planted("cancellation", tmp_path)
    out = tmp_path / "run"
    res = cli("diagnose", *args, "--engine", "--out", out, env={"PRECISION_DOCTOR_TRT_LIBRARY": "tensorrt"})
    assert res.returncode == 0, res.stderr
    rep = json.loads((out / "report.json").read_text())
    why = "no TensorRT library is installed (tensorrt: No module named 'tensorrt'); `pip install '.[trt]'` installs " \
          "TensorRT-RTX from PyPI"
    assert rep["tensorrt"]["check"] == {"ran": False, "reason": why}
    assert rep["tensorrt"]["engine"] == {"built": False, "reason": why}
    assert f"TensorRT check: not run: {why}" in res.stdout and f"engine: not built: {why}" in res.stdout
    res = cli("emit", out, "--format", "engine", env={"PRECISION_DOCTOR_TRT_LIBRARY": "tensorrt"})
    assert res.returncode == 2 and res.stderr.strip() == f"error: cannot build fixed.plan: {why}"


def test_the_engine_carries_a_tensorrt_knob_configuration(tmp_path):
    """What `search.knobs` found on trt goes into the engine too (tactic sources, TF32)."""
    from precision_doctor.backends import knobs
    from precision_doctor.graph.mixed import build_mixed
    from precision_doctor.pipeline.trt import build_fixed

    case = planted.overflow_island()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    onnx.save(build_mixed(load_model(tmp_path / "m.onnx"), frozenset(case.expected), "fp16"), str(tmp_path / "fixed.onnx"))
    config = next(c for c in knobs.knob_configs(knobs.TRT, LIB) if c.label == "tactic_sources=-JIT_CONVOLUTIONS,tf32=1")
    res = build_fixed(RunDir(tmp_path), ["8.6"], config)
    assert res.built and res.tactic_sources == ["EDGE_MASK_CONVOLUTIONS"] and res.tf32 and res.targets == ["8.6"]
    plain = build_fixed(RunDir(tmp_path), None, None)
    assert plain.built and plain.tactic_sources is None and not plain.tf32
