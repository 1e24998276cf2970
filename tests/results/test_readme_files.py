"""README.md's table of the run directory lists every file a run writes (`results/rundir.RUN_OUTPUTS`, the list a
real run is checked against), and the report describes each file a run left (`render/files.py`: the job page's
artifact table reads the same)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx

from precision_doctor import api, planted
from precision_doctor.render.files import ARTIFACT_TITLES, OTHER_FILES, files
from precision_doctor.results.rundir import BOOKKEEPING, RUN_OUTPUTS
from precision_doctor.spec import RunSpec

README = Path(__file__).resolve().parents[2] / "README.md"
# files only some runs write, described through their report.json artifact (render/files.ARTIFACT_TITLES)
BY_ARTIFACT = {"fixed.plan": "engine", "knobs": "knob_checkpoints", "named.onnx": "named_onnx"}


def readme_files() -> set[str]:
    """The file names of the README's run-directory table (its first column; folders without their slash)."""
    table = README.read_text(encoding="utf-8").split("What the run directory holds")[1].split("\n\n")[1]
    rows = table.splitlines()[2:]
    assert rows and all(r.startswith("| ") for r in rows), table
    return {name.rstrip("/") for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])}


def test_the_readme_lists_every_file_a_run_writes():
    public = {n for n in RUN_OUTPUTS if not n.startswith(".")}  # not the temporaries a write renames into place
    assert readme_files() == public


def test_every_file_a_run_leaves_is_in_the_readme_and_described_by_the_report(tmp_path):
    case = planted.three_defects()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    inputs = []
    for i, sample in enumerate(case.samples(3, seed=0)):
        inputs.append(str(tmp_path / f"s{i}.npz"))
        np.savez(inputs[-1], **sample)
    spec = RunSpec(model=str(tmp_path / "m.onnx")).with_settings(
        {"inputs.files": inputs, "tolerance.atol": case.atol, "tolerance.rtol": case.rtol, "search.augment": 0})
    report = api.diagnose(spec, tmp_path / "run")
    left = {p.name for p in (tmp_path / "run").iterdir()} - set(BOOKKEEPING)
    assert left and left <= readme_files(), left - readme_files()
    described = {name.rstrip("/") for name in files(report)}
    assert left <= described, left - described
    for name in {n for n in RUN_OUTPUTS if not n.startswith(".")} - described:  # what this run did not write
        assert name in OTHER_FILES or f"{name}/" in OTHER_FILES or ARTIFACT_TITLES.get(BY_ARTIFACT.get(name, "")), name
