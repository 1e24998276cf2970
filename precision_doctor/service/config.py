"""The daemon's settings and the layout of its state directory."""

from __future__ import annotations

import ipaddress
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_ENV = "PRECISION_DOCTOR_TOKEN"
STATE_ENV = "PRECISION_DOCTOR_STATE"
DEFAULT_PORT = 8765
# What one submission may name (service/jobs.py, service/paths.py; `/healthz` says them with the run's own limits):
MAX_JOB_FILES = 10_000  # sample files of one job (server files, each pinned once, and uploads; held-out ones too)
GLOB_TIME_S = 10.0  # matching one directory or pattern of inputs.files at submission (off the event loop)


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


def limits(config: ServiceConfig) -> dict:
    """What one submission and one job may hold, as `/healthz` says it: this daemon's upload size, the files of a
    job and the time to match its patterns (here), and the run's own limits on what its sample files may declare
    (data/input_spec.py; checked by the worker from the files' headers, before any data is read)."""
    from precision_doctor.data import input_spec as lim

    return {"max_upload_mb": config.max_upload_mb, "max_job_files": MAX_JOB_FILES, "glob_time_s": GLOB_TIME_S,
            "max_job_samples": lim.MAX_RUN_SAMPLES, "max_file_samples": lim.MAX_FILE_SAMPLES,
            "max_loader_samples": lim.MAX_LOADER_SAMPLES, "max_sample_bytes": lim.MAX_SAMPLE_BYTES,
            "max_file_bytes": lim.MAX_FILE_BYTES, "max_job_bytes": lim.MAX_RUN_BYTES,
            "max_array_elements": lim.MAX_ELEMENTS}


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

    def redact(self, text: str) -> str:
        """`text` (a message a submitter reads) without the daemon's own paths: a job's files as its directory names
        them (`inputs/samples/000-x.npz`, `run/report.json`), anything else under the state directory or in the
        temporary directory said in words."""
        for root in dict.fromkeys([str(self.root), os.path.realpath(self.root)]):
            text = re.sub(re.escape(root) + r"/jobs/[0-9A-Za-z_-]+/?", "", text)
            if os.path.isabs(root):
                text = text.replace(root, "the daemon's state directory")
        tmp = tempfile.gettempdir()
        return re.sub(re.escape(tmp) + r"/[^\s'\"]*", "a temporary file", text) if os.path.isabs(tmp) else text
