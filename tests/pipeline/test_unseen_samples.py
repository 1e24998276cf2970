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
    assert line.startswith("error: --validate-inputs: 2 of its 2 samples are also among the search samples (")
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
    assert "search samples, 2 held out (2 repeated samples used once)" in " ".join((out + err).split())
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    samples = rep["search"]["samples"]
    assert samples["search"] + samples["validation"] == 8  # not 10
    assert rep["search"]["inputs"]["repeated"] == [[str(files[0]), str(files[0])], [str(twin), str(files[3])]]
    md = (tmp_path / "r" / "report.md").read_text()
    assert f"2 repeated samples of the search's used once ({files[0]} is given twice, ...)" in md


def test_the_digest_is_of_the_values():
    a = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.array(True)}
    assert sample_digest(a) == sample_digest({"m": np.array(True), "x": a["x"].copy()})
    assert sample_digest(a) != sample_digest({"x": a["x"].reshape(3, 2), "m": np.array(True)})
    assert sample_digest(a) != sample_digest({"x": a["x"].astype(np.float64), "m": np.array(True)})
    assert sample_digest(a) != sample_digest({"y": a["x"], "m": np.array(True)})


def test_references_too_few_for_repeated_samples_are_one_line(run_cli, planted_file, tmp_path):
    """--reference-outputs with one iteration per distinct sample while one of the --inputs files repeats another (6
    files, 5 iterations): the count is refused (exit 2) before the repeat is dropped, never an internal error."""
    from polygraphy.comparator import IterationResult, RunResults

    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.graph.model import load_model

    case, path, files = planted_file("three_defects", n=5)
    shutil.copy(files[0], tmp_path / "again.npz")
    with ReferenceRunner(load_model(str(path))) as runner:
        refs = [runner.run(dict(np.load(f))) for f in files]
    results = RunResults()
    results.append(("ref", [IterationResult(dict(r), runner_name="ref") for r in refs]))
    results.save(str(tmp_path / "refs.json"))
    code, _, err = run_cli("diagnose", path, *_args([*files, tmp_path / "again.npz"], "--validation-split", "0",
                                                    "--reference-outputs", tmp_path / "refs.json", "--out", tmp_path / "r"))
    assert code == 2 and "Traceback" not in err and "internal error" not in err
    assert "refs.json" in err and "holds 5 iterations but --inputs give 6 samples" in err


def test_a_held_out_sample_given_twice_counts_once(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("three_defects", n=6)
    held = tmp_path / "held"
    held.mkdir()
    for i, s in enumerate(case.samples(3, seed=7)):
        np.savez(held / f"h{i}.npz", **s)
    shutil.copy(held / "h0.npz", held / "h9.npz")
    code, _, err = run_cli("diagnose", path, *_args(files, "--validate-inputs", held, "--out", tmp_path / "r"))
    assert code in (0, 1), err
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["search"]["samples"]["validation"] == 3 and rep["search"]["inputs"]["held_repeated"] == 1
    assert "1 repeated held-out sample used once" in (tmp_path / "r" / "report.md").read_text()
