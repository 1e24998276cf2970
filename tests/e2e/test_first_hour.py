"""The first hour of a polygraphy/trtexec user (issue 22), scripted: a model with a dynamic batch, height and
width; inputs and reference outputs made by polygraphy itself; `diagnose` on them through the real command line;
then every command the report prints, run as printed from the report's directory: polygraphy's check of fixed.onnx
(on ONNX Runtime: no TensorRT here), the TensorRT 10 command's model and files, the re-run command, and the
TensorRT commands' shapes used to build the engine with TensorRT-RTX's builder (installed here, no GPU needed).
Issue 34 adds: the README's first example as written, with real samples (a folder of them, a loader script of
images); the daemon's jobs as a newcomer follows them (one that ended before `wait`, an incomplete one whose next
step is run as its report prints it); layers.csv's FLOPs of a dynamic model."""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest

from precision_doctor import planted
from precision_doctor.results.report import Report

ROOT = Path(__file__).resolve().parents[2]
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
    assert rep.passed and rep.answer.fallback_nodes, res.stdout
    assert "WARNING" not in res.stdout  # 48x192 crops are real shapes
    assert [(s.name, s.opt) for s in rep.search.input_shapes] == [("x", (1, 3, 48, 192))]
    cmds = rep.answer.commands
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
    assert Report.load(work / "runs" / "first-again").answer.fallback_nodes == rep.answer.fallback_nodes
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
    cmds = Report.load(work / "r").answer.commands
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
    assert data["model"]["total_flops"] > 0 and 0 < data["answer"]["fp32_flop_share"] <= 1
    assert all(layer["flops"] >= 0 for layer in data["analysis"]["layers"])
    with open(tmp_path / "r" / "layers.csv", newline="") as f:  # written before the cost model ran: all 0 there
        table = {row["name"]: int(row["flops"]) for row in csv.DictReader(f)}
    assert table == {layer["name"]: layer["flops"] for layer in data["analysis"]["layers"]} and table["conv"] > 0


def _readme_example() -> tuple[list[str], str]:
    """The README's first example: its command lines (those of its bash blocks, in order) and its loader script."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Run it on your model")[1].split("\n## ")[0]
    lines = [ln.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)
             for ln in block.splitlines() if ln.strip()]
    (script,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return lines, script


def test_the_readmes_first_example_with_real_samples(tmp_path):
    """The README's first example, run as written: a folder of the user's samples, then a loader script that reads
    the user's images (PNG crops), each diagnosed; the report opened; every command family emitted."""
    from PIL import Image

    lines, script = _readme_example()
    assert any("--inputs calib/" in ln for ln in lines) and any("--data-loader-script load.py" in ln for ln in lines)
    case = planted.dynamic_image()
    onnx.save(case.model, str(tmp_path / "model.onnx"))
    (tmp_path / "calib").mkdir()
    (tmp_path / "crops").mkdir()
    for i, sample in enumerate(case.samples(10, seed=1)):  # "real" for this model: the crops it is made for
        np.savez(tmp_path / "calib" / f"crop{i:02d}.npz", **sample)
        pixels = (sample["x"][0].transpose(1, 2, 0) * 255).astype(np.uint8)
        Image.fromarray(pixels).resize((200, 50)).save(tmp_path / "crops" / f"crop{i:02d}.png")
    (tmp_path / "load.py").write_text(script)
    for line in lines:
        if line.startswith("xdg-open "):
            assert (tmp_path / line.split()[1]).is_file(), line
            continue
        cwd = tmp_path
        if line.startswith("cd "):
            where, line = line[3:].split(" && ", 1)
            cwd = tmp_path / where
        args = shlex.split(line)
        assert args[0] == "precision-doctor", line
        res = _run([PD, *args[1:]], cwd)
        if args[1] == "emit":
            labels = [ln for ln in res.stdout.splitlines() if ln.startswith("# ") and not ln.startswith("# trtexec's")]
            for family in ("TensorRT 10.x", "TensorRT 11, strongly", "polygraphy on TensorRT 11", "ModelOpt AutoCast",
                           "ONNX Runtime"):
                assert any(ln.startswith(f"# {family}") for ln in labels), (family, labels)
    for run in ("run1", "run2"):
        rep = Report.load(tmp_path / run)
        assert rep.passed and rep.promise.validation is not None and rep.promise.validation.samples == 2, run
        # 10 samples: 2 held out
        assert "WARNING" not in (tmp_path / run / "report.md").read_text()  # real shapes, no placeholder warning


def test_a_newcomers_service_jobs(tmp_path):
    """The daemon as a newcomer follows it: `wait` on a job that had already ended prints its final state line and its
    warning once (it printed nothing); an INCOMPLETE (budget exhausted) job's next step, as its report prints it,
    continues it to an answer (it said `wait ID  # the service resumes its jobs itself`, which exits 1 at once)."""
    from service_helpers import Daemon, planted_job_files

    from precision_doctor.cli.shared import PROGRESS_LINE

    model, samples, _ = planted_job_files(tmp_path / "mine")
    uploads = [a for f in samples for a in ("--inputs", f)]
    d = Daemon(tmp_path / "state", workers=1).start()
    try:
        ended = d.cli("submit", model, *uploads, "--atol", "1e-2", "--rtol", "1e-2").stdout.split()[-1]
        d.wait_for(ended, lambda j: j["state"] == "done", what="its end")
        waited = d.cli("wait", ended)
        assert waited.returncode == 0 and f"job {ended} (three_defects): done: " in waited.stdout, waited.stderr
        assert [ln for ln in waited.stderr.splitlines() if PROGRESS_LINE.match(ln) and f"job {ended}: done" in ln]

        cut = d.cli("submit", model, *uploads, "--max-evaluations", "3").stdout.split()[-1]  # polygraphy's 1e-5: a warning
        first = d.cli("wait", cut)
        assert first.returncode == 1 and "INCOMPLETE (budget exhausted)" in first.stdout, first.stdout + first.stderr
        assert len([ln for ln in first.stderr.splitlines() if ln.startswith("warning:")]) == 1
        md = httpx.get(f"{d.url}/jobs/{cut}/artifacts/report.md", timeout=10).text
        step = md.split("Continue it where it stopped")[1].split("```bash")[1].split("```")[0].strip()
        again = d.cli(*shlex.split(step)[1:])
        assert again.returncode == 0, again.stderr
        new = again.stdout.split()[-1]
        last = d.cli("wait", new)
        assert last.returncode in (0, 1) and "INCOMPLETE" not in last.stdout, last.stdout + last.stderr
        report = httpx.get(f"{d.url}/jobs/{new}/artifacts/report.json", timeout=10).json()
        assert report["status"] != "budget_exhausted" and report["search"]["evaluations"] > 3
    finally:
        d.stop()
