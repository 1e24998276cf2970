"""How long the daemon keeps finished jobs' files (`serve --keep-jobs N`, `--keep-days D`), and what the state
directory holds (`/healthz`'s `storage`).

A pass (the supervisor's, every `EVERY_S`) removes the run directory and the uploads of each finished job
beyond the newest `keep_jobs` finished ones or finished more than `keep_days` ago; the job's row stays, with a
note (`files_removed`), and so do its small files (`submitted.json`, `runs.log`, `job.log`). A queued or running
job is never touched, nor one whose directory lock a worker still holds (the next pass takes it). Without
either setting nothing is removed. The capture cache has its own bound (`--cache-mb`).
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from precision_doctor.service.config import StateDir
from precision_doctor.service.store import Job, Store

EVERY_S = 60.0  # seconds between the supervisor's passes


@dataclass(frozen=True)
class Retention:
    """Keep the files of the newest `keep_jobs` finished jobs and of those finished within `keep_days` (None:
    no bound of that kind); a job is removed when either bound says so."""

    keep_jobs: int | None = None
    keep_days: float | None = None

    @property
    def active(self) -> bool:
        return self.keep_jobs is not None or self.keep_days is not None

    def flags(self) -> str:
        """The settings as `serve` flags."""
        return " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in asdict(self).items() if v is not None)

    def due(self, store: Store, now: float | None = None) -> list[Job]:
        """The finished jobs whose files this retention removes now (most recently finished first)."""
        if not self.active:
            return []
        now = time.time() if now is None else now
        kept = store.newest_finished(self.keep_jobs) if self.keep_jobs is not None else None
        cutoff = now - self.keep_days * 86400 if self.keep_days is not None else None
        return [j for j in store.finished_with_files()
                if (kept is not None and j.id not in kept) or (cutoff is not None and (j.finished or now) < cutoff)]


@dataclass(frozen=True)
class Storage:
    """What the state directory holds, in bytes: the jobs' files (`finished_bytes` of it belongs to finished
    jobs), the capture cache and the store; `removable_bytes`: what the retention removes at its next pass."""

    jobs_bytes: int
    finished_bytes: int
    removable_bytes: int
    cache_bytes: int
    store_bytes: int
    keep_jobs: int | None
    keep_days: float | None
    measured: str

    def to_json(self) -> dict:
        return asdict(self)


def tree_bytes(path: Path) -> int:
    """The bytes of the regular files under `path` (symbolic links not followed; 0 when it is gone)."""
    total = 0
    for top, _, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(top, f))
            except OSError:
                continue
            total += st.st_size if not os.path.islink(os.path.join(top, f)) else 0
    return total


def job_files(state: StateDir, job_id: str) -> list[Path]:
    """What the retention removes of a job: its run directory and its uploads."""
    return [state.run_dir(job_id), state.inputs_dir(job_id)]


def prune(store: Store, state: StateDir, retention: Retention, now: float | None = None) -> list[str]:
    """Remove the files of the finished jobs `retention` no longer keeps; returns their ids. The row of each stays,
    with a note saying when and why."""
    from precision_doctor.batch.jobs import file_lock

    removed = []
    for job in retention.due(store, now):
        with file_lock(state.job_dir(job.id) / "job.lock", 0.0) as held:
            if not held:  # a worker (of a daemon that was killed, say) is still in its directory
                continue
            for path in job_files(state, job.id):
                shutil.rmtree(path, ignore_errors=True)
            when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            note = (f"The files of this job (its run directory, report and uploads) were removed on {when} by the "
                    f"daemon's retention (serve {retention.flags()}).")
            if store.mark_files_removed(job.id, note):
                removed.append(job.id)
    return removed


def storage(store: Store, state: StateDir, retention: Retention) -> Storage:
    """What the state directory holds now (walks the jobs' directories: the supervisor calls it every pass)."""
    finished = {j.id for j in store.finished_with_files()}
    due = {j.id for j in retention.due(store)}
    jobs_bytes = finished_bytes = removable = 0
    root = state.root / "jobs"
    for entry in (os.scandir(root) if root.is_dir() else []):
        size = tree_bytes(Path(entry.path)) if entry.is_dir(follow_symlinks=False) else 0
        jobs_bytes += size
        if entry.name in finished:
            finished_bytes += size
        if entry.name in due:
            removable += sum(tree_bytes(p) for p in job_files(state, entry.name))
    db = sum(p.stat().st_size for p in state.root.glob(f"{state.db.name}*") if p.is_file())
    return Storage(jobs_bytes, finished_bytes, removable, tree_bytes(state.cache), db, retention.keep_jobs,
                   retention.keep_days, _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
