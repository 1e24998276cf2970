"""The daemon's settings and the layout of its state directory."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_ENV = "PRECISION_DOCTOR_TOKEN"
STATE_ENV = "PRECISION_DOCTOR_STATE"
DEFAULT_PORT = 8765


def default_state_dir() -> Path:
    """$PRECISION_DOCTOR_STATE, else $XDG_STATE_HOME/precision-doctor (~/.local/state/precision-doctor)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "precision-doctor"


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServiceConfig:
    """What `precision-doctor serve` was started with."""

    state_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    workers: int = 1
    token: str | None = None
    allow_roots: list[Path] = field(default_factory=list)
    loader_scripts: bool = False  # run data loader scripts found under an allowed root (code, as the daemon's user)
    max_upload_mb: float = 512.0
    cache_mb: float = 4096.0
    lease_s: float = 20.0
    max_crashes: int = 3
    cancel_grace_s: float = 10.0
    max_jobs_per_worker: int = 200
    executor: str = "local"  # local: worker processes here; ray: each job a Ray task (service/ray_workers.py)
    ray_address: str | None = None  # with executor ray: the cluster (None: a local Ray instance)
    ray_cpus: float = 1.0  # with executor ray: CPUs (and ONNX Runtime threads) of each job's task
    keep_jobs: int | None = None  # the retention (service/retention.py): files of the newest N finished jobs kept
    keep_days: float | None = None  # ... and of those finished within D days (None: no bound)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * (1 << 20))


@dataclass(frozen=True)
class StateDir:
    """`root/jobs.db` (the store), `root/jobs/<id>/` (a job: `inputs/` its uploads, `run/` its run
    directory, `submitted.json` its files as the submitter named them, `job.lock` its owner, `runs.log` one
    line per attempt, `job.log` tracebacks), `root/capture-cache/`, `root/daemon.lock`."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "jobs.db"

    @property
    def cache(self) -> Path:
        return self.root / "capture-cache"

    @property
    def daemon_lock(self) -> Path:
        return self.root / "daemon.lock"

    def job_dir(self, job_id: str) -> Path:
        return self.root / "jobs" / job_id

    def run_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "run"

    def inputs_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "inputs"

    def submitted(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "submitted.json"
