"""The job store: one SQLite database (WAL) shared by the daemon and its worker processes. All SQL
lives here.

A job is `queued`, `running`, `done`, `failed` or `cancelled`. A worker *claims* the oldest queued
job in one transaction and gets a *lease* (an owner token and an expiry it renews by heartbeat);
every later write of that worker names the token, so a worker that lost its job (the lease ran out,
the daemon re-queued it after a restart) changes nothing. A job re-queued after a crash or a
restart keeps its run directory and resumes from its checkpoint.

Every call waits at most `busy_timeout_s` for a lock another connection (or process) holds, retrying
within that time, then raises `StoreBusy`; a full disk raises `StoreFull`. Reads do not wait for
writers (WAL), so a held write lock stops submissions and heartbeats, not the pages.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from precision_doctor.outcome import JobState
from precision_doctor.service.schema import STATES, TERMINAL, JobView, Progress, Result

SCHEMA_VERSION = 2
_SCHEMA = ("""
CREATE TABLE IF NOT EXISTS jobs (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    started REAL,
    finished REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    crashes INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    pid INTEGER,
    token TEXT,
    lease_until REAL,
    not_before REAL NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    cancel_at REAL,
    progress TEXT,
    version INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    files_removed TEXT
)""", "CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (state, not_before, n)")
# what an older store (its user_version) lacks: the statements that bring it to each later version
_MIGRATIONS = {2: ("ALTER TABLE jobs ADD COLUMN files_removed TEXT",)}  # 2: the retention's note (service/retention.py)
_TERMINAL_SQL = ", ".join(f"'{s}'" for s in TERMINAL)
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_FULL = {"SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_TRUNCATE"}


class StoreError(Exception):
    """The job store cannot do what was asked now (one line; `reason` says why)."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"the job store ({path.name} in the state directory) {reason}")
        self.reason = reason


class StoreBusy(StoreError):
    """Another connection or process holds the store's lock past the busy timeout."""


class StoreFull(StoreError):
    """The disk under the store is full."""


def _translated(exc: sqlite3.Error, path: Path) -> Exception:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if name.startswith(tuple(_BUSY)) or "locked" in text or "busy" in text:
        return StoreBusy(path, f"is locked by another process or connection ({text})")
    if name.startswith(tuple(_FULL)) or "disk is full" in text or "disk I/O error" in text:
        return StoreFull(path, f"cannot be written: its disk is full or failing ({text})")
    return exc


def _guarded(method: Callable) -> Callable:
    """Run a store call; while the store is busy, retry (with back-off) until the busy timeout has passed,
    then raise StoreBusy; SQLite errors of a full disk become StoreFull."""

    @functools.wraps(method)
    def call(self: Store, *args, **kwargs):
        deadline, delay = time.monotonic() + self.busy_ms / 1000, 0.02
        while True:
            try:
                return method(self, *args, **kwargs)
            except sqlite3.Error as exc:
                err = _translated(exc, self.path)
                if isinstance(err, StoreBusy) and time.monotonic() + delay < deadline:
                    time.sleep(delay)
                    delay = min(2 * delay, 0.5)
                    continue
                if err is exc:
                    raise
                raise err from None

    return call


@dataclass
class Job:
    """One row of `jobs`, JSON columns decoded (`spec`: the RunSpec's JSON)."""

    id: str
    state: str
    name: str
    spec: dict
    created: float
    updated: float
    started: float | None
    finished: float | None
    attempts: int
    crashes: int
    worker: str | None
    pid: int | None
    token: str | None
    lease_until: float | None
    cancel_requested: bool
    progress: Progress
    version: int
    result: Result | None
    error: str | None
    files_removed: str | None = None  # the retention's note once the job's files are removed

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"], state=row["state"], name=row["name"], spec=json.loads(row["spec"]), created=row["created"],
        updated=row["updated"], started=row["started"], finished=row["finished"], attempts=row["attempts"],
        crashes=row["crashes"], worker=row["worker"], pid=row["pid"], token=row["token"], lease_until=row["lease_until"],
        cancel_requested=bool(row["cancel_requested"]), progress=Progress.from_json(json.loads(row["progress"] or "{}")),
        version=row["version"], result=Result.from_json(json.loads(row["result"])) if row["result"] else None,
        error=row["error"], files_removed=row["files_removed"],
    )


class Store:
    """The job store at `path`. Each call opens a short-lived connection, so an instance can be shared
    by threads; processes open their own instance on the same file. An instance also keeps one idle
    connection open (see `__init__`)."""

    def __init__(self, path: Path, busy_timeout_s: float = 30.0):
        self.path = Path(path)
        self.busy_ms = int(busy_timeout_s * 1000)
        self._setup()
        # one idle connection for the store's life: SQLite removes the WAL and shrinks its index when the last
        # connection closes, and then cannot open the store again on a full disk, not even to read it
        self._keeper = sqlite3.connect(self.path, check_same_thread=False)
        with contextlib.suppress(sqlite3.Error):  # a first read opens the WAL and its index, which it then keeps
            self._keeper.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()

    @_guarded
    def _setup(self) -> None:
        """WAL, the schema and its version, each written only when missing (a store that exists opens on a
        full disk or while another process holds its lock)."""
        with self._conn() as con:
            if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                con.execute("PRAGMA journal_mode=WAL")
            if not self._outdated(con):
                return
            con.execute("BEGIN IMMEDIATE")  # another process may be setting it up too: one does, the other sees it
            try:
                if self._outdated(con):
                    version = con.execute("PRAGMA user_version").fetchone()[0]
                    fresh = not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'jobs'").fetchone()
                    for statement in _SCHEMA:
                        con.execute(statement)
                    for v in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                        for statement in () if fresh else _MIGRATIONS[v]:
                            con.execute(statement)
                    con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def _outdated(self, con: sqlite3.Connection) -> bool:
        """Whether the schema must be created or migrated; RuntimeError when it is newer than this code's."""
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path}: job store schema {version} is newer than this precision-doctor's "
                               f"({SCHEMA_VERSION})")
        return version < SCHEMA_VERSION or not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'jobs'").fetchone()

    @contextmanager
    def _conn(self, busy_ms: int | None = None) -> Iterator[sqlite3.Connection]:
        busy_ms = self.busy_ms if busy_ms is None else busy_ms
        con = sqlite3.connect(self.path, timeout=busy_ms / 1000, isolation_level=None)
        try:
            con.row_factory = sqlite3.Row
            con.execute(f"PRAGMA busy_timeout={busy_ms}")
            con.execute("PRAGMA synchronous=NORMAL")
            yield con
        finally:
            con.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction taken at once (BEGIN IMMEDIATE): no two claimers see the same queued job."""
        with self._conn() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    # -- reading ------------------------------------------------------------------------------------
    @_guarded
    def get(self, job_id: str) -> Job | None:
        with self._conn() as con:
            row = con.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job(row) if row else None

    @_guarded
    def list(self, state: str | None = None, limit: int = 200) -> list[Job]:
        """Newest first."""
        q, args = "SELECT * FROM jobs", []
        if state:
            q, args = q + " WHERE state = ?", [state]
        with self._conn() as con:
            rows = con.execute(q + " ORDER BY n DESC LIMIT ?", (*args, limit)).fetchall()
        return [_job(r) for r in rows]

    @_guarded
    def counts(self) -> dict[str, int]:
        with self._conn() as con:
            rows = con.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        return {s: 0 for s in STATES} | {r[0]: r[1] for r in rows}

    @_guarded
    def cancel_requested(self, job_id: str) -> bool:
        with self._conn() as con:
            row = con.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row[0])

    @_guarded
    def version(self, job_id: str) -> tuple[int, str] | None:
        """(version, state): a cheap poll for the event stream."""
        with self._conn() as con:
            row = con.execute("SELECT version, state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return (row[0], row[1]) if row else None

    # -- the API's writes -----------------------------------------------------------------------------
    @_guarded
    def create(self, name: str, spec: dict, job_id: str | None = None) -> Job:
        now = time.time()
        job_id = job_id or new_id()
        with self._tx() as con:
            con.execute(
                "INSERT INTO jobs (id, state, name, spec, created, updated, progress) VALUES (?, 'queued', ?, ?, ?, ?, '{}')",
                (job_id, name, json.dumps(spec), now, now),
            )
            row = con.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job(row)

    @_guarded
    def request_cancel(self, job_id: str) -> Job | None:
        """A queued job is cancelled at once; a running one is asked to stop (its worker ends it)."""
        now = time.time()
        with self._tx() as con:
            con.execute("UPDATE jobs SET state = 'cancelled', finished = ?, updated = ?, version = version + 1, "
                        "error = 'cancelled before it started' WHERE id = ? AND state = 'queued'", (now, now, job_id))
            con.execute("UPDATE jobs SET cancel_requested = 1, cancel_at = COALESCE(cancel_at, ?), updated = ?, "
                        "version = version + 1 WHERE id = ? AND state = 'running'", (now, now, job_id))
        return self.get(job_id)

    # -- a worker's writes ------------------------------------------------------------------------------
    @_guarded
    def claim(self, worker: str, pid: int, lease_s: float) -> Job | None:
        """The oldest queued job that may start now, now running under a fresh lease of `worker`."""
        now = time.time()
        token = uuid.uuid4().hex
        with self._tx() as con:
            row = con.execute("SELECT id FROM jobs WHERE state = 'queued' AND not_before <= ? ORDER BY n LIMIT 1",
                              (now,)).fetchone()
            if row is None:
                return None
            con.execute(
                "UPDATE jobs SET state = 'running', worker = ?, pid = ?, token = ?, lease_until = ?, attempts = attempts + 1, "
                "started = COALESCE(started, ?), updated = ?, version = version + 1 WHERE id = ?",
                (worker, pid, token, now + lease_s, now, now, row[0]),
            )
            claimed = con.execute("SELECT * FROM jobs WHERE id = ?", (row[0],)).fetchone()
        return _job(claimed)  # read in the claim's transaction: a retried call never claims twice

    @_guarded
    def heartbeat(self, job_id: str, token: str, lease_s: float, progress: Progress | None = None) -> tuple[bool, bool]:
        """Renew the lease (and store `progress`). Returns (still ours, cancel requested)."""
        now = time.time()
        with self._tx() as con:
            if progress is None:
                cur = con.execute("UPDATE jobs SET lease_until = ? WHERE id = ? AND token = ? AND state = 'running'",
                                  (now + lease_s, job_id, token))
            else:
                cur = con.execute(
                    "UPDATE jobs SET lease_until = ?, progress = ?, updated = ?, version = version + 1 "
                    "WHERE id = ? AND token = ? AND state = 'running'",
                    (now + lease_s, json.dumps(progress.to_json()), now, job_id, token))
            row = con.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return cur.rowcount == 1, bool(row and row[0])

    @_guarded
    def finish(self, job_id: str, token: str, state: str, result: Result | None, error: str | None,
               progress: Progress | None = None) -> bool:
        """End a running job (done, failed or cancelled) if it is still ours; False if it is not."""
        assert state in TERMINAL
        now = time.time()
        with self._tx() as con:
            cur = con.execute(
                "UPDATE jobs SET state = ?, result = ?, error = ?, finished = ?, updated = ?, version = version + 1, "
                "token = NULL, lease_until = NULL, progress = COALESCE(?, progress) "
                "WHERE id = ? AND token = ? AND state = 'running'",
                (state, json.dumps(result.to_json()) if result is not None else None, error, now, now,
                 json.dumps(progress.to_json()) if progress is not None else None, job_id, token),
            )
        return cur.rowcount == 1

    @_guarded
    def release(self, job_id: str, token: str, delay_s: float = 0.0) -> bool:
        """Give a running job back to the queue (its run directory is kept: the next attempt resumes)."""
        now = time.time()
        with self._tx() as con:
            cur = con.execute(
                "UPDATE jobs SET state = 'queued', token = NULL, lease_until = NULL, worker = NULL, pid = NULL, "
                "not_before = ?, updated = ?, version = version + 1 WHERE id = ? AND token = ? AND state = 'running'",
                (now + delay_s, now, job_id, token),
            )
        return cur.rowcount == 1

    # -- the supervisor's writes --------------------------------------------------------------------------
    @_guarded
    def requeue_running(self, where: str, args: tuple, crashed: bool, max_crashes: int) -> list[str]:
        """Re-queue the running jobs matching `where` (a crash counts against the job: after
        `max_crashes` it fails instead); cancel those whose cancel was asked. Returns their ids."""
        now = time.time()
        with self._tx() as con:
            rows = con.execute(f"SELECT id, crashes, cancel_requested FROM jobs WHERE state = 'running' AND ({where})",
                               args).fetchall()
            for job_id, crashes, cancel in rows:
                crashes += 1 if crashed else 0
                if cancel:
                    state, error = JobState.CANCELLED, "cancelled (its worker stopped)"
                elif crashes >= max_crashes:
                    state = JobState.FAILED
                    error = f"its worker process died {crashes} times running it (a crash or out of memory)"
                else:
                    state, error = JobState.QUEUED, None
                con.execute(
                    "UPDATE jobs SET state = ?, error = ?, crashes = ?, token = NULL, lease_until = NULL, worker = NULL, "
                    "pid = NULL, not_before = 0, updated = ?, version = version + 1, "
                    "finished = CASE WHEN ? = 'queued' THEN NULL ELSE ? END WHERE id = ?",
                    (state, error, crashes, now, state, now, job_id),
                )
        return [r[0] for r in rows]

    # -- the retention's reads and writes (service/retention.py) -------------------------------------------------
    @_guarded
    def finished_with_files(self) -> list[Job]:
        """Finished jobs whose files are still there, most recently finished first."""
        with self._conn() as con:
            rows = con.execute(f"SELECT * FROM jobs WHERE state IN ({_TERMINAL_SQL}) AND files_removed IS NULL "
                               "ORDER BY finished DESC, n DESC").fetchall()
        return [_job(r) for r in rows]

    @_guarded
    def newest_finished(self, limit: int) -> set[str]:
        """The ids of the `limit` most recently finished jobs (their files removed or not)."""
        with self._conn() as con:
            rows = con.execute(f"SELECT id FROM jobs WHERE state IN ({_TERMINAL_SQL}) ORDER BY finished DESC, n DESC "
                               "LIMIT ?", (limit,)).fetchall()
        return {r[0] for r in rows}

    @_guarded
    def mark_files_removed(self, job_id: str, note: str) -> bool:
        """Note on a finished job that its files were removed; False when it is not a finished job."""
        with self._tx() as con:
            cur = con.execute(f"UPDATE jobs SET files_removed = ?, updated = ?, version = version + 1 WHERE id = ? AND "
                              f"state IN ({_TERMINAL_SQL})", (note, time.time(), job_id))
        return cur.rowcount == 1

    def write_problem(self, wait_s: float) -> str | None:
        """Why a write could not start now (None: it could): takes the write lock, waiting up to `wait_s`,
        and lets it go at once."""
        try:
            with self._conn(busy_ms=int(wait_s * 1000)) as con:
                con.execute("BEGIN IMMEDIATE")
                con.execute("ROLLBACK")
        except sqlite3.Error as exc:
            return str(_translated(exc, self.path))
        return None

    def requeue_worker(self, worker: str, crashed: bool, max_crashes: int) -> list[str]:
        return self.requeue_running("worker = ?", (worker,), crashed, max_crashes)

    @_guarded
    def expired(self, now: float | None = None) -> list[Job]:
        """Running jobs whose lease ran out (their worker hangs or is gone)."""
        with self._conn() as con:
            rows = con.execute("SELECT * FROM jobs WHERE state = 'running' AND lease_until < ?",
                               (now or time.time(),)).fetchall()
        return [_job(r) for r in rows]

    @_guarded
    def cancel_overdue(self, grace_s: float) -> list[Job]:
        """Running jobs whose cancel was asked more than `grace_s` ago and that still run."""
        with self._conn() as con:
            rows = con.execute("SELECT * FROM jobs WHERE state = 'running' AND cancel_requested = 1 AND cancel_at < ?",
                               (time.time() - grace_s,)).fetchall()
        return [_job(r) for r in rows]


def new_id() -> str:
    """A short random job id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def view(job: Job, detail: bool = True) -> JobView:
    """A job as the API shows it (no lease internals; its settings with `detail`), with its links."""
    base = f"/jobs/{job.id}"
    links = {"self": base, "report": f"{base}/report", "events": f"{base}/events", "artifacts": f"{base}/artifacts",
             "page": f"/ui/jobs/{job.id}"}
    return JobView(
        id=job.id, state=job.state, name=job.name, created=_iso(job.created), started=_iso(job.started),
        finished=_iso(job.finished), attempts=job.attempts, worker_pid=job.pid if job.state == JobState.RUNNING else None,
        cancel_requested=job.cancel_requested, progress=job.progress, result=job.result, error=job.error, links=links,
        spec=job.spec if detail else None, files_removed=job.files_removed,
    )


def _iso(t: float | None) -> str | None:
    import datetime as _dt

    return None if t is None else _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")
