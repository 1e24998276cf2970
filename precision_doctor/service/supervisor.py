"""The supervisor (a thread of the daemon): keeps `--workers` workers running and the store's running
jobs honest.

It starts the workers through a `WorkerLauncher` ("start a worker", and for each a `WorkerHandle`: "is
it alive", "wake it", "stop it", "kill it"); `ProcessLauncher` starts worker processes on this machine.
Another launcher (Ray actors, say) slots in by implementing the same two protocols; its workers call
`workers.run_claimed_job` as the process workers do. The supervisor replaces a worker that died (its
job is re-queued and resumes; a job that killed its worker `max_crashes` times fails), re-queues jobs
whose lease ran out, and kills a worker that does not honour a cancel within `cancel_grace_s`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import traceback
from typing import Protocol

from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.store import Store

ORPHAN_GRACE_S = 20.0  # at shutdown: the workers' time to give their jobs back
RESPAWN_DELAY_S = 5.0  # a worker that died within this long of its start is restarted after this long


class WorkerHandle(Protocol):
    """One started worker, wherever it runs."""

    id: str

    def poll(self) -> int | None:
        """None while it runs; its exit code once it ended (not 0: it died)."""
        ...

    def wake(self) -> None:
        """A job was queued: look now."""
        ...

    def close(self) -> None:
        """Ask it to give its job back to the queue and end (the daemon shuts down)."""
        ...

    def kill(self) -> None:
        """End it now (hung, or deaf to a cancel); its job is re-queued."""
        ...

    def wait(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for it to end."""
        ...


class WorkerLauncher(Protocol):
    """Starts workers that claim jobs from the store at `config.state_dir`."""

    def start(self, worker_id: str, index: int) -> WorkerHandle: ...


def gpu_count() -> int:
    """GPUs on this machine (nvidia-smi), for the default worker count."""
    from precision_doctor.environment import gpus

    return len(gpus())


def worker_environment(index: int, workers: int, gpus: int) -> dict[str, str]:
    """Environment of worker `index`: its GPU when there are GPUs, else a share of the CPU cores for
    ONNX Runtime's threads (as batch workers get)."""
    from precision_doctor.batch.executors import threads_per_worker
    from precision_doctor.batch.jobs import ORT_THREADS_ENV

    env: dict[str, str] = {}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    threads = threads_per_worker(workers)
    if threads:
        env[ORT_THREADS_ENV] = str(threads)
    return env


class ProcessWorker:
    """A worker process (`python -m precision_doctor.service.workers`); its stdin is the daemon's pipe:
    a line wakes it, end-of-file tells it the daemon is gone."""

    def __init__(self, worker_id: str, proc: subprocess.Popen):
        self.id, self.proc = worker_id, proc

    def poll(self) -> int | None:
        return self.proc.poll()

    def wake(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.write(self.proc.stdin.fileno(), b"\n")  # type: ignore[union-attr]

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.proc.stdin.close()  # type: ignore[union-attr]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def wait(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)


class ProcessLauncher:
    """Worker processes on this machine, one per GPU slot (`CUDA_VISIBLE_DEVICES`) where there are GPUs,
    in their own sessions (a terminal's Ctrl-C reaches only the daemon)."""

    def __init__(self, config: ServiceConfig):
        self.config, self.gpus = config, gpu_count()

    def start(self, worker_id: str, index: int) -> ProcessWorker:
        c = self.config
        env = {**os.environ, **worker_environment(index, c.workers, self.gpus)}
        cmd = [sys.executable, "-m", "precision_doctor.service.workers", "--state-dir", str(StateDir(c.state_dir).root),
               "--worker-id", worker_id, "--lease-s", str(c.lease_s), "--max-jobs", str(c.max_jobs_per_worker),
               "--cache-mb", str(c.cache_mb)]
        return ProcessWorker(worker_id, subprocess.Popen(cmd, stdin=subprocess.PIPE, env=env, start_new_session=True))


class Supervisor:
    """Keeps `config.workers` workers running and the store's running jobs honest."""

    TICK_S = 0.5

    def __init__(self, config: ServiceConfig, store: Store, launcher: WorkerLauncher | None = None):
        self.config, self.store = config, store
        self.launcher = launcher
        self.workers: dict[str, tuple[int, WorkerHandle]] = {}  # worker id -> (slot, handle)
        self.spawned = 0
        self.deaths = 0
        self.born: dict[str, float] = {}  # worker id -> when it started
        self.due: dict[int, float] = {}  # slot -> when to start its next worker (after quick deaths)
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="pd-supervisor", daemon=True)
        self.tag = f"{os.getpid()}-{int(time.time())}"

    def start(self) -> None:
        requeued = self.store.requeue_all_running()
        if requeued:
            _log(f"re-queued {len(requeued)} job(s) left running by an earlier daemon: {', '.join(requeued)}")
        if self.launcher is None:
            self.launcher = ProcessLauncher(self.config)
        with self.lock:
            for i in range(self.config.workers):
                self._spawn(i)
        self.thread.start()

    def _spawn(self, index: int) -> None:
        assert self.launcher is not None
        self.spawned += 1
        wid = f"w{index}-{self.tag}-{self.spawned}"
        self.workers[wid] = (index, self.launcher.start(wid, index))
        self.born[wid] = time.monotonic()

    def wake(self) -> None:
        """A job was submitted: wake the idle workers."""
        with self.lock:
            for _, worker in self.workers.values():
                worker.wake()

    def alive(self) -> int:
        with self.lock:
            return sum(1 for _, w in self.workers.values() if w.poll() is None)

    def _loop(self) -> None:
        while not self.closing.wait(self.TICK_S):
            try:
                self.tick()
            except Exception:  # the supervisor must outlive a bad tick (a locked database, ...)
                _log("supervisor tick failed:\n" + traceback.format_exc())

    def tick(self) -> None:
        with self.lock:
            for wid, (index, worker) in list(self.workers.items()):
                code = worker.poll()
                if code is None:
                    continue
                del self.workers[wid]
                self.deaths += code != 0
                jobs = self.store.requeue_worker(wid, crashed=code != 0, max_crashes=self.config.max_crashes)
                if code != 0 or jobs:
                    _log(f"worker {wid} ended with exit code {code}; its job(s) {', '.join(jobs) or 'none'} "
                         "re-queued or ended")
                quick = time.monotonic() - self.born.pop(wid, 0.0) < RESPAWN_DELAY_S
                self.due[index] = time.monotonic() + (RESPAWN_DELAY_S if quick and code != 0 else 0.0)
            for index, when in list(self.due.items()):  # a worker that dies at once is not restarted in a tight loop
                if when <= time.monotonic() and not self.closing.is_set():
                    del self.due[index]
                    self._spawn(index)
            ours = set(self.workers)
        for job in self.store.expired():
            if job.worker in ours:
                self._kill(job.worker or "", f"its lease on job {job.id} ran out (hung)")
            else:
                self.store.requeue_running("id = ? AND token = ?", (job.id, job.token), False, self.config.max_crashes)
        for job in self.store.cancel_overdue(self.config.cancel_grace_s):
            if job.worker:
                self._kill(job.worker, f"job {job.id} did not stop within {self.config.cancel_grace_s:.0f} s of its cancel")

    def _kill(self, wid: str, why: str) -> None:
        with self.lock:
            entry = self.workers.get(wid)
        if entry is not None and entry[1].poll() is None:
            _log(f"killing worker {wid}: {why}")
            entry[1].kill()

    def close(self, grace_s: float = ORPHAN_GRACE_S) -> None:
        """Shut down: the workers are asked to stop (they stop their jobs at a safe point and give them back),
        then whatever is still alive after `grace_s` is killed and its job re-queued."""
        self.closing.set()
        if self.thread.is_alive():
            self.thread.join(5)
        with self.lock:
            workers = {wid: w for wid, (_, w) in self.workers.items()}
        for worker in workers.values():
            worker.close()
        deadline = time.monotonic() + grace_s
        for worker in workers.values():
            worker.wait(max(0.0, deadline - time.monotonic()))
        for wid, worker in workers.items():
            if worker.poll() is None:
                worker.kill()
                worker.wait(5)
            self.store.requeue_worker(wid, crashed=False, max_crashes=self.config.max_crashes)


def _log(msg: str) -> None:
    print(f"precision-doctor daemon {os.getpid()}: {msg}", file=sys.stderr, flush=True)
