"""The daemon's retention (`serve --keep-jobs N`, `--keep-days D`, service/retention.py): finished jobs' files
removed beyond the bounds, never a queued or running job's nor one whose directory lock is held; the rows stay
with a note; `/healthz` says what the state directory holds. And an older job store gains the note's column."""

from __future__ import annotations

import fcntl
import json
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from service_helpers import Daemon, planted_job_files

from precision_doctor.outcome import JobState
from precision_doctor.service.config import StateDir
from precision_doctor.service.retention import Retention, prune, storage
from precision_doctor.service.schema import Result
from precision_doctor.service.store import Store, view


def _job(store: Store, state: StateDir, end: str | None, finished_days_ago: float = 0.0, size: int = 1000) -> str:
    """A job with `size` bytes in its run directory and 10 in its uploads, left queued (`end` None), running
    ("running") or finished in state `end`, `finished_days_ago` days ago."""
    job = store.create("m", {"model": "m.onnx"})
    for where, n in ((state.run_dir(job.id), size), (state.inputs_dir(job.id), 10)):
        where.mkdir(parents=True)
        (where / "f.bin").write_bytes(b"x" * n)
    (state.job_dir(job.id) / "runs.log").write_text("{}\n")
    if end is None:
        return job.id
    claimed = store.claim("w", 1, 60.0)
    assert claimed is not None and claimed.id == job.id
    if end != "running":
        assert store.finish(job.id, claimed.token, end, Result("complete", True, 1), None)
        with sqlite3.connect(state.db) as con:
            con.execute("UPDATE jobs SET finished = ? WHERE id = ?", (time.time() - finished_days_ago * 86400, job.id))
    return job.id


def _files(state: StateDir, job_id: str) -> bool:
    return state.run_dir(job_id).exists() or state.inputs_dir(job_id).exists()


@pytest.fixture
def stores(tmp_path: Path):
    state = StateDir(tmp_path / "state")
    state.root.mkdir()
    return Store(state.db), state


def test_keep_jobs_removes_the_oldest_finished_only(stores) -> None:
    store, state = stores
    old = [_job(store, state, end, finished_days_ago=10 - i) for i, end in
           enumerate((JobState.DONE, JobState.FAILED, JobState.CANCELLED))]
    newest = [_job(store, state, JobState.DONE, finished_days_ago=1 - i / 10) for i in range(2)]
    running, queued = _job(store, state, "running"), _job(store, state, None)
    keep = Retention(keep_jobs=2)
    assert storage(store, state, keep).removable_bytes == 3 * 1010
    assert sorted(prune(store, state, keep)) == sorted(old)
    for job_id in old:
        assert not _files(state, job_id) and (state.job_dir(job_id) / "runs.log").is_file()
        row = store.get(job_id)
        assert row is not None and row.files_removed and "--keep-jobs 2" in row.files_removed
        assert view(row).to_json()["files_removed"] == row.files_removed
    for job_id in (*newest, running, queued):
        assert _files(state, job_id) and store.get(job_id).files_removed is None
    assert prune(store, state, keep) == []  # nothing more to do
    assert storage(store, state, keep).removable_bytes == 0


def test_keep_days_and_no_retention(stores) -> None:
    store, state = stores
    stale, fresh = _job(store, state, JobState.DONE, finished_days_ago=8), _job(store, state, JobState.DONE, 1)
    running = _job(store, state, "running")
    assert prune(store, state, Retention()) == []  # no bound: nothing removed
    assert prune(store, state, Retention(keep_days=7)) == [stale]
    assert _files(state, fresh) and _files(state, running)
    assert prune(store, state, Retention(keep_jobs=0)) == [fresh]  # 0: no finished job keeps its files
    assert _files(state, running)


def test_a_job_whose_lock_is_held_waits_for_the_next_pass(stores) -> None:
    store, state = stores
    job_id = _job(store, state, JobState.DONE, finished_days_ago=30)
    with open(state.job_dir(job_id) / "job.lock", "a+") as held:  # a worker still in the directory
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert prune(store, state, Retention(keep_days=1)) == []
        assert _files(state, job_id)
    assert prune(store, state, Retention(keep_days=1)) == [job_id]


def test_storage_counts_what_the_state_directory_holds(stores) -> None:
    store, state = stores
    done = _job(store, state, JobState.DONE, finished_days_ago=3, size=5000)
    _job(store, state, "running", size=7000)
    state.cache.mkdir()
    (state.cache / "k.h5").write_bytes(b"c" * 300)
    s = storage(store, state, Retention(keep_days=2))
    assert s.finished_bytes >= 5010 and s.jobs_bytes >= s.finished_bytes + 7010
    assert s.removable_bytes == 5010 and s.cache_bytes == 300 and s.store_bytes > 0
    assert s.keep_days == 2 and s.keep_jobs is None
    assert json.loads(json.dumps(s.to_json()))["removable_bytes"] == 5010
    prune(store, state, Retention(keep_days=2))
    assert storage(store, state, Retention(keep_days=2)).finished_bytes < 100 and not _files(state, done)


def test_an_older_store_gains_the_column_and_keeps_its_jobs(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    with sqlite3.connect(db) as con:  # schema 1, as an earlier daemon made it
        con.execute("""CREATE TABLE jobs (n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, state TEXT NOT
            NULL, name TEXT NOT NULL, spec TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, started REAL,
            finished REAL, attempts INTEGER NOT NULL DEFAULT 0, crashes INTEGER NOT NULL DEFAULT 0, worker TEXT,
            pid INTEGER, token TEXT, lease_until REAL, not_before REAL NOT NULL DEFAULT 0, cancel_requested INTEGER NOT
            NULL DEFAULT 0, cancel_at REAL, progress TEXT, version INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT)""")
        con.execute("INSERT INTO jobs (id, state, name, spec, created, updated, progress) VALUES "
                    "('abc', 'done', 'm', '{}', 1, 1, '{}')")
        con.execute("PRAGMA user_version=1")
    store = Store(db)
    job = store.get("abc")
    assert job is not None and job.state == "done" and job.files_removed is None
    assert store.mark_files_removed("abc", "gone")
    assert store.get("abc").files_removed == "gone"
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 2
    Store(db)  # opened again: nothing to migrate


def test_daemon_prunes_at_its_pass_and_says_so(tmp_path: Path) -> None:
    """`serve --keep-jobs 1`: after two jobs, the next pass (at the daemon's start) removes the first one's
    files; its row, page and API say so, its report is gone (410); /healthz shows the storage."""
    model, samples, settings = planted_job_files(tmp_path / "files")
    uploads = [a for f in samples for a in ("--inputs", f)]
    tol = ["--atol", str(settings["tolerance"]["atol"]), "--rtol", str(settings["tolerance"]["rtol"])]
    d = Daemon(tmp_path / "state", "--keep-jobs", "1").start()
    try:
        ids = [d.cli("submit", model, *uploads, *tol).stdout.split()[-1] for _ in range(2)]
        for job_id in ids:
            assert d.cli("wait", job_id).returncode == 0
    finally:
        d.stop()
    d = Daemon(tmp_path / "state", "--keep-jobs", "1").start()  # its first pass runs at its start
    try:
        first = d.wait_for(ids[0], lambda j: j.get("files_removed"), timeout=30, what="the retention's note",
                           after_end=True)
        assert "--keep-jobs 1" in first["files_removed"] and first["state"] == "done" and first["result"]["passed"]
        assert d.job(ids[1])["files_removed"] is None
        assert httpx.get(f"{d.url}/jobs/{ids[0]}/report").status_code == 410
        assert httpx.get(f"{d.url}/jobs/{ids[0]}/artifacts").json()["artifacts"] == []
        assert httpx.get(f"{d.url}/jobs/{ids[1]}/report").status_code == 200
        page = httpx.get(f"{d.url}/ui/jobs/{ids[0]}").text
        assert "files_removed" in page and "--keep-jobs 1" in page
        health = httpx.get(f"{d.url}/healthz").json()
        s = health["storage"]
        assert s["keep_jobs"] == 1 and s["removable_bytes"] == 0 and s["finished_bytes"] > 10_000, s
        assert health["ok"], health
    finally:
        d.stop()


@pytest.mark.parametrize("flags, message", [(["--keep-jobs", "-1"], "--keep-jobs must be 0 or more, got -1"),
                                            (["--keep-days", "nan"], "--keep-days must be a number of days")])
def test_bad_retention_flags_are_one_line(run_cli, tmp_path: Path, flags, message) -> None:
    code, _, err = run_cli("serve", "--state-dir", tmp_path / "state", *flags)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "state").exists()
