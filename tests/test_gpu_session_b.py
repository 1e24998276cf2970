"""bench/gpu_session_b.py end to end on ORT's CPU provider (plumbing: the GPU session B script the lead
runs on the H100), on a one-model zoo of a planted case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from precision_doctor import planted

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_session_b_pipeline_runs_on_cpu(tmp_path):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    case = planted.three_defects()
    onnx.save(case.model, str(zoo / "three_defects.onnx"))
    (zoo / "three_defects.json").write_text(json.dumps({
        "inputs": {"samples": 2, "seed": 0, "val_range": ["x:[1,2]"]},
        "tolerance": {"atol": case.atol, "rtol": case.rtol}, "max_evaluations": 80,
    }))
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "gpu_session_b.py", "--zoo", str(zoo), "--cpu", "--jobs", "1", "--unseen", "2",
         "--out", str(out), "--batch-dir", str(tmp_path / "batch")],
        cwd=ROOT / "bench", capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads((out / "pipeline.json").read_text())
    m = result["models"]["zoo:three_defects"]
    assert "error" not in m, m.get("error")
    a = m["answer"]
    assert a["passed"] and a["certified_by"]["backend"] == "emulate"  # ort-cpu, standing in for the GPU, only checks
    assert a["emulation_rules"] == "ort-cuda" and a["evaluations_gpu"] >= 1
    assert set(m["check"]) == {"searched", "held-out", "unseen"} and m["check"]["unseen"]["samples"] == 2
    assert {"real", "emulated ort-cuda", "emulated standard"} <= set(m["check"]["searched"])
    assert len(m["timing"]["gated_eval_s"]) == 3 and m["timing"]["session_eval_median_s"] > 0
    answers = json.loads((out / "answers.json").read_text())
    assert answers["zoo:three_defects"]["default answer"] == sorted(a["fallback_nodes"])
    assert "| zoo:three_defects |" in (out / "pipeline.md").read_text()
    assert (out / "batch.log").read_text().startswith("$ ")
