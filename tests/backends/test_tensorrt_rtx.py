"""TensorRT for real without a GPU: TensorRT-RTX's ONNX parser and ahead-of-time builder (PyPI's
`tensorrt-rtx`, the `trt` extra) on the demo model as `diagnose` writes it, every planted model, a
model with unnamed and duplicate-named nodes and one with nodes fixed.onnx keeps FP32 (Range).

Skipped where no TensorRT-RTX imports, unless PRECISION_DOCTOR_REQUIRE_TRT=1 (CI on x86-64 Linux),
where a missing library fails instead."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from trt_helpers import require_tensorrt_rtx

from precision_doctor import planted
from precision_doctor.backends.tensorrt import build_engine, parse_onnx, trt_check
from precision_doctor.backends.tensorrt.build import BuildSettings, make_config
from precision_doctor.backends.tensorrt.tactics import parse_tactic_sources
from precision_doctor.errors import UserError
from precision_doctor.graph.mixed import build_mixed, forced_fp32_nodes
from precision_doctor.graph.model import load_model
from precision_doctor.graph.toolnames import autocast_names, model_for_tools, tensorrt_layer_names, tool_name_mismatches
from precision_doctor.results import commands
from precision_doctor.results.commands import EmitOptions

pytestmark = pytest.mark.tensorrt

LIB = require_tensorrt_rtx()


def _fixed(model, fallback, tmp_path, name="fixed.onnx"):
    path = tmp_path / name
    onnx.save(build_mixed(model, frozenset(fallback), "fp16"), str(path))
    return path


def _check(model, fallback, path, forced=None):
    forced = forced_fp32_nodes(model, fallback) if forced is None else forced
    return trt_check(path, fallback, [n.name for n in model.candidates], "fp16", forced=forced, lib=LIB)


# --- trt_check: each layer's precision against the answer ----------------------------------------


def test_demo_model_as_diagnose_writes_it(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("three_defects", n=6)
    out = tmp_path / "run"
    args = [a for f in files for a in ("--inputs", f)]
    code, _, err = run_cli("diagnose", path, *args, "--atol", str(case.atol), "--rtol", str(case.rtol), "--out", out)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    model = load_model(path)
    res = _check(model, rep["answer"]["fallback_nodes"], out / "fixed.onnx")
    assert res.passed, [m.describe() for m in res.mismatches]
    assert res.library == "tensorrt_rtx" and res.version == LIB.version
    assert res.checked_nodes == len(model.candidates) and res.unmapped == ()
    assert res.layers > res.checked_layers > 0
    assert "every checked layer matches the answer" in res.summary()


@pytest.mark.parametrize("name", sorted(planted.CASES))
def test_planted_models(name, tmp_path):
    case = planted.CASES[name]()
    model = load_model(_save(case.model, tmp_path / f"{name}.onnx"))
    path = _fixed(model, case.expected, tmp_path)
    res = _check(model, case.expected, path)
    assert res.passed, [m.describe() for m in res.mismatches]
    assert res.checked_nodes == len(model.candidates)


def test_a_wrong_answer_is_caught(tmp_path):
    case = planted.three_defects()
    model = load_model(_save(case.model, tmp_path / "m.onnx"))
    path = _fixed(model, case.expected, tmp_path)
    kept, moved = sorted(case.expected)[0], next(n.name for n in model.candidates if n.name not in case.expected)
    claimed = (set(case.expected) - {kept}) | {moved}  # one FP32 node said to be FP16, one FP16 node said FP32
    res = _check(model, claimed, path)
    assert not res.passed
    got = {(m.node, m.role, m.expected, m.found) for m in res.mismatches}
    assert (kept, "low precision", "HALF", ("FLOAT",)) in got
    assert (moved, "fallback", "FLOAT", ("HALF",)) in got
    assert {m.node for m in res.mismatches} == {kept, moved}
    with pytest.raises(UserError, match="not among the candidates"):
        trt_check(path, ["no_such_node"], [n.name for n in model.candidates], lib=LIB)


def _range_model() -> onnx.ModelProto:
    """x + Range(0, 8, 1) * w: Range has no FP16 kernel in ONNX Runtime, so fixed.onnx keeps it FP32."""
    inits = [
        numpy_helper.from_array(np.array(0.0, np.float32), "start"),
        numpy_helper.from_array(np.array(8.0, np.float32), "limit"),
        numpy_helper.from_array(np.array(1.0, np.float32), "delta"),
        numpy_helper.from_array(np.full([8], 0.5, np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
        helper.make_node("Mul", ["r", "w"], ["rw"], name="scale"),
        helper.make_node("Add", ["x", "rw"], ["y0"], name="add"),
        helper.make_node("Exp", ["y0"], ["y"], name="exp"),
    ]
    graph = helper.make_graph(
        nodes, "range", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", planted.OPSET)], ir_version=planted.IR_VERSION)


def test_nodes_kept_fp32_beyond_the_answer(tmp_path):
    model = load_model(_save(_range_model(), tmp_path / "range.onnx"))
    answer = ["exp"]
    forced = forced_fp32_nodes(model, answer)
    assert forced == {"range": "Range: no FP16/BF16 kernel in ONNX Runtime"}
    path = _fixed(model, answer, tmp_path)
    res = _check(model, answer, path, forced=forced)
    assert res.passed and res.forced == forced
    # without them the parser's FLOAT Range shows up as a disagreement: nothing FP32 goes unlisted
    bare = _check(model, answer, path, forced={})
    assert [(m.node, m.found) for m in bare.mismatches] == [("range", ("FLOAT",))]


# --- names every tool sees ---------------------------------------------------------------------


def _save(proto, path):
    onnx.save(proto, str(path))
    return path


def _unnamed_model(tmp_path):
    proto = copy.deepcopy(planted.three_defects().model)
    for i, node in enumerate(proto.graph.node):
        if i % 2 == 0:
            node.name = ""
        elif i in (3, 5):
            node.name = "dup"  # a name used twice
    return _save(proto, tmp_path / "unnamed.onnx")


def test_unnamed_nodes_fixed_onnx_checks_clean(tmp_path):
    path = _unnamed_model(tmp_path)
    model = load_model(path)
    assert len(model.renamed_nodes) == 7
    answer = [model.nodes[i].name for i in (0, 3, 4)]  # renamed ones among them
    res = _check(model, answer, _fixed(model, answer, tmp_path))
    assert res.passed and res.checked_nodes == len(model.candidates)


def test_emitted_names_are_the_parsers_layer_names(tmp_path):
    """The user's bug: names we invented went into --layerPrecisions while TensorRT called the
    layers node_of_<output>, so trtexec silently matched none of them."""
    path = _unnamed_model(tmp_path)
    model = load_model(path)
    answer = [n.name for n in model.candidates if n.name in model.renamed_nodes or n.name == "dup"]
    original_layers = {layer.name for layer in parse_onnx(LIB, path).layers()}
    assert not set(answer) <= original_layers  # the bug, on the original file
    tools_model = model_for_tools(model, tmp_path / "run")
    assert tools_model.name == "named.onnx"
    cmd = commands.trtexec_trt10(str(tools_model), answer)
    spec = [t for t in cmd.split() if t.startswith("--layerPrecisions=")][0].removeprefix("--layerPrecisions=")
    emitted = [pair.rpartition(":")[0] for pair in spec.split(",")]
    layers = {layer.name for layer in parse_onnx(LIB, tools_model).layers()}
    assert emitted == answer and set(emitted) <= layers
    graph = onnx.load(str(tools_model)).graph
    ours = [n.name for n in model.nodes]
    assert tensorrt_layer_names(graph) == ours and autocast_names(graph) == ours
    assert tool_name_mismatches(graph, ours) == []
    named = load_model(tools_model)
    assert named.renamed_nodes == [] and model_for_tools(named, tmp_path / "x") == tools_model  # nothing to rename


def test_diagnose_points_every_command_at_named_onnx(run_cli, tmp_path):
    path = _unnamed_model(tmp_path)
    case = planted.three_defects()
    files = []
    for i, sample in enumerate(case.samples(6, seed=0)):
        files += ["--inputs", tmp_path / f"s{i}.npz"]
        np.savez(tmp_path / f"s{i}.npz", **sample)
    out = tmp_path / "run"
    code, _, err = run_cli("diagnose", path, *files, "--atol", str(case.atol), "--rtol", str(case.rtol), "--out", out)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    assert (out / "named.onnx").exists() and rep["model"]["renamed_nodes"]
    assert "--onnx=named.onnx" in rep["answer"]["commands"]["trtexec_trt10"] \
        and "--onnx_path named.onnx" in rep["answer"]["commands"]["autocast"]
    assert "--onnx=named.onnx" in (out / "trtexec.sh").read_text()
    listed = [ln.rpartition(":")[0] for ln in (out / "layer_precisions.txt").read_text().splitlines() if not ln.startswith("#")]
    assert listed == rep["answer"]["fallback_nodes"]
    layers = {layer.name for layer in parse_onnx(LIB, out / "named.onnx").layers()}
    assert set(listed) <= layers  # every name trtexec gets is a layer of the file it reads
    assert (out / "autocast_nodes_to_exclude.txt").read_text().split() == rep["answer"]["fallback_nodes"]
    assert autocast_names(onnx.load(str(out / "named.onnx")).graph) == [n.name for n in load_model(path).nodes]
    assert (out / "tensorrt_rtx.sh").exists() and "tensorrt_rtx_sh" not in rep["answer"]["commands"]


def test_autocast_naming_rule():
    """ModelOpt AutoCast names only unnamed nodes: `<op>_<k>`, k from the count of distinct names
    (the empty name counts) and raised only on a clash; duplicates stay."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["c"]),
        helper.make_node("Mul", ["c", "b"], ["d"], name="Add_3"),
        helper.make_node("Add", ["d", "b"], ["e"]),
        helper.make_node("Relu", ["e"], ["f"], name="dup"),
        helper.make_node("Relu", ["f"], ["g"], name="dup"),
        helper.make_node("Add", ["g", "b"], ["h"]),
    ]
    graph = helper.make_graph(nodes, "g", [], [])
    # distinct names {"", "Add_3", "dup"}: k = 3; Add_3 is taken -> Add_4; Add_4 taken -> Add_5
    assert autocast_names(graph) == ["Add_4", "Add_3", "Add_5", "dup", "dup", "Add_6"]
    assert tensorrt_layer_names(graph) == ["node_of_c", "Add_3", "node_of_e", "dup", "dup", "node_of_h"]


# --- the fixed engine, built ahead of time -------------------------------------------------------


def test_fixed_engine_portable_and_named_targets(tmp_path):
    case = planted.three_defects()
    model = load_model(_save(case.model, tmp_path / "m.onnx"))
    path = _fixed(model, case.expected, tmp_path)
    run = tmp_path / "run"
    portable = build_engine(path, run / "fixed.plan", lib=LIB)
    assert portable.plan.stat().st_size == portable.size_bytes > 0
    assert portable.targets == ("8.0", "8.6", "8.9", "12.0", "12.1") and not portable.tf32
    assert portable.timing_cache is None and portable.runtime_cache == run / "runtime.cache"
    assert not (run / "timing.cache").exists()  # TensorRT-RTX keeps no timing cache
    turing = build_engine(path, run / "turing.plan", lib=LIB, compute_capabilities=["7.5"],
                          tactic_sources=parse_tactic_sources("-JIT_CONVOLUTIONS"))
    assert turing.targets == ("7.5",) and turing.tactic_sources == ("EDGE_MASK_CONVOLUTIONS",)
    assert turing.to_dict()["plan"] == str(run / "turing.plan")
    with pytest.raises(UserError, match=r"compute capability 9\.0: TensorRT-RTX .* targets 7\.5 8\.0"):
        build_engine(path, run / "h100.plan", lib=LIB, compute_capabilities=["9.0"])
    with pytest.raises(UserError, match="CUBLAS not available"):
        build_engine(path, run / "x.plan", lib=LIB, tactic_sources=parse_tactic_sources(["CUBLAS"]))


def test_builder_config_clears_tf32_and_sets_targets(tmp_path):
    case = planted.overflow_island()
    model = load_model(_save(case.model, tmp_path / "m.onnx"))
    parsed = parse_onnx(LIB, _fixed(model, case.expected, tmp_path))
    trt = LIB.module
    config, _ = make_config(parsed, BuildSettings(compute_capabilities=((8, 6), (12, 0))))
    assert not config.get_flag(trt.BuilderFlag.TF32)  # on by default in TensorRT-RTX's config
    assert [config.get_compute_capability(i) for i in range(config.num_compute_capabilities)] == [
        trt.ComputeCapability.SM86, trt.ComputeCapability.SM120]
    config, _ = make_config(parsed, BuildSettings(tf32=True))
    assert config.get_flag(trt.BuilderFlag.TF32) and config.num_compute_capabilities == 0


def test_dynamic_inputs_need_a_shape(tmp_path):
    proto = copy.deepcopy(planted.overflow_island().model)
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = _save(proto, tmp_path / "dyn.onnx")
    fixed = _fixed(load_model(path), [], tmp_path)
    with pytest.raises(UserError, match=r"input 'x' has a dynamic shape \[\?x"):
        build_engine(fixed, tmp_path / "dyn.plan", lib=LIB)
    shape = [3, *proto.graph.input[0].type.tensor_type.shape.dim[1:]]
    dims = [shape[0], *(d.dim_value for d in shape[1:])]
    assert build_engine(fixed, tmp_path / "dyn.plan", lib=LIB, input_shapes={"x": dims}).size_bytes > 0


def test_parser_refusal_is_one_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(UserError, match=r"^TensorRT-RTX .*'s ONNX parser refused .*bad\.onnx") as err:
        parse_onnx(LIB, bad)
    assert "\n" not in str(err.value)


def test_tensorrt_rtx_script_builds_for_real(tmp_path):
    """The emitted tensorrt_rtx.sh, run as a user would (polygraphy + TensorRT-RTX on PATH)."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    bindir = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(bindir, "polygraphy")):
        pytest.skip("no polygraphy executable beside this Python")
    pytest.importorskip("tensorrt_rtx")  # polygraphy imports this name (PyPI's tensorrt-rtx provides it)
    case = planted.three_defects()
    model = load_model(_save(case.model, tmp_path / "m.onnx"))
    _fixed(model, case.expected, tmp_path)
    script = tmp_path / "tensorrt_rtx.sh"
    script.write_text(commands.tensorrt_rtx_script("fixed.onnx", EmitOptions(compute_capabilities=["8.6", "12.0"],
                                                                         avoid=["JIT_CONVOLUTIONS"])))
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    log = res.stdout + res.stderr
    assert "Flags                  | [STRONGLY_TYPED]" in log  # no TF32
    assert "[(8, 6), (12, 0)]" in log and "Tactic Sources         | [EDGE_MASK_CONVOLUTIONS]" in log
    assert (tmp_path / "fixed.plan").stat().st_size > 0


def test_intermediate_tensors_become_engine_outputs(tmp_path):
    """What TrtBackend(outputs=[...]) does to a network before building (mark all-style checks)."""
    from precision_doctor.backends.tensorrt.backend import _mark_outputs
    from precision_doctor.backends.tensorrt.build import build_serialized

    case = planted.three_defects()
    model = load_model(_save(case.model, tmp_path / "m.onnx"))
    parsed = parse_onnx(LIB, _fixed(model, case.expected, tmp_path))
    _mark_outputs(parsed.network, ["sum_out", "head_out"])
    net = parsed.network
    assert sorted(net.get_output(i).name for i in range(net.num_outputs)) == ["head_out", "sum_out"]
    data, _ = build_serialized(parsed, BuildSettings())
    assert len(data) > 0
    with pytest.raises(UserError, match="no tensor"):
        _mark_outputs(net, ["not_a_tensor"])


def test_backend_trt_refuses_in_one_line_where_engines_cannot_run(run_cli, planted_file, tmp_path):
    run = LIB.runtime()
    if run.can_run:
        pytest.skip(f"this machine runs TensorRT-RTX engines: {run.reason}")
    case, path, files = planted_file("overflow_island", n=2)
    args = [a for f in files for a in ("--inputs", f)]
    for flag in ("--backend", "--confirm-backend"):
        code, out, err = run_cli("diagnose", path, *args, flag, "trt", "--out", tmp_path / flag.strip("-"))
        assert code == 2, out + err
        line = err.strip()
        assert "\n" not in line and line.endswith(f"{run.reason}; nothing was built or run (use emulate or ort-cuda)")
        assert line.startswith(f"error: {flag} trt unavailable: ")
        assert not (tmp_path / flag.strip("-")).exists()  # refused before the run directory is made


def test_env_names_the_default_engine_targets_and_the_opt_in_ones():
    """`env` says which compute capabilities a build targets when none is named, and which only when named."""
    from precision_doctor import environment

    status = environment.tensorrt_status()
    default = " ".join(f"{a}.{b}" for a, b in LIB.default_compute_capabilities)
    assert f"compute capability {default} by default" in status
    opt_in = [f"{a}.{b}" for a, b in LIB.target_compute_capabilities if (a, b) not in LIB.default_compute_capabilities]
    assert opt_in and f"({' '.join(opt_in)} when named: --engine-targets)" in status
