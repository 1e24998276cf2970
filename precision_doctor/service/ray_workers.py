"""`serve --executor ray`: the daemon's workers run their jobs as Ray tasks (`RayLauncher`).

Imported only when asked for (Ray is the optional extra). A `RayWorker` is a `WorkerHandle` whose
loop is a thread of the daemon: it claims a job from the store, as a process worker does, and runs it
as one Ray task, `workers.run_claimed_job` on the job's plain arguments (a fresh Ray worker process per
job: `max_calls=1`; no Ray retries: `max_retries=0`). Everything else is the process worker's: the
task heartbeats, writes progress, honours a cancel and records the outcome itself, and runs in the
job's run directory under the state directory. The job store stays on the daemon's machine (SQLite's
WAL works within one machine only): tasks reach it through `RemoteStore`, calls to a Ray actor
holding the `Store`, pinned to the daemon's node. The files are shared: every node that runs tasks
needs the state directory (run directories, uploads, job locks, the capture cache) and the
`--allow-root`s at the same path; `RayLauncher.connect` checks with a tiny task per node that it
can see and write them.

What the supervisor sees is unchanged: a task that dies (its worker process or node is gone, or
something escaped `run_claimed_job`) ends its handle with exit code 1, so the job is re-queued and
resumes under a new handle, failing after `max_crashes`; `kill` (hung, or deaf to a cancel) is a
forced `ray.cancel`; `close` (the daemon shuts down) is a plain `ray.cancel`, which reaches the task
as SIGINT: its job stops at the next safe point and goes back to the queue. While a task waits for
resources (a GPU, say) or runs, its handle renews the job's lease, so a queued task is not taken for
a hung one; Ray itself reports a dead task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any

from precision_doctor.batch.ray_executor import NO_GPU, RayConnection, check_node_paths, import_ray
from precision_doctor.batch.work import ItemNeeds
from precision_doctor.errors import SpecError, UserError, one_line
from precision_doctor.outcome import JobState
from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.store import Job, Store, StoreError

POLL_S = 0.5


class RemoteStore:
    """The daemon's `Store` as a task on any node sees it: each call is a call of the store actor."""

    def __init__(self, actor: Any):
        self.actor = actor

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.actor, name)
        ray = import_ray()
        return lambda *args, **kwargs: ray.get(method.remote(*args, **kwargs))


def _ray_job(state_dir: str, job_id: str, token: str, spec: dict, worker: str, lease_s: float, cache_mb: float,
             threads: int, store: Any) -> str:
    """A Ray task: run one claimed job (`run_claimed_job`); a SIGINT (a plain `ray.cancel`) gives it back to
    the queue as a vanished daemon does for a process worker."""
    from precision_doctor.batch.jobs import ORT_THREADS_ENV
    from precision_doctor.service.workers import run_claimed_job

    os.environ[ORT_THREADS_ENV] = str(threads)
    given_back = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: given_back.set())
    return run_claimed_job(state_dir, job_id, token, spec, worker=worker, lease_s=lease_s, cache_mb=cache_mb,
                           daemon_gone=given_back, store=RemoteStore(store))


def job_needs(spec: dict) -> ItemNeeds:
    """What a job's task needs of its node: a GPU where its backends run on one (`gpu_use`)."""
    from precision_doctor.backends.registry import gpu_use
    from precision_doctor.spec import RunSpec

    backends = RunSpec.from_json(spec).backends
    return ItemNeeds(gpu=gpu_use(backends.backend, backends.confirm_backend))


class RayWorker:
    """One worker slot of the daemon: a thread that claims jobs and runs each as a Ray task."""

    def __init__(self, worker_id: str, launcher: RayLauncher):
        self.id, self.launcher = worker_id, launcher
        self.code: int | None = None
        self.closing, self.woken = threading.Event(), threading.Event()
        self.ref: Any = None
        self.thread = threading.Thread(target=self._loop, name=f"pd-ray-{worker_id}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            self.code = self._serve()
        except Exception as exc:  # the store or Ray failed under us: end, as a dying process worker would
            _log(f"worker {self.id} failed: {one_line(exc)}")
            self.code = 1

    def _serve(self) -> int:
        launcher = self.launcher
        store = Store(launcher.state.db)
        while not self.closing.is_set():
            try:
                job = store.claim(self.id, os.getpid(), launcher.config.lease_s)
            except StoreError as exc:  # locked or full: wait, as for an empty queue, and try again
                _log(f"worker {self.id}: claiming a job failed, will retry: {one_line(exc)}")
                job = None
            if job is None:
                self.woken.wait(1.0)
                self.woken.clear()
                continue
            if not self._run(store, job):
                return 1
        return 0

    def _run(self, store: Store, job: Job) -> bool:
        """Run `job` as a Ray task to its end; False when the task died (its job is then re-queued)."""
        ray, launcher, token = self.launcher.ray, self.launcher, job.token or ""
        lease_s = launcher.config.lease_s
        gpus = job_needs(job.spec).gpus(launcher.gpus)
        if gpus is None:
            store.finish(job.id, token, JobState.FAILED, None, NO_GPU)
            return True
        self.ref = launcher.task.options(num_cpus=launcher.cpus, num_gpus=gpus).remote(
            str(launcher.state.root), job.id, token, job.spec, self.id, lease_s, launcher.config.cache_mb,
            launcher.threads, launcher.store)
        cancelled, renewed = False, time.monotonic()
        while not ray.wait([self.ref], timeout=POLL_S)[0]:
            if self.closing.is_set() and not cancelled:
                ray.cancel(self.ref, force=False)  # SIGINT in the task: it gives its job back
                cancelled = True
            if time.monotonic() - renewed > lease_s / 4:
                try:
                    store.heartbeat(job.id, token, lease_s)
                    renewed = time.monotonic()
                except StoreError as exc:  # the supervisor knows the store refuses writes: the lease waits
                    _log(f"worker {self.id}: renewing the lease of job {job.id} failed: {one_line(exc)}")
        try:
            ray.get(self.ref)
        except ray.exceptions.RayError as exc:
            if not cancelled:
                _log(f"worker {self.id}: the Ray task of job {job.id} died ({type(exc).__name__}: {one_line(exc)})")
            return cancelled
        finally:
            self.ref = None
        return True

    def poll(self) -> int | None:
        return None if self.thread.is_alive() else self.code

    def wake(self) -> None:
        self.woken.set()

    def close(self) -> None:
        self.closing.set()
        self.woken.set()

    def kill(self) -> None:
        ref = self.ref
        if ref is not None:
            try:
                self.launcher.ray.cancel(ref, force=True)
            except Exception as exc:  # it ended meanwhile
                _log(f"worker {self.id}: cancelling its task failed: {one_line(exc)}")

    def wait(self, timeout: float) -> None:
        self.thread.join(timeout)


class RayLauncher:
    """Workers whose jobs run as Ray tasks on the cluster at `config.ray_address` (or a local Ray instance
    started and shut down with the daemon), each asking for `config.ray_cpus` CPUs (its ONNX Runtime
    threads too) and one GPU when its backend runs on one."""

    def __init__(self, config: ServiceConfig):
        if config.ray_cpus <= 0:
            raise SpecError("ray_cpus", "{ray_cpus} must be positive")
        self.config, self.state = config, StateDir(config.state_dir)
        self.cpus, self.threads = config.ray_cpus, max(1, int(config.ray_cpus))
        self.ray = import_ray()
        self.connection = RayConnection(config.ray_address)
        self.gpus = 0.0
        self.task: Any = None
        self.store: Any = None  # the store actor

    def connect(self) -> None:
        """Connect, check that every node sees the state directory and the allowed roots, and size the
        default worker count (the cluster's GPUs, else its CPUs / --ray-cpus); UserError, one line."""
        self.connection.start()
        try:
            problem = check_node_paths([str(r) for r in self.config.allow_roots], [str(self.state.root)])
            if problem is not None:
                raise UserError(f"a Ray worker on node {problem.node} {problem.message}; every node needs the "
                                "--state-dir (and --allow-root) at the same path (tasks carry paths, not data)")
        except BaseException:
            self.connection.close()
            raise
        resources = self.ray.cluster_resources()
        self.gpus = resources.get("GPU", 0.0)
        self.task = self.ray.remote(max_calls=1, max_retries=0)(_ray_job)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(self.ray.get_runtime_context().get_node_id(), soft=False)
        self.store = self.ray.remote(num_cpus=0, max_restarts=-1)(Store).options(scheduling_strategy=here).remote(
            self.state.db)

    def default_workers(self) -> int:
        """One worker per GPU of the cluster, else as many as its CPUs allow at `ray_cpus` each."""
        return max(1, int(self.gpus) or int(self.ray.cluster_resources().get("CPU", 1) // self.cpus))

    def close(self) -> None:
        self.connection.close()

    def start(self, worker_id: str, index: int) -> RayWorker:
        """A worker slot (the supervisor's `WorkerLauncher.start`)."""
        return RayWorker(worker_id, self)

    def __enter__(self) -> RayLauncher:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _log(msg: str) -> None:
    with contextlib.suppress(OSError):  # a log on a full disk must not end the caller
        print(f"precision-doctor daemon {os.getpid()}: {msg}", file=sys.stderr, flush=True)
