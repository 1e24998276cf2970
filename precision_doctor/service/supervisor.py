"""The supervisor (a thread of the daemon): keeps `--workers` workers running and the store's running
jobs honest.

It starts the workers through a `WorkerLauncher` ("start a worker", and for each a `WorkerHandle`: "is
it alive", "wake it", "stop it", "kill it"); `ProcessLauncher` starts worker processes on this machine.
Another launcher (Ray actors, say) slots in by implementing the same two protocols; its workers call
`workers.run_claimed_job` as the process workers do. The supervisor replaces a worker that died (its
job is re-queued and resumes; a job that killed its worker `max_crashes` times fails), re-queues jobs
whose lease ran out, and kills a worker that does not honour a cancel within `cancel_grace_s`.

The store may refuse writes for a while (another process holds its lock, its disk is full): a dead
worker is replaced at once all the same, and re-queueing its job is retried each tick until the store
takes it. A lease that ran out while the store refused writes says nothing about the worker (it could
not renew it), so a worker counts as hung only when its lease ran out although the store took writes
for a whole lease (and its disk was not full). Workers start with a minimal environment (`worker_base_environment`): no token, no
other secret of the daemon's environment.
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

from precision_doctor.errors import one_line
from precision_doctor.service.config import TOKEN_ENV, ServiceConfig, StateDir
from precision_doctor.service.health import disk_use
from precision_doctor.service.retention import EVERY_S, Retention, Storage, prune, storage
from precision_doctor.service.store import Store, StoreError
from precision_doctor.words import counted

ORPHAN_GRACE_S = 20.0  # at shutdown: the workers' time to give their jobs back
RESPAWN_DELAY_S = 5.0  # a worker that died within this long of its start is restarted after this long
PROBE_WAIT_S = 0.2  # the supervisor's probe of the store's write lock waits this long at most
# What a worker process inherits of the daemon's environment: where programs and libraries are, the locale,
# the GPU, thread and library settings the core reads; nothing else (no token, no credentials).
WORKER_ENV_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
                              "VIRTUAL_ENV", "MPLCONFIGDIR", "MPLBACKEND"})
WORKER_ENV_PREFIXES = ("LC_", "PYTHON", "CUDA_", "NVIDIA_", "CUDNN_", "TRT_", "TENSORRT_", "ORT_", "OMP_", "MKL_",
                       "OPENBLAS_", "HDF5_", "XDG_", "PRECISION_DOCTOR_")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "PRIVATE")


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


def worker_base_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The part of the daemon's environment (`environ`, default os.environ) a worker process gets: the
    names and prefixes above, never PRECISION_DOCTOR_TOKEN nor a name that sounds like a secret."""
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in environ.items()
            if (k in WORKER_ENV_NAMES or k.startswith(WORKER_ENV_PREFIXES)) and k != TOKEN_ENV
            and not any(w in k.upper() for w in _SECRET_WORDS)}


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
        env = {**worker_base_environment(), **worker_environment(index, c.workers, self.gpus)}
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
        self.orphaned: dict[str, bool] = {}  # ended worker id -> whether it crashed: its jobs wait to be re-queued
        self.earlier_running = True  # jobs left running by an earlier daemon wait to be re-queued
        self.store_problem: str | None = None  # why the store refused a write at the last probe (None: it took one)
        self.writable_since: float | None = None  # since when (monotonic) the store has taken writes
        self.troubles: dict[str, str] = {}  # what failed -> the last message logged for it (logged once, not per tick)
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="pd-supervisor", daemon=True)
        self.tag = f"{os.getpid()}-{int(time.time())}"
        self.retention = Retention(config.keep_jobs, config.keep_days)
        self.storage: Storage | None = None  # what the state directory held at the last retention pass
        self.keeper = threading.Thread(target=self._keep_loop, name="pd-retention", daemon=True)

    def start(self) -> None:
        self._requeue_earlier()
        if self.launcher is None:
            self.launcher = ProcessLauncher(self.config)
        with self.lock:
            for i in range(self.config.workers):
                self._spawn(i)
        self.thread.start()
        self.keeper.start()

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

    def problems(self) -> list[str]:
        """What keeps the service from working as it should, in words (empty: nothing)."""
        out = []
        alive = self.alive()
        if alive < self.config.workers:
            out.append(f"{alive} of {counted(self.config.workers, 'worker')} running (a replacement is due)")
        if self.store_problem:
            out.append(self.store_problem)
        with self.lock:
            waiting = len(self.orphaned) + self.earlier_running
        if waiting:
            out.append(f"{counted(waiting, 're-queue')} of running jobs wait{'s' if waiting == 1 else ''} for the store")
        return out

    def _loop(self) -> None:
        while not self.closing.wait(self.TICK_S):
            try:
                self.tick()
            except Exception:  # the supervisor must outlive a bad tick
                _log("supervisor tick failed:\n" + traceback.format_exc())

    def _keep_loop(self) -> None:
        """The retention's passes (service/retention.py), in their own thread: walking and removing directories
        must not delay the workers' supervision."""
        while True:
            try:
                self.keep_pass()
            except Exception:
                _log("retention pass failed:\n" + traceback.format_exc())
            if self.closing.wait(EVERY_S):
                return

    def keep_pass(self) -> None:
        """Remove the files of the finished jobs the retention no longer keeps, then measure the state directory."""
        state = StateDir(self.config.state_dir)
        removed = self._attempt("removing old jobs' files", prune, self.store, state, self.retention)
        if removed:
            _log(f"removed the files of {counted(len(removed), 'finished job')} ({self.retention.flags()}): {', '.join(removed)}")
        self.storage = self._attempt("measuring the state directory", storage, self.store, state, self.retention)

    def tick(self) -> None:
        with self.lock:
            for wid, (index, worker) in list(self.workers.items()):
                code = worker.poll()
                if code is None:
                    continue
                del self.workers[wid]
                self.deaths += code != 0
                quick = time.monotonic() - self.born.pop(wid, 0.0) < RESPAWN_DELAY_S
                self.due[index] = time.monotonic() + (RESPAWN_DELAY_S if quick and code != 0 else 0.0)
                self.orphaned[wid] = code != 0  # its replacement does not wait for the store (below)
                if code != 0:
                    _log(f"worker {wid} ended with exit code {code}")
            for index, when in list(self.due.items()):  # a worker that dies at once is not restarted in a tight loop
                if when <= time.monotonic() and not self.closing.is_set():
                    del self.due[index]
                    self._spawn(index)
            ours = set(self.workers)
        self._probe()
        self._requeue_earlier()
        self._requeue_orphaned()
        expired = self._attempt("reading the running jobs", self.store.expired)
        overdue = self._attempt("reading the cancelled jobs", self.store.cancel_overdue, self.config.cancel_grace_s)
        if expired is None or overdue is None:
            return
        # a lease that ran out while the store refused writes says nothing of its worker
        renewable = self.writable_since is not None and time.monotonic() - self.writable_since >= self.config.lease_s
        for job in expired:
            if job.worker in ours:
                if renewable:
                    self._kill(job.worker or "", f"its lease on job {job.id} ran out (hung)")
            else:
                self._attempt(f"re-queueing job {job.id}", self.store.requeue_running, "id = ? AND token = ?",
                              (job.id, job.token), False, self.config.max_crashes)
        for job in overdue:
            if job.worker:
                self._kill(job.worker, f"job {job.id} did not stop within {self.config.cancel_grace_s:.0f} s of its cancel")

    def _probe(self) -> None:
        """Whether the store takes writes now: its write lock (held for an instant) and the disk under it."""
        problem = self.store.write_problem(PROBE_WAIT_S)
        if problem is None and (disk := disk_use(self.config.state_dir)) is not None:
            problem = disk.problem()
        if problem is None and self.writable_since is None:
            self.writable_since = time.monotonic()
            if self.store_problem:
                _log("the job store takes writes again")
        elif problem is not None:
            if problem != self.store_problem:
                _log(problem)
            self.writable_since = None
        self.store_problem = problem

    def _attempt(self, what: str, call, *args):
        """call(*args); None (logged once) when the store refuses now: the caller tries again next tick."""
        try:
            out = call(*args)
        except StoreError as exc:
            message = f"{what} failed, will retry: {one_line(exc)}"
            if self.troubles.get(what) != message:
                _log(message)
            self.troubles[what] = message
            return None
        if self.troubles.pop(what, None):
            _log(f"{what}: done")
        return out

    def _requeue_earlier(self) -> None:
        """Re-queue the jobs an earlier daemon left running (its workers are gone), not this daemon's."""
        if not self.earlier_running:
            return
        requeued = self._attempt("re-queueing the jobs left running by an earlier daemon", self.store.requeue_running,
                                 "worker IS NULL OR worker NOT LIKE ?", (f"%-{self.tag}-%",), False, 1 << 30)
        if requeued is None:
            return
        self.earlier_running = False
        if requeued:
            _log(f"re-queued {counted(len(requeued), 'job')} left running by an earlier daemon: {', '.join(requeued)}")

    def _requeue_orphaned(self) -> None:
        with self.lock:
            orphaned = dict(self.orphaned)
        for wid, crashed in orphaned.items():
            jobs = self._attempt(f"re-queueing the job(s) of worker {wid}", self.store.requeue_worker, wid, crashed,
                                 self.config.max_crashes)
            if jobs is None:
                continue
            with self.lock:
                self.orphaned.pop(wid, None)
            if jobs:
                _log(f"job(s) {', '.join(jobs)} of worker {wid} re-queued or ended")

    def _kill(self, wid: str, why: str) -> None:
        with self.lock:
            entry = self.workers.get(wid)
        if entry is not None and entry[1].poll() is None:
            _log(f"killing worker {wid}: {why}")
            entry[1].kill()

    def close(self, grace_s: float = ORPHAN_GRACE_S) -> None:
        """Shut down: the workers are asked to stop (they stop their jobs at a safe point and give them back),
        then whatever is still alive after `grace_s` is killed and its job re-queued (if the store takes it:
        else the next daemon re-queues it at its start)."""
        self.closing.set()
        if self.thread.is_alive():
            self.thread.join(5)
        if self.keeper.is_alive():
            self.keeper.join(5)
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
            self._attempt(f"re-queueing the job(s) of worker {wid}", self.store.requeue_worker, wid, False,
                          self.config.max_crashes)


def _log(msg: str) -> None:
    with contextlib.suppress(OSError):  # a log on a full disk must not end the caller
        print(f"precision-doctor daemon {os.getpid()}: {msg}", file=sys.stderr, flush=True)
