"""results/commands.py and emit.py: specs, shell quoting, names trtexec cannot carry, the build script (checked with
`bash -n` and run against a fake trtexec), and the polygraphy commands parsed by polygraphy's
own argument parser."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import stat
import subprocess

import pytest

from precision_doctor.backends.knobs import TF32, TRT, KnobConfig
from precision_doctor.graph.shapes import InputShape
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.results import commands, emit
from precision_doctor.results.commands import EmitOptions

NODES = ["/blk3/Pow", "/blk3/ReduceMean", "/blk3/Div"]
WEIRD = ["a b", "x$(rm -rf ~)", "semi;colon", 'dq"uote', "ns::op:1"]

TOL = Tolerance(atol=1e-3, rtol=1e-3)
TF32_ON = KnobConfig(TRT, ((TF32, "1"),))  # a knob configuration that keeps TF32 on


def _arg(cmd: str, prefix: str) -> str:
    """The value of the `prefix...` token of a one-line command, after shell parsing."""
    hits = [t[len(prefix) :] for t in shlex.split(cmd) if t.startswith(prefix)]
    assert len(hits) == 1, (prefix, cmd)
    return hits[0]


def test_specs():
    assert commands.layer_precisions_spec(NODES) == "/blk3/Pow:fp32,/blk3/ReduceMean:fp32,/blk3/Div:fp32"
    assert commands.layer_output_types_spec(NODES) == commands.layer_precisions_spec(NODES)
    assert commands.layer_precisions_spec(["a", "a", "b"]) == "a:fp32,b:fp32"  # no duplicates, order kept
    assert commands.layer_precisions_spec([]) == ""


def test_colon_in_names_is_fine_for_trtexec():
    # trtexec splits each pair at its last ':', so a ':' inside a name survives.
    assert commands.unexpressible_layer_names(["ns::op:1"]) == []
    assert commands.layer_precisions_spec(["ns::op:1"]) == "ns::op:1:fp32"


@pytest.mark.parametrize("bad", ["a,b", "it's", "star*name", "line\nbreak", ""])
def test_names_trtexec_cannot_express_are_reported(bad):
    names = ["good", bad]
    assert commands.unexpressible_layer_names(names) == [bad]
    ok, rejected = commands.split_layer_names(names)
    assert ok == ["good"] and rejected == [bad]
    assert commands.layer_precisions_spec(names) == "good:fp32"
    cmd = commands.trtexec_trt10("m.onnx", names)
    assert _arg(cmd, "--layerPrecisions=") == "good:fp32"
    text = commands.layer_precisions_file(names)
    assert "NOT EXPRESSIBLE" in text and repr(bad) in text
    assert [ln for ln in text.splitlines() if not ln.startswith("#")] == ["good:fp32"]


def test_polygraphy_names_rules():
    assert commands.unexpressible_layer_names(["a,b", "it's", "x*"], tool="polygraphy") == []
    assert commands.unexpressible_layer_names(["-looks-like-option", "ok"], tool="polygraphy") == ["-looks-like-option"]
    with pytest.raises(ValueError):
        commands.unexpressible_layer_names(["a"], tool="nope")


def test_trtexec_trt10_round_trips_through_the_shell():
    names = NODES + WEIRD
    cmd = commands.trtexec_trt10("/models/my model.onnx", names, EmitOptions("fp16", avoid=["cublas", "-cudnn"]))
    tokens = shlex.split(cmd)
    assert tokens[:3] == ["trtexec", "--onnx=/models/my model.onnx", "--fp16"]
    assert "--noTF32" in tokens and "--precisionConstraints=obey" in tokens
    expected = ",".join(f"{n}:fp32" for n in names)
    assert _arg(cmd, "--layerPrecisions=") == expected
    assert _arg(cmd, "--layerOutputTypes=") == expected
    assert _arg(cmd, "--tacticSources=") == "-CUBLAS,-CUDNN"
    assert _arg(cmd, "--saveEngine=") == "fixed.plan"
    assert _arg(cmd, "--timingCacheFile=") == "timing.cache"


def test_trtexec_trt10_bf16_and_empty_fallback():
    cmd = commands.trtexec_trt10("m.onnx", [], EmitOptions("bf16", timing_cache=None))
    tokens = shlex.split(cmd)
    assert "--bf16" in tokens and "--fp16" not in tokens
    assert not any(t.startswith(("--precisionConstraints", "--layerPrecisions", "--timingCacheFile")) for t in tokens)
    with pytest.raises(ValueError):
        commands.trtexec_trt10("m.onnx", [], EmitOptions("fp8"))


def test_trtexec_trt11_is_strongly_typed_without_precision_flags():
    cmd = commands.trtexec_trt11("out dir/fixed.onnx", EmitOptions(avoid=["CUBLAS", "jit-convolutions"]))
    tokens = shlex.split(cmd)
    assert tokens[:2] == ["trtexec", "--onnx=out dir/fixed.onnx"]
    assert not any(t in tokens for t in ("--fp16", "--bf16", "--stronglyTyped"))
    assert not any(t.startswith(("--layerPrecisions", "--precisionConstraints")) for t in tokens)
    assert _arg(cmd, "--tacticSources=") == "-JIT_CONVOLUTIONS"  # CUBLAS does not exist in TRT 11
    assert "--stronglyTyped" in shlex.split(commands.trtexec_trt11("f.onnx", strongly_typed_flag=True))
    # TF32 is on by default in 11.x: the FP32 islands of fixed.onnx would multiply in TF32
    assert "--noTF32" in tokens
    assert "--noTF32" not in shlex.split(commands.trtexec_trt11("f.onnx", EmitOptions(knob=TF32_ON)))


def _polygraphy_parse(cmd: str) -> argparse.Namespace:
    """Parse a `polygraphy run ...` line with polygraphy's own parser (as its main() does)."""
    pytest.importorskip("polygraphy")
    from polygraphy.tools.registry import TOOL_REGISTRY

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(title="Tools", dest="tools")
    for tool in TOOL_REGISTRY:
        tool.setup_parser(sub)
    tokens = shlex.split(cmd)
    assert tokens[0] == "polygraphy"
    args, unknown = parser.parse_known_args(tokens[1:])
    assert unknown == [], unknown
    return args


@pytest.mark.filterwarnings("ignore:SelectableGroups:DeprecationWarning")
def test_polygraphy_trt10_parses():
    cmd = commands.polygraphy_trt10(
        "model.onnx",
        NODES + ["ns::op:1"],
        EmitOptions(
            "fp16",
            tolerance=Tolerance(atol=1e-3, rtol=2e-3, check_error_stat="median", output_atol=("out:0.01",)),
            inputs="in puts.json",
            avoid=["EDGE_MASK_CONVOLUTIONS"],
        ),
    )
    args = _polygraphy_parse(cmd)
    assert args.runners == ["trt"] and args.load_outputs_paths == ["reference_outputs.json"]
    assert args.fp16 and args.precision_constraints == "obey"
    assert args.layer_precisions == [f"{n}:float32" for n in NODES + ["ns::op:1"]]
    assert [n.rpartition(":")[0] for n in args.layer_precisions][-1] == "ns::op:1"  # polygraphy's rpartition
    assert args.tactic_sources == ["JIT_CONVOLUTIONS"]
    assert args.load_inputs_paths == ["in puts.json"]
    # polygraphy's per-output syntax: one flag, the plain value and NAME:VALUE after it
    assert args.atol == ["0.001", "out:0.01"] and args.rtol == ["0.002"] and args.check_error_stat == ["median"]


@pytest.mark.filterwarnings("ignore:SelectableGroups:DeprecationWarning")
def test_polygraphy_verify_parses():
    options = EmitOptions(tolerance=Tolerance(atol=1e-2, rtol=1e-2), reference_outputs="ref.json")
    cmd = commands.polygraphy_verify("fixed.onnx", options)
    trt = _polygraphy_parse(cmd)
    assert trt.runners == ["trt"] and trt.strongly_typed
    assert trt.load_outputs_paths == ["ref.json"] and trt.load_inputs_paths == ["inputs.json"]
    assert trt.check_error_stat == ["elemwise"] and shlex.split(cmd)[2] == "fixed.onnx"


DYNAMIC = InputShape("x", (None, 3, None, None), (1, 3, 48, 96), (1, 3, 48, 192), (2, 3, 48, 320))
STATIC_RUN = InputShape("x", (None, 3, None, None), (1, 3, 48, 192), (1, 3, 48, 192), (1, 3, 48, 192))


@pytest.mark.filterwarnings("ignore:SelectableGroups:DeprecationWarning")
def test_dynamic_inputs_carry_their_shapes_in_every_tensorrt_command():
    fixed = InputShape("y", (1, 4), (1, 4), (1, 4), (1, 4))  # a static input gets no shape flag
    out = emit.emit_all("model.onnx", "fixed.onnx", NODES, EmitOptions(tolerance=TOL, shapes=[DYNAMIC, fixed]))
    for key in ("trtexec_trt10", "trtexec_trt11"):
        assert _arg(out[key], "--minShapes=") == "x:1x3x48x96" and _arg(out[key], "--maxShapes=") == "x:2x3x48x320"
        assert _arg(out[key], "--optShapes=") == "x:1x3x48x192" == _arg(out[key], "--shapes=")
    for key in ("polygraphy", "polygraphy_trt10"):
        args = _polygraphy_parse(out[key])
        assert args.trt_min_shapes == [["x:[1,3,48,96]"]] and args.trt_max_shapes == [["x:[2,3,48,320]"]], key
        assert args.trt_opt_shapes == [["x:[1,3,48,192]"]], key
    assert "--trt-min-shapes" in out["tensorrt_rtx_sh"] and "--minShapes=x:1x3x48x96" in out["trtexec_sh"]
    # one shape for every sample: --shapes alone (trtexec builds its profile from it)
    one = commands.trtexec_trt11("fixed.onnx", EmitOptions(shapes=[STATIC_RUN]))
    assert _arg(one, "--shapes=") == "x:1x3x48x192" and "--minShapes" not in one
    assert "--shapes" not in commands.trtexec_trt11("fixed.onnx", EmitOptions(shapes=[fixed]))
    # a name with ':' is quoted as trtexec's README says
    assert commands.trtexec_shape_args([InputShape("in:0", (None,), (2,), (2,), (2,))]) == ["--shapes='in:0':2"]


def test_trt11_check_reads_raw_files_and_says_how_it_differs():
    pairs = [commands.IOPair({"x": "io/s0.in0.bin"}, {"y": "io/s0.out0.bin"}, {"x": (1, 3, 48, 192)}),
             commands.IOPair({"x": "io/s1.in0.bin"}, {"y": "io/s1.out0.bin"}, {"x": (1, 3, 48, 192)}),
             commands.IOPair({"x": "io/s2.in0.bin"}, {"y": "io/s2.out0.bin"}, {"x": (1, 3, 48, 96)})]
    text = commands.trtexec_trt11_check(pairs, EmitOptions(tolerance=Tolerance(atol=1e-3, rtol=2e-3, output_atol=("y:0.01",))))
    comments = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert any("2x looser" in c for c in comments) and any("one --atol/--rtol for every output" in c for c in comments)
    first, second = [shlex.split(ln) for ln in text.splitlines() if not ln.startswith("#")]  # one command per shape
    assert first[:3] == ["trtexec", "--loadEngine=fixed.plan", "--shapes=x:1x3x48x192"]
    assert first[3:7] == ["--refPair=0", "--loadInputs=x:io/s0.in0.bin", "--loadRefOutputs=y:io/s0.out0.bin",
                          "--refPair=1"]
    assert {"--accuracyAlgorithm=l0", "--atol=0.001", "--rtol=0.002", "--accuracyThreshold=1e-12"} <= set(first)
    assert "--shapes=x:1x3x48x96" in second and not any(a.startswith("--refPair") for a in second)  # one pair: none


def test_ort_block_list_reads_the_list_and_says_why_fixed_onnx_is_better(tmp_path):
    text = emit.ort_block_list_command("model.onnx", "ort_node_block_list.json")
    comments, cmd = text.splitlines()[:-1], text.splitlines()[-1]
    assert all(c.startswith("#") for c in comments) and "fixed.onnx is the model to run" in comments[0]
    tokens = shlex.split(cmd)
    assert tokens[:2] == ["python3", "-c"]
    compile(tokens[2], "<cmd>", "exec")  # valid Python
    assert 'node_block_list=blocked' in tokens[2] and '"ort_node_block_list.json"' in tokens[2]
    assert emit.ort_block_list_command("m.onnx", "l.json", "bf16").startswith("#")


def test_autocast_patterns_match_exactly():
    names = ["/a/MatMul", "/a/Mul.1", "w(eird)+[x]"]
    cmd = emit.autocast_command("m.onnx", names, "bf16", inputs="inputs.json")
    tokens = shlex.split(cmd)
    assert tokens[:3] == ["python", "-m", "modelopt.onnx.autocast"]
    for flag, value in [("--onnx_path", "m.onnx"), ("--low_precision_type", "bf16"), ("--calibration_data", "inputs.json")]:
        assert tokens[tokens.index(flag) + 1] == value
    assert "--keep_io_types" in tokens and tokens[tokens.index("--data_max") + 1] == "inf"
    patterns = tokens[tokens.index("--nodes_to_exclude") + 1 :]
    assert len(patterns) == len(names)
    graph = names + ["/a/MatMul_1", "/a/Mul11", "x/a/MatMul"]
    for pat, name in zip(patterns, names):
        # AutoCast uses re.match: each pattern must select its node and nothing else
        assert [g for g in graph if re.match(pat, g)] == [name]
    assert "--nodes_to_exclude" not in emit.autocast_command("m.onnx", [])


def test_layer_precisions_file():
    text = commands.layer_precisions_file(NODES, EmitOptions("fp16"), from_build=True)
    lines = text.splitlines()
    assert lines[0].startswith("# precision-doctor")
    assert "TensorRT layer names" in text
    assert [ln for ln in lines if not ln.startswith("#")] == [f"{n}:fp32" for n in NODES]
    assert text.endswith("\n")


def test_emit_all_keys_and_layers():
    out = emit.emit_all(
        "model.onnx",
        "fixed.onnx",
        NODES,
        EmitOptions("fp16", tolerance=TOL, inputs="inputs.json"),
        layers=NODES + ["/blk3/Div_17"],
    )
    assert set(out) == {
        "trtexec_trt10",
        "trtexec_trt11",
        "polygraphy",
        "polygraphy_trt10",
        "polygraphy_ort_cuda",
        "autocast",
        "ort_node_block_list",
        "layer_precisions_txt",
        "trtexec_sh",
        "tensorrt_rtx_sh",
    }
    assert all(k in emit.LABELS for k in out if not k.endswith(("_txt", "_sh")))  # every command says its release
    assert all(isinstance(v, str) and v for v in out.values())
    assert "/blk3/Div_17:fp32" in _arg(out["trtexec_trt10"], "--layerPrecisions=")
    assert "Div_17" not in out["autocast"]  # AutoCast works on ONNX nodes, not layers
    assert out["polygraphy_ort_cuda"].startswith("polygraphy run fixed.onnx --onnxrt --providers cuda --load-inputs "
                                                 "inputs.json --load-outputs reference_outputs.json")


def test_script_is_valid_bash():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = commands.trtexec_script("/m/model.onnx", "fixed.onnx", NODES + WEIRD + ["a,b"], EmitOptions(avoid=["CUBLAS"]))
    assert script.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in script
    subprocess.run([bash, "-n"], input=script, text=True, check=True)


FAKE_TRTEXEC = """#!/usr/bin/env bash
if [[ "${1:-}" == "--version" ]]; then
  echo "&&&& RUNNING TensorRT.trtexec [TensorRT v${FAKE_TRT_V:-101401}] [b48] # trtexec --version"
  exit 0
fi
printf '%s\\n' "$@" > "$FAKE_LOG"
"""


@pytest.fixture
def fake_trtexec(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "trtexec"
    exe.write_text(FAKE_TRTEXEC)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "args.txt"

    def run(script_text: str, **env):
        path = tmp_path / "out" / "trtexec.sh"
        path.parent.mkdir(exist_ok=True)
        path.write_text(script_text)
        full = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(log), **env}
        res = subprocess.run(["bash", str(path)], env=full, capture_output=True, text=True, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        return log.read_text().splitlines(), res.stderr

    return run


def test_script_runs_trt10_weak(fake_trtexec):
    names = NODES + WEIRD
    script = commands.trtexec_script("/m/my model.onnx", "fixed.onnx", names, EmitOptions("fp16"), nodes=NODES)
    args, _ = fake_trtexec(script, TRT_MAJOR="10")
    assert args[:2] == ["--onnx=/m/my model.onnx", "--fp16"]
    assert "--layerPrecisions=" + ",".join(f"{n}:fp32" for n in names) in args
    assert "--noTF32" in args and "--precisionConstraints=obey" in args


def test_script_runs_trt11_and_detects_version(fake_trtexec):
    script = commands.trtexec_script("/m/model.onnx", "fixed.onnx", NODES, EmitOptions("fp16", avoid=["CUBLAS"]))
    args, _ = fake_trtexec(script, TRT_MAJOR="11")
    assert args == ["--onnx=fixed.onnx", "--noTF32", "--saveEngine=fixed.plan", "--timingCacheFile=timing.cache"]
    # no TRT_MAJOR: read from trtexec's banner (v110000 -> 11, v101401 -> 10, v8601 -> 8)
    assert fake_trtexec(script, FAKE_TRT_V="110000")[0][0] == "--onnx=fixed.onnx"
    assert fake_trtexec(script, FAKE_TRT_V="101401")[0][0] == "--onnx=/m/model.onnx"
    assert fake_trtexec(script, FAKE_TRT_V="8601")[0][0] == "--onnx=/m/model.onnx"


def test_script_trt10_strongly_typed_and_warnings(fake_trtexec):
    script = commands.trtexec_script("/m/model.onnx", "fixed.onnx", ["good", "a,b"], EmitOptions("bf16"))
    args, _ = fake_trtexec(script, TRT_MAJOR="10", PD_STRONGLY_TYPED="1")
    assert args[:3] == ["--onnx=fixed.onnx", "--stronglyTyped", "--noTF32"]
    args, err = fake_trtexec(script, TRT_MAJOR="10")
    assert "--bf16" in args and "--layerPrecisions=good:fp32" in args
    assert "cannot be passed" in err


_NO_KERNEL = "Range: no FP16/BF16 kernel in ONNX Runtime"
FORCED = {"/head/Range": _NO_KERNEL, "/head/Range_1": _NO_KERNEL}


def test_every_trtexec_line_that_builds_fp32_layers_says_no_tf32(fake_trtexec):
    script = commands.trtexec_script("/m/model.onnx", "fixed.onnx", NODES, EmitOptions("fp16"))
    for env in ({"TRT_MAJOR": "10"}, {"TRT_MAJOR": "10", "PD_STRONGLY_TYPED": "1"}, {"TRT_MAJOR": "11"}):
        assert "--noTF32" in fake_trtexec(script, **env)[0], env
    out = emit.emit_all("model.onnx", "fixed.onnx", NODES, EmitOptions(tolerance=TOL))
    for key in ("trtexec_trt10", "trtexec_trt11"):
        assert "--noTF32" in shlex.split(out[key]), key


def test_forced_fp32_nodes_are_listed_and_built_fp32(fake_trtexec):
    out = emit.emit_all("named.onnx", "fixed.onnx", NODES, EmitOptions(tolerance=TOL, forced=FORCED))
    # TensorRT 10 pins them too, so its engine holds what fixed.onnx holds; AutoCast excludes them too
    assert _arg(out["trtexec_trt10"], "--layerPrecisions=").split(",") == [f"{n}:fp32" for n in [*NODES, *FORCED]]
    tokens = shlex.split(out["autocast"])
    assert tokens[tokens.index("--nodes_to_exclude") + 1 :] == [emit.autocast_regex(n) for n in [*NODES, *FORCED]]
    # and every file says which nodes they are and why
    for key in ("layer_precisions_txt", "trtexec_sh", "tensorrt_rtx_sh"):
        assert "also keeps 2 nodes in FP32 beyond the answer" in out[key], key
        assert "#   /head/Range_1: Range: no FP16/BF16 kernel in ONNX Runtime" in out[key], key
    entries = [ln for ln in out["layer_precisions_txt"].splitlines() if not ln.startswith("#")]
    assert entries == [f"{n}:fp32" for n in [*NODES, *FORCED]]
    args, _ = fake_trtexec(out["trtexec_sh"], TRT_MAJOR="10")
    assert "--layerPrecisions=" + ",".join(f"{n}:fp32" for n in [*NODES, *FORCED]) in args
    assert "also keeps" not in emit.emit_all("m.onnx", "f.onnx", NODES, EmitOptions(tolerance=TOL))["trtexec_sh"]


def test_tensorrt_rtx_script_is_valid_bash():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = commands.tensorrt_rtx_script(
        "fixed model.onnx", EmitOptions(compute_capabilities=["8.6", "12.0"], avoid=["JIT_CONVOLUTIONS", "CUBLAS"]),
        input_shapes={"x": [1, 3]},
    )
    subprocess.run([bash, "-n"], input=script, text=True, check=True)
    line = next(ln for ln in script.splitlines() if ln.startswith("POLYGRAPHY_USE_TENSORRT_RTX=1 "))
    tokens = shlex.split(line.removeprefix("POLYGRAPHY_USE_TENSORRT_RTX=1 ").rstrip("\\"))
    assert tokens[:6] == ["polygraphy", "convert", "fixed model.onnx", "--convert-to", "trt", "--strongly-typed"]
    assert tokens[tokens.index("--tactic-sources") + 1] == "EDGE_MASK_CONVOLUTIONS"
    assert "--input-shapes" in tokens and "x:[1,3]" in tokens
    assert "default_ccs='8.6 12.0'" in script and 'PD_COMPUTE_CAPABILITIES:-$default_ccs' in script
    assert "clear_flag" in script  # polygraphy's TensorRT-RTX config leaves TF32 on


def test_polygraphy_files_are_written_without_importing_torch(tmp_path, monkeypatch):
    """Where torch is installed, polygraphy imports it to ask whether each array is a torch tensor (4-7 s on the GPU
    machine): inputs.json and reference_outputs.json are written with torch kept out, and polygraphy reads them back."""
    import sys

    import numpy as np
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    from precision_doctor.pipeline.artifacts import save_polygraphy_io
    from precision_doctor.runfiles import RunDir

    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Tensor: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    out = tmp_path / "run"
    out.mkdir()
    samples = [{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}]
    save_polygraphy_io(RunDir(out), samples, [{"y": np.ones(3, dtype=np.float32)}])
    assert not (tmp_path / "imported").exists() and "torch" not in sys.modules
    np.testing.assert_array_equal(load_json(str(out / "inputs.json"))[0]["x"], samples[0]["x"])
    results = RunResults.load(str(out / "reference_outputs.json"))
    np.testing.assert_array_equal(results[0][1][0]["y"], np.ones(3, dtype=np.float32))
