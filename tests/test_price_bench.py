"""bench/price.py's GPU part on ORT's CPU provider (plumbing: the lead runs it on an H100), on a planted case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_part_runs_on_cpu(tmp_path):
    sets = tmp_path / "sets.json"
    sets.write_text(json.dumps({"models": {"three_defects": {
        "pd": ["double", "scale_down", "exp", "sum", "normalize", "add_offset", "sub_offset"], "converter": [],
        "autocast": ["exp"]}}}))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "price.py"), "--gpu", "--device", "cpu", "--sets", str(sets),
                          "--out", str(out), "--runs", "2", "--batches", "1,4"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["price_gpu.json", "price_gpu.md"]
    data = json.loads((out / "price_gpu.json").read_text())
    (model,) = data["models"]
    tools = model["tools"]
    assert tools["pd"]["holds"] and tools["pd"]["unseen"] == 6  # ORT CPU computes FP16 nodes in FP32: plumbing only
    assert set(model["batches"]) == {"1", "4"}
    for row in model["batches"].values():
        assert row["fp32_ms"] > 0 and set(row["tools"]) == {"pd", "converter", "autocast"}
    assert "latency kept" in (out / "price_gpu.md").read_text()
