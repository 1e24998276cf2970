"""Held-out samples must be unseen: --validate-inputs samples with the contents of search samples are refused (a copied
folder would validate nothing), and a sample given twice in --inputs is used once (else the default split could hold
one copy out while the search sees the other)."""

from __future__ import annotations

import json
import shutil

import numpy as np

from precision_doctor.data.inputs import sample_digest


def _args(files, *more) -> list[str]:
    return [a for f in files for a in ("--inputs", f)] + ["--atol", "1e-2", "--rtol", "1e-2", *more]


def test_validation_samples_that_the_search_sees_are_refused(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("three_defects", n=6)
    copies = tmp_path / "copies"
    copies.mkdir()
    for f in files[:2]:
        shutil.copy(f, copies / f"copy_{f.name}")  # other names, the same values
    code, out, err = run_cli("diagnose", path, *_args(files, "--validate-inputs", copies, "--out", tmp_path / "r"))
    assert code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: --validate-inputs: 2 of its 2 samples are also among the --inputs samples (")
    assert "copy_three_defects_0.npz holds the same values as" in line and "three_defects_0.npz)" in line
    assert not (tmp_path / "r").exists()
    held = tmp_path / "held"  # unseen ones pass the check
    held.mkdir()
    for i, s in enumerate(case.samples(2, seed=7)):
        np.savez(held / f"h{i}.npz", **s)
    code, _, err = run_cli("diagnose", path, *_args(files, "--validate-inputs", held, "--out", tmp_path / "ok"))
    assert code in (0, 1) and json.loads((tmp_path / "ok" / "report.json").read_text())["search"]["samples"] == \
        {"search": 6, "validation": 2}


def test_a_sample_given_twice_is_used_once_and_the_report_says_so(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("three_defects", n=8)
    twin = tmp_path / "twin.npz"
    shutil.copy(files[3], twin)
    code, out, err = run_cli("diagnose", path, *_args([*files, files[0], twin], "--out", tmp_path / "r"))
    assert code in (0, 1), err
    assert "search samples, 2 held out (2 samples given twice, used once)" in " ".join((out + err).split())
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    samples = rep["search"]["samples"]
    assert samples["search"] + samples["validation"] == 8  # not 10
    assert rep["search"]["inputs"]["repeated"] == [[str(files[0]), str(files[0])], [str(twin), str(files[3])]]
    md = (tmp_path / "r" / "report.md").read_text()
    assert f"2 samples given twice, used once ({files[0]} holds the same values as {files[0]}, ...)" in md


def test_the_digest_is_of_the_values():
    a = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.array(True)}
    assert sample_digest(a) == sample_digest({"m": np.array(True), "x": a["x"].copy()})
    assert sample_digest(a) != sample_digest({"x": a["x"].reshape(3, 2), "m": np.array(True)})
    assert sample_digest(a) != sample_digest({"x": a["x"].astype(np.float64), "m": np.array(True)})
    assert sample_digest(a) != sample_digest({"y": a["x"], "m": np.array(True)})
