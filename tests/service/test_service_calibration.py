"""The daemon takes calibration data as users keep it (issue 20): a directory or a glob under an --allow-root
(expanded and each file pinned at submission, nothing outside the roots listed), and a data loader script only
when the daemon was started with --allow-loader-scripts (pinned, then run by the worker)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from service_helpers import planted_job_files

from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.jobs import create_job
from precision_doctor.service.store import Store
from precision_doctor.service.uploads import Refused, Submission
from precision_doctor.service.workers import run_claimed_job


@pytest.fixture
def daemon_state(tmp_path):
    state = StateDir(tmp_path / "state")
    state.root.mkdir()
    root = tmp_path / "root"
    model, samples, settings = planted_job_files(root / "case", n=4)
    return state, Store(state.db), root, model, samples, settings


def _submit(state, store, root, model, settings, inputs: dict, loader_scripts: bool = False):
    config = ServiceConfig(state_dir=state.root, allow_roots=[root], loader_scripts=loader_scripts)
    return create_job(Submission("job", {**settings, "inputs": inputs}, model_path=str(model)), config, state, store)


def test_a_directory_and_a_glob_under_a_root_are_pinned_file_by_file(daemon_state, tmp_path):
    state, store, root, model, samples, settings = daemon_state
    (root / "case" / "notes.txt").write_text("not a sample")
    outside = tmp_path / "outside"
    outside.mkdir()
    np.savez(outside / "secret.npz", x=np.zeros(1))
    os.symlink(outside / "secret.npz", root / "case" / "zz_link.npz")  # inside by name, outside in fact
    job = _submit(state, store, root, model, settings, {"files": [str(root / "case")]})
    pinned = [Path(p) for p in job.spec["inputs"]["files"]]
    assert [p.name.split("-", 1)[1] for p in pinned] == [s.name for s in samples]  # sorted, the link left out
    assert all(p.is_relative_to(state.inputs_dir(job.id)) and p.is_file() for p in pinned)
    job = _submit(state, store, root, model, settings, {"files": [str(root / "case" / "*_[13].npz")]})
    assert [Path(p).name.split("-", 1)[1] for p in job.spec["inputs"]["files"]] == [samples[1].name, samples[3].name]
    with pytest.raises(Refused) as info:  # a glob outside the roots
        _submit(state, store, root, model, settings, {"files": [str(outside / "*.npz")]})
    assert info.value.status_code == 403 and "is not a file this server may read" in info.value.detail
    with pytest.raises(Refused) as info:  # a glob with '..' is refused as it is (issue 32), wherever it leads
        _submit(state, store, root, model, settings, {"files": [str(root / ".." / "outside" / "*.npz")]})
    assert info.value.status_code == 422 and "may not hold '..'" in info.value.detail
    with pytest.raises(Refused) as info:  # no file: the answer a missing or forbidden file gets
        _submit(state, store, root, model, settings, {"files": [str(root / "case" / "*.h5")]})
    assert info.value.status_code == 403 and "is not a file this server may read" in info.value.detail
    with pytest.raises(Refused) as info:
        _submit(state, store, root, model, settings, {"files": ["x:[1,16]"]})
    assert info.value.status_code == 422 and "looks like a shape" in info.value.detail


LOADER = """
import numpy as np

def calib():
    rng = np.random.default_rng(0)
    for _ in range(4):
        yield {"x": rng.standard_normal((4, 16)).astype(np.float32)}
"""


def test_a_loader_script_runs_only_where_the_daemon_allows_scripts(daemon_state):
    state, store, root, model, samples, settings = daemon_state
    model, _, settings = planted_job_files(root / "soft", name="softmax_no_max", n=1)
    script = root / "soft" / "loader.py"
    script.write_text(LOADER)
    inputs = {"data_loader_script": f"{script}:calib"}
    with pytest.raises(Refused) as info:
        _submit(state, store, root, model, settings, inputs)
    assert info.value.status_code == 403 and "--allow-loader-scripts" in info.value.detail
    assert info.value.setting == "inputs.data_loader_script" and not list((state.root / "jobs").glob("*"))
    job = _submit(state, store, root, model, settings, inputs, loader_scripts=True)
    pinned, func = job.spec["inputs"]["data_loader_script"].rsplit(":", 1)
    assert func == "calib" and Path(pinned).is_relative_to(state.inputs_dir(job.id))
    (root / "soft" / "new.py").write_text("raise SystemExit('replaced after the submission')\n")
    os.replace(root / "soft" / "new.py", script)  # swapped after the submission: the pinned file is what runs
    claimed = store.claim("w", os.getpid(), 60.0)
    assert run_claimed_job(state.root, claimed.id, claimed.token, claimed.spec, worker="w") == "done"
    report = json.loads((state.run_dir(job.id) / "report.json").read_text())
    assert report["search"]["samples"]["search"] + report["search"]["samples"]["validation"] == 4
    assert (state.run_dir(job.id) / "loader_samples.h5").is_file()


def test_a_model_or_sample_the_job_cannot_run_is_refused_at_submission(daemon_state):
    """`diagnose` refuses a damaged model and a sample naming no model input at once (exit 2); the daemon did queue
    them and the job failed later, naming its own copies. They are refused at submission (422), naming the files as
    the submitter named them, and nothing of the job is left behind."""
    state, store, root, model, samples, settings = daemon_state
    bad = root / "case" / "damaged.onnx"
    bad.write_bytes(b"not a protobuf at all" * 10)
    with pytest.raises(Refused) as info:
        _submit(state, store, root, bad, settings, {"files": [str(s) for s in samples]})
    assert info.value.status_code == 422 and f"model_path: {bad} is not an ONNX model" in info.value.detail
    wrong = root / "case" / "wrong.npz"
    np.savez(wrong, image=np.zeros((1, 16), np.float32))
    with pytest.raises(Refused) as info:
        _submit(state, store, root, model, settings, {"files": [str(samples[0]), str(wrong)]})
    assert info.value.status_code == 422 and info.value.setting == "inputs.files"
    assert f"inputs.files file {wrong}: unknown input 'image'; model inputs are: " in info.value.detail
    assert store.list() == [] and not any(state.root.glob("jobs/*"))
    assert _submit(state, store, root, model, settings, {"files": [str(s) for s in samples]}).id  # the good ones go
