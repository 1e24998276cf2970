"""The first hour of a polygraphy/trtexec user (issue 22), scripted: a model with a dynamic batch, height and
width; inputs and reference outputs made by polygraphy itself; `diagnose` on them through the real command line;
then every command the report prints, run as printed from the report's directory: polygraphy's check of fixed.onnx
(on ONNX Runtime: no TensorRT here), the TensorRT 10 command's model and files, the re-run command, and the
TensorRT commands' shapes used to build the engine with TensorRT-RTX's builder (installed here, no GPU needed)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from precision_doctor import planted
from precision_doctor.results.report import Report

BIN = Path(sys.executable).parent
POLYGRAPHY = shutil.which("polygraphy", path=str(BIN))
PD = shutil.which("precision-doctor", path=str(BIN))
# polygraphy flags that only its TensorRT runner reads, with how many values each takes (None: until the next flag)
TRT_ONLY = {"--trt": 0, "--strongly-typed": 0, "--fp16": 0, "--bf16": 0, "--tf32": 0, "--precision-constraints": 1,
            "--layer-precisions": None, "--tactic-sources": None, "--trt-min-shapes": None, "--trt-opt-shapes": None,
            "--trt-max-shapes": None}

pytestmark = [pytest.mark.slow, pytest.mark.skipif(POLYGRAPHY is None or PD is None, reason="needs the venv's tools")]


def _run(args: list[str], cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    if ok:
        assert res.returncode == 0, f"{shlex.join(args)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def _on_onnxruntime(cmd: str) -> list[str]:
    """A printed polygraphy command with its TensorRT runner swapped for ONNX Runtime's (the same files, paths and
    tolerance flags)."""
    tokens, out, i = shlex.split(cmd), [], 0
    while i < len(tokens):
        t = tokens[i]
        if t in TRT_ONLY:
            n = TRT_ONLY[t]
            i += 1
            while i < len(tokens) and (n is None and not tokens[i].startswith("--") or n and n > 0):
                i, n = i + 1, (n - 1 if n else n)
            continue
        out.append(t)
        i += 1
    return [str(BIN / out[0]), *out[1:3], "--onnxrt", *out[3:]]


def _flag(cmd: str, name: str) -> str | None:
    hits = [t.split("=", 1)[1] for t in shlex.split(cmd) if t.startswith(f"{name}=")]
    return hits[0] if hits else None


def test_first_hour(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    onnx.save(planted.dynamic_image().model, str(work / "textline_cls.onnx"))
    # 1. what a polygraphy user has: inputs and FP32 outputs saved by polygraphy (shape given: the model is dynamic)
    _run([POLYGRAPHY, "run", "textline_cls.onnx", "--onnxrt", "--input-shapes", "x:[1,3,48,192]", "--iterations", "6",
          "--save-inputs", "in.json", "--save-outputs", "out.json"], work)
    # 2. diagnose with them, polygraphy's way of naming the reference (--load-outputs), per-output tolerance syntax
    res = _run([PD, "diagnose", "textline_cls.onnx", "--inputs", "in.json", "--load-outputs", "out.json",
                "--atol", "1e-3", "--rtol", "1e-3", "--out", "runs/first"], work)
    run = work / "runs" / "first"
    rep = Report.load(run)
    assert rep.passed and rep.fallback_nodes, res.stdout
    assert "WARNING" not in res.stdout  # 48x192 crops are real shapes
    assert [(s.name, s.opt) for s in rep.input_shapes] == [("x", (1, 3, 48, 192))]
    cmds = rep.commands
    # 3. every command labelled (emit prints the label above it), no two unlabelled builds of fixed.plan
    emitted = _run([PD, "emit", "."], run).stdout
    builds = [ln for ln in emitted.splitlines() if "--saveEngine=fixed.plan" in ln]
    assert len(builds) == 2 and emitted.count("# TensorRT 10.x") == 1 and emitted.count("# TensorRT 11, strongly") == 1
    assert "--onnx=model.onnx" in builds[0] and "--onnx=fixed.onnx" in builds[1]  # relative, from the run directory
    assert (run / "model.onnx").is_symlink() and (run / "model.onnx").resolve() == (work / "textline_cls.onnx").resolve()
    # 4. the shapes are in every TensorRT command (one shape for all samples: --shapes)
    for key in ("trtexec_trt10", "trtexec_trt11"):
        assert _flag(cmds[key], "--shapes") == "x:1x3x48x192", cmds[key]
    assert "x:[1,3,48,192]" in cmds["polygraphy"] and "--trt-opt-shapes" in cmds["polygraphy"]
    check = [ln for ln in cmds["trtexec_trt11_check"].splitlines() if ln.startswith("trtexec")][0]
    assert _flag(check, "--shapes") == "x:1x3x48x192" and "--loadRefOutputs=" in check
    for value in re.findall(r"--load(?:Inputs|RefOutputs)=\S+:(\S+)", check):
        assert (run / value).is_file(), value  # every raw file the check names is there
    # 5. the emitted polygraphy checks run as printed from the run directory (ONNX Runtime for the TensorRT runner)
    for key in ("polygraphy", "polygraphy_trt10"):
        res = _run(_on_onnxruntime(cmds[key]), run)
        assert "PASSED" in res.stdout + res.stderr, key
    # 6. the re-run command, as printed in the report, from the report's directory; then once more: a new --out
    md = (run / "report.md").read_text()
    again = md.split("To run this diagnosis again")[1].split("```bash")[1].split("```")[0].strip()
    assert again.startswith("precision-doctor diagnose ../../textline_cls.onnx --inputs ../../in.json")
    assert "--reference-outputs ../../out.json" in again and again.endswith("--out ../first-again")
    _run([str(BIN / "precision-doctor"), *shlex.split(again)[1:]], run)
    assert Report.load(work / "runs" / "first-again").fallback_nodes == rep.fallback_nodes
    # 7. the engine, built by TensorRT-RTX's builder from fixed.onnx with the shapes the commands carry
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX's libraries are not installed")
    from precision_doctor.backends.tensorrt.build import build_engine

    shape = [int(d) for d in _flag(cmds["trtexec_trt11"], "--shapes").split(":")[1].split("x")]
    built = build_engine(run / "fixed.onnx", tmp_path / "fixed.plan", compute_capabilities=["8.6"],
                         input_shapes={"x": shape})
    assert built.size_bytes > 0 and (tmp_path / "fixed.plan").is_file()


def test_a_range_of_shapes_gives_a_profile_that_builds(tmp_path):
    """Held-out samples of another width than the searched ones (the capture needs one shape; checks do not):
    min/opt/max in the commands, and TensorRT-RTX builds the engine over that range."""
    work = tmp_path
    onnx.save(planted.dynamic_image().model, str(work / "m.onnx"))
    for width, name in ((96, "a.json"), (192, "b.json")):
        _run([POLYGRAPHY, "run", "m.onnx", "--onnxrt", "--input-shapes", f"x:[1,3,48,{width}]", "--iterations", "3",
              "--save-inputs", name], work)
    _run([PD, "diagnose", "m.onnx", "--inputs", "a.json", "--validate-inputs", "b.json", "--atol", "1e-3", "--rtol",
          "1e-3", "--out", "r"], work)
    cmds = Report.load(work / "r").commands
    cmd = cmds["trtexec_trt11"]
    assert (_flag(cmd, "--minShapes"), _flag(cmd, "--maxShapes")) == ("x:1x3x48x96", "x:1x3x48x192")
    assert _flag(cmd, "--optShapes") == _flag(cmd, "--shapes") == "x:1x3x48x96"  # most samples
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX's libraries are not installed")
    from precision_doctor.backends.tensorrt.build import build_engine

    dims = [[int(d) for d in _flag(cmd, f).split(":")[1].split("x")] for f in ("--minShapes", "--optShapes", "--maxShapes")]
    built = build_engine(work / "r" / "fixed.onnx", tmp_path / "fixed.plan", compute_capabilities=["8.6"],
                         input_shapes={"x": tuple(dims)})
    assert built.size_bytes > 0


def test_flop_shares_of_a_dynamic_model_are_positive(tmp_path):
    """FLOPs come from the shapes that ran (graph/cost.py), not the declared dynamic ones (issue 23)."""
    onnx.save(planted.dynamic_image().model, str(tmp_path / "m.onnx"))
    _run([POLYGRAPHY, "run", "m.onnx", "--onnxrt", "--input-shapes", "x:[1,3,24,48]", "--iterations", "2",
          "--save-inputs", "in.json"], tmp_path)
    _run([PD, "diagnose", "m.onnx", "--inputs", "in.json", "--validation-split", "0", "--augment", "0",
          "--atol", "1e-2", "--rtol", "1e-2", "--out", "r"], tmp_path)
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["model"]["total_flops"] > 0 and 0 < data["fp32_flop_share"] <= 1
    assert all(layer["flops"] >= 0 for layer in data["layers"])
