"""Run directories under concurrency and failure (issue #11): the run lock (other processes, stale locks,
file systems without flock), the manifest behind --force, removing a directory a failed run created."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from precision_doctor import manifest
from precision_doctor.errors import SpecError
from precision_doctor.results import runlock
from precision_doctor.results.rundir import open_run_dir, prepare_run_dir
from precision_doctor.results.runlock import LOCK, LockOwner, RunDirLocked, RunLock, lock_owner
from precision_doctor.runfiles import RunDir

HOLD = """
import sys, time
from precision_doctor.results.runlock import RunLock
lock = RunLock(sys.argv[1], command="holder").acquire()
print("held", flush=True)
time.sleep(60)
"""


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def _stale_lock(run_dir, pid: int) -> None:
    import socket

    (run_dir / LOCK).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": "old run",
                                            "started": "2026-01-01T00:00:00"}))


def test_a_second_run_is_refused_naming_the_owner_and_gets_it_once_released(tmp_path):
    with RunLock(tmp_path, command="precision-doctor diagnose m.onnx"):
        with pytest.raises(RunDirLocked) as exc:
            RunLock(tmp_path).acquire()
        assert exc.value.owner.pid == os.getpid()
        assert f"process {os.getpid()}" in str(exc.value) and "precision-doctor diagnose m.onnx" in str(exc.value)
        assert lock_owner(tmp_path).command == "precision-doctor diagnose m.onnx"
    assert not (tmp_path / LOCK).exists() and lock_owner(tmp_path) is None
    with RunLock(tmp_path) as again:
        assert again.took_over is None


def test_the_lock_of_another_process_holds_until_it_dies_then_is_taken_over(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(RunDirLocked, match=f"process {proc.pid} on .*holder"):
            RunLock(tmp_path).acquire()
        proc.send_signal(signal.SIGKILL)  # a killed run leaves its lock file behind
        proc.wait()
        assert (tmp_path / LOCK).exists()
        with RunLock(tmp_path) as lock:
            assert lock.took_over is not None and lock.took_over.pid == proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("flock", [True, False], ids=["flock", "no-flock"])
def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, monkeypatch, flock):
    if not flock:  # a file system without flock: O_EXCL create, and the owner's pid checked
        monkeypatch.setattr(runlock, "_flock", lambda fd: None)
    pid = _dead_pid()
    _stale_lock(tmp_path, pid)
    with RunLock(tmp_path) as lock:
        assert lock.took_over is not None and lock.took_over.pid == pid
        assert runlock.read_owner(tmp_path).pid == os.getpid()
        if not flock:  # and a second run is still refused while this one lives
            with pytest.raises(RunDirLocked, match=f"process {os.getpid()}"):
                RunLock(tmp_path).acquire()


def test_without_flock_a_live_owner_is_not_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(runlock, "_flock", lambda fd: None)
    _stale_lock(tmp_path, os.getppid())  # alive
    with pytest.raises(RunDirLocked, match=f"process {os.getppid()}"):
        RunLock(tmp_path).acquire()
    assert LockOwner(os.getppid(), runlock.socket.gethostname(), "x", "y").alive()


def test_manifest_lists_what_is_written_and_refuses_what_is_not_ours(tmp_path):
    from precision_doctor.jsonio import write_json

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "report.md").write_text("# mine")
    manifest.start(tmp_path)
    write_json(tmp_path / "report.json", {"a": 1}, writer=RunDir(tmp_path))
    assert manifest.listed(tmp_path) == {"report.json"}
    with pytest.raises(manifest.NotOurs, match="report.md was not written by precision-doctor"):
        RunDir(tmp_path).written(tmp_path / "report.md")
    assert manifest.remove_ours(tmp_path) == ["report.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([manifest.MANIFEST, "notes.txt", "report.md"])


def test_a_run_directory_writer_records_only_in_its_own_directory(tmp_path):
    """RunDir.written: nothing where the directory has no manifest (a user's folder), a subfolder's file as
    "sub/name", a path outside the directory refused (a writer handed the wrong RunDir is a bug, not a silent
    unrecorded write)."""
    run = RunDir(tmp_path)
    run.written(tmp_path / "a.json")
    assert manifest.listed(tmp_path) is None
    manifest.start(tmp_path)
    run.written(tmp_path / "a.json")
    run.written(tmp_path / "knobs" / "b.jsonl")
    assert manifest.listed(tmp_path) == {"a.json", "knobs/b.jsonl"}
    with pytest.raises(ValueError, match="is not in the run directory"):
        run.written(tmp_path.parent / "elsewhere.json")
    with pytest.raises(ValueError, match="is not in the run directory"):
        run.written(tmp_path / "a" / "b" / "deep.json")


def test_force_refuses_user_files_and_the_model_dir_and_replaces_only_ours(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").write_text("# mine")
    with pytest.raises(SpecError, match="holds report.md, which precision-doctor did not write"):
        prepare_run_dir(run, force=True)
    (run / "report.md").unlink()
    (run / "notes.txt").write_text("mine")
    (run / "m.onnx").write_bytes(b"model")
    with pytest.raises(SpecError, match="holds the model"):
        prepare_run_dir(run, force=True, protect=[str(run / "m.onnx")])
    (run / "m.onnx").unlink()
    (run / "data").mkdir()
    with pytest.raises(SpecError, match=r"is the input folder .*data: a run writes its files there"):
        prepare_run_dir(run / "data", force=True, protect=[str(run / "data")])
    (run / "data").rmdir()
    prepare_run_dir(run, force=True)
    from precision_doctor.jsonio import write_json

    write_json(run / "report.json", {}, writer=RunDir(run))
    prepare_run_dir(run, force=True)  # an earlier run of ours: its files go, the user's stay
    assert not (run / "report.json").exists() and (run / "notes.txt").read_text() == "mine"


def test_a_failed_run_removes_the_directory_it_created_and_only_that(tmp_path):
    from precision_doctor.jsonio import write_json

    with pytest.raises(RuntimeError), open_run_dir(tmp_path / "new") as out:
        write_json(out / "layers.json", {}, writer=RunDir(out))
        raise RuntimeError("boom")
    assert not (tmp_path / "new").exists()
    (tmp_path / "old").mkdir()
    with pytest.raises(RuntimeError), open_run_dir(tmp_path / "old") as out:
        raise RuntimeError("boom")
    assert (tmp_path / "old").is_dir() and not (tmp_path / "old" / LOCK).exists()
    # what a resume can continue stays
    with pytest.raises(KeyboardInterrupt), open_run_dir(tmp_path / "resumable") as out:
        write_json(out / "run_settings.json", {}, writer=RunDir(out))
        write_json(out / "search.jsonl", {}, writer=RunDir(out))
        raise KeyboardInterrupt
    assert (tmp_path / "resumable" / "search.jsonl").is_file()


def test_a_directory_in_use_is_refused_before_anything_else(tmp_path):
    (tmp_path / "r").mkdir()
    with RunLock(tmp_path / "r", command="other"):
        with pytest.raises(RunDirLocked, match="other"):  # at once: a wait for the lock would never end here
            prepare_run_dir(tmp_path / "r", force=True)


def test_every_file_a_run_writes_is_known_and_in_its_manifest(tmp_path):
    """RUN_OUTPUTS (what --force checks) and the manifest (what it removes) cover a real run's files: a
    confirmation (confirm.jsonl) of a model whose nodes the tool had to name (named.onnx)."""
    import onnx

    from precision_doctor import api, planted
    from precision_doctor.results.rundir import BOOKKEEPING, RUN_OUTPUTS
    from precision_doctor.spec import RunSpec

    case = planted.cancellation()
    model = case.model
    for node in model.graph.node:
        node.name = ""
    onnx.save(model, str(tmp_path / "m.onnx"))
    spec = RunSpec.from_json({"model": str(tmp_path / "m.onnx"), "inputs": {"samples": 3},
                              "tolerance": {"atol": case.atol, "rtol": case.rtol},
                              "backends": {"confirm_backend": "ort-cpu"}})
    report = api.diagnose(spec, tmp_path / "r")
    assert report.passed
    written = {p.name for p in (tmp_path / "r").iterdir()} - set(BOOKKEEPING)
    assert {"named.onnx", "confirm.jsonl", "fixed.onnx", "report.html"} <= written
    assert written <= set(RUN_OUTPUTS), written - set(RUN_OUTPUTS)
    listed = manifest.listed(tmp_path / "r")
    folders = {m.split("/", 1)[0] for m in listed if "/" in m}  # trtexec_io/: listed by its files
    assert "trtexec_io" in folders and written <= listed | folders
    assert not (tmp_path / "r" / LOCK).exists()


def test_files_in_a_subfolder_of_the_run_are_listed_and_removed_with_it(tmp_path):
    from precision_doctor.results.rundir import not_ours

    manifest.start(tmp_path)
    (tmp_path / "knobs").mkdir()
    RunDir(tmp_path).written(tmp_path / "knobs" / "a.jsonl")
    (tmp_path / "knobs" / "a.jsonl").write_text("{}\n")
    assert manifest.listed(tmp_path) == {"knobs/a.jsonl"} and manifest.ours(tmp_path / "knobs" / "a.jsonl")
    assert not_ours(tmp_path) == []
    manifest.remove_ours(tmp_path)
    assert not (tmp_path / "knobs").exists()
