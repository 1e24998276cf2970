"""Worker processes and their supervisor.

A worker (`python -m precision_doctor.service.workers`) claims jobs from the store one at a time and
runs each through `engine.run_job`. Its stdin is a pipe from the daemon: a line wakes it (a job was
submitted), end-of-file means the daemon is gone (killed, or shutting down) and the worker stops:
the job in hand ends at the core's next safe point (its checkpoint is on disk) and goes back to the
queue, and the worker exits (after ORPHAN_GRACE_S at the latest). A side thread (`Pulse`) renews the
lease, writes progress, and notices a cancel or a lost lease. A job's run directory is owned by one
worker at a time: `jobs/<id>/job.lock` (flock, naming the owner's pid).

The supervisor lives in the daemon: it starts the workers, starts a new one when one dies (its job is
re-queued and resumes; a job that kills its worker `max_crashes` times fails), re-queues jobs whose
lease ran out, and kills a worker that does not honour a cancel within `cancel_grace_s`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.store import Job, Store

ORPHAN_GRACE_S = 20.0  # after the daemon is gone: the job's time to reach a safe point
LOCK_WAIT_S = 60.0  # how long a worker waits for a job's run directory (a worker of a killed daemon may hold it)
PROGRESS_EVERY_S = 0.25
RESPAWN_DELAY_S = 5.0  # a worker that died within this long of its start is restarted after this long
_LOG_PREFIX = "precision-doctor worker"


# -- the worker process ---------------------------------------------------------------------------


class Pulse(threading.Thread):
    """The worker's side thread for one job: heartbeat and progress into the store; a cancel, a lost
    lease or a vanished daemon stop the job (the core stops at its next safe point)."""

    def __init__(self, store: Store, job: Job, lease_s: float, stop, daemon_gone: threading.Event):
        super().__init__(name="pd-pulse", daemon=True)
        self.store, self.job, self.lease_s, self.stop_token, self.daemon_gone = store, job, lease_s, stop, daemon_gone
        self.progress: dict = {"phase": "claimed", "evaluations": 0, "best_size": None, "phase_s": {}}
        self.phase_started = time.monotonic()
        self.lock = threading.Lock()
        self.dirty = True
        self.done = threading.Event()
        self.stop_deadline: float | None = None

    def on_progress(self, event: dict) -> None:
        """The engine's progress sink (called in the job's thread): cheap, no I/O."""
        with self.lock:
            p = self.progress
            if event["kind"] == "phase":
                self._close_phase()
                p["phase"] = event["phase"]
            elif event["kind"] == "capture":
                p["capture"] = {k: event[k] for k in ("stage", "done", "total")}
            elif event["kind"] == "evaluation":
                p.update(evaluations=event["step"], search_phase=event["phase"], last_size=event["size"],
                         last_passed=event["passed"], best_size=event["best_size"])
            self.dirty = True

    def _close_phase(self) -> None:
        """Add the time since the phase began to its total in progress["phase_s"] (under the lock)."""
        now, spent = time.monotonic(), self.progress["phase_s"]
        phase = self.progress["phase"]
        spent[phase] = round(spent.get(phase, 0.0) + now - self.phase_started, 3)
        self.phase_started = now

    def snapshot(self, final: bool = False) -> dict:
        with self.lock:
            if final:
                self._close_phase()
            self.dirty = False
            return {**self.progress, "phase_s": dict(self.progress["phase_s"])}

    def run(self) -> None:
        last_beat = 0.0
        while not self.done.wait(PROGRESS_EVERY_S):
            now = time.monotonic()
            if self.daemon_gone.is_set() and not self.stop_token.stopped:
                self.stop_token.stop("shutdown")
            if self.stop_token.stopped and self.stop_deadline is None:
                self.stop_deadline = now + ORPHAN_GRACE_S
            if self.daemon_gone.is_set() and self.stop_deadline is not None and now > self.stop_deadline:
                _log(f"job {self.job.id} did not stop within {ORPHAN_GRACE_S:.0f} s of the daemon's end; exiting")
                os._exit(3)
            if not self.dirty and now - last_beat < self.lease_s / 4:
                try:
                    if not self.stop_token.stopped and self.store.cancel_requested(self.job.id):
                        self.stop_token.stop("cancel")
                except Exception as exc:  # a locked or vanished database: try again next tick
                    _log(f"reading job {self.job.id} failed: {exc}")
                continue
            try:
                ours, cancel = self.store.heartbeat(self.job.id, self.job.token or "", self.lease_s,
                                                    self.snapshot() if self.dirty else None)
            except Exception as exc:  # a locked or vanished database: try again next tick
                _log(f"heartbeat of job {self.job.id} failed: {exc}")
                continue
            last_beat = now
            if not ours:
                self.stop_token.stop("lost")
            elif cancel:
                self.stop_token.stop("cancel")

    def close(self) -> None:
        self.done.set()
        self.join(5)


@contextlib.contextmanager
def job_lock(path: Path, owner: str, give_up: threading.Event, wait_s: float = LOCK_WAIT_S) -> Iterator[bool]:
    """flock on `path` (the kernel drops it when the holder dies), naming `owner` in the file; waits up
    to `wait_s` or until `give_up` is set. Yields whether it is held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline or give_up.is_set():
                    yield False
                    return
                time.sleep(0.2)
        f.seek(0)
        f.truncate()
        f.write(owner + "\n")
        f.flush()
        try:
            yield True
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class Worker:
    """One worker process's loop: claim, run, record; until the daemon goes or `max_jobs` ran."""

    def __init__(self, state: StateDir, worker_id: str, lease_s: float, max_jobs: int, cache_mb: float):
        from precision_doctor.service.cache import CaptureCache

        self.state, self.id, self.lease_s, self.max_jobs = state, worker_id, lease_s, max_jobs
        self.store = Store(state.db)
        self.cache = CaptureCache(state.cache, cache_mb) if cache_mb > 0 else None
        self.daemon_gone = threading.Event()
        self.wake = threading.Event()

    def listen(self, stream) -> None:
        """Read the daemon's pipe: a line is a wake-up, end-of-file the daemon's end."""

        def read() -> None:
            try:
                while stream.readline():
                    self.wake.set()
            except (OSError, ValueError):
                pass
            self.daemon_gone.set()
            self.wake.set()

        threading.Thread(target=read, name="pd-daemon-pipe", daemon=True).start()

    def serve(self) -> None:
        ran = 0
        while not self.daemon_gone.is_set() and ran < self.max_jobs:
            job = self.store.claim(self.id, os.getpid(), self.lease_s)
            if job is None:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            self.run(job)
            ran += 1

    def run(self, job: Job) -> None:
        from precision_doctor.service.engine import StopToken

        stop = StopToken()
        pulse = Pulse(self.store, job, self.lease_s, stop, self.daemon_gone)
        pulse.start()
        job_dir = self.state.job_dir(job.id)
        give_up = threading.Event()
        try:
            with job_lock(job_dir / "job.lock", f"{os.getpid()} {self.id}", _either(give_up, stop)) as held:
                if not held:  # another process still works in its directory, or we are stopping
                    if stop.reason != "lost":
                        self.store.release(job.id, job.token or "", delay_s=0.0 if stop.stopped else 2.0)
                    return
                self._record_attempt(job_dir, job)
                state, result, error = self._execute(job, stop, pulse)
            self._conclude(job, stop, pulse, state, result, error)
        finally:
            pulse.close()
            stop.clear()

    def _execute(self, job: Job, stop, pulse: Pulse) -> tuple[str, dict | None, str | None]:
        """Run the job: ("done", summary, None), ("failed", None, message), or ("stopped", summary?, None)."""
        from precision_doctor.errors import UserError
        from precision_doctor.service.engine import run_job, run_settings_exist

        run_dir = self.state.run_dir(job.id)
        resume = run_settings_exist(run_dir)
        for attempt in ("resume", "fresh") if resume else ("fresh",):
            try:
                s = run_job(job.spec, run_dir, progress=pulse.on_progress, stop=stop, resume=attempt == "resume",
                            cache=self.cache)
            except UserError as exc:
                return "failed", None, _one_line(exc)
            except KeyboardInterrupt:  # a SIGINT from outside (the daemon forwards none): give the job back
                stop.stop("shutdown")
                return "stopped", None, None
            except Exception as exc:
                self._log_traceback(job)
                if attempt == "resume" and not stop.stopped:
                    continue  # what the cut-off attempt left cannot be continued: start over, once
                return "failed", None, f"{type(exc).__name__}: {_one_line(exc)}"
            if s.status in ("interrupted", "stopped"):
                if not stop.stopped:  # a SIGINT from outside: give the job back
                    stop.stop("shutdown")
                return "stopped", s.to_dict(), None
            return "done", s.to_dict(), None
        raise AssertionError("unreachable")

    def _conclude(self, job: Job, stop, pulse: Pulse, state: str, result: dict | None, error: str | None) -> None:
        progress = pulse.snapshot(final=True)
        token = job.token or ""
        if state == "stopped" and stop.reason == "cancel":
            progress["phase"] = "cancelled"
            self.store.finish(job.id, token, "cancelled", result, "cancelled while running", progress)
        elif state == "stopped":
            self.store.release(job.id, token)  # shutdown or lost: the next attempt resumes from the checkpoint
        else:
            progress["phase"] = state
            self.store.finish(job.id, token, state, result, error, progress)

    def _record_attempt(self, job_dir: Path, job: Job) -> None:
        line = {"attempt": job.attempts, "pid": os.getpid(), "worker": self.id,
                "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")}
        with open(job_dir / "runs.log", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def _log_traceback(self, job: Job) -> None:
        with open(self.state.job_dir(job.id) / "job.log", "a", encoding="utf-8") as f:
            f.write(f"attempt {job.attempts} ({self.id}):\n{traceback.format_exc()}\n")


class _either:
    """An Event-like `is_set()` that is true when the event is set or the token stopped."""

    def __init__(self, event: threading.Event, stop):
        self.event, self.stop = event, stop

    def is_set(self) -> bool:
        return self.event.is_set() or self.stop.stopped


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:500]


def _log(msg: str) -> None:
    print(f"{_LOG_PREFIX} {os.getpid()}: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="precision_doctor.service.workers", description="A precision-doctor worker "
                                "(started by `precision-doctor serve`; reads its daemon's pipe on stdin).")
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease-s", type=float, default=20.0)
    p.add_argument("--max-jobs", type=int, default=200)
    p.add_argument("--cache-mb", type=float, default=4096.0)
    a = p.parse_args(argv)
    worker = Worker(StateDir(a.state_dir), a.worker_id, a.lease_s, a.max_jobs, a.cache_mb)
    worker.listen(sys.stdin.buffer)
    try:
        worker.serve()
    except KeyboardInterrupt:
        return 130
    return 0


# -- the supervisor (in the daemon) --------------------------------------------------------------------


class Supervisor:
    """Keeps `config.workers` worker processes running and the store's running jobs honest."""

    TICK_S = 0.5

    def __init__(self, config: ServiceConfig, store: Store):
        self.config, self.store = config, store
        self.state = StateDir(config.state_dir)
        self.procs: dict[str, tuple[int, subprocess.Popen]] = {}  # worker id -> (slot, process)
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
        from precision_doctor.service.engine import gpu_count

        self.gpus = gpu_count()
        with self.lock:
            for i in range(self.config.workers):
                self._spawn(i)
        self.thread.start()

    def _spawn(self, index: int) -> None:
        from precision_doctor.service.engine import worker_environment

        self.spawned += 1
        wid = f"w{index}-{self.tag}-{self.spawned}"
        env = {**os.environ, **worker_environment(index, self.config.workers, self.gpus)}
        cmd = [sys.executable, "-m", "precision_doctor.service.workers", "--state-dir", str(self.state.root),
               "--worker-id", wid, "--lease-s", str(self.config.lease_s), "--max-jobs", str(self.config.max_jobs_per_worker),
               "--cache-mb", str(self.config.cache_mb)]
        self.procs[wid] = (index, subprocess.Popen(cmd, stdin=subprocess.PIPE, env=env, start_new_session=True))
        self.born[wid] = time.monotonic()

    def wake(self) -> None:
        """A job was submitted: wake the idle workers."""
        with self.lock:
            for _, proc in self.procs.values():
                try:
                    assert proc.stdin is not None
                    os.write(proc.stdin.fileno(), b"\n")
                except (OSError, ValueError, AssertionError):
                    pass

    def alive(self) -> int:
        with self.lock:
            return sum(1 for _, p in self.procs.values() if p.poll() is None)

    def _loop(self) -> None:
        while not self.closing.wait(self.TICK_S):
            try:
                self.tick()
            except Exception:  # the supervisor must outlive a bad tick (a locked database, ...)
                _log("supervisor tick failed:\n" + traceback.format_exc())

    def tick(self) -> None:
        with self.lock:
            for wid, (index, proc) in list(self.procs.items()):
                code = proc.poll()
                if code is None:
                    continue
                del self.procs[wid]
                self.deaths += code != 0
                jobs = self.store.requeue_worker(wid, crashed=code != 0, max_crashes=self.config.max_crashes)
                if code != 0 or jobs:
                    _log(f"worker {wid} (pid {proc.pid}) ended with exit code {code}; its job(s) "
                         f"{', '.join(jobs) or 'none'} re-queued or ended")
                quick = time.monotonic() - self.born.pop(wid, 0.0) < RESPAWN_DELAY_S
                self.due[index] = time.monotonic() + (RESPAWN_DELAY_S if quick and code != 0 else 0.0)
            for index, when in list(self.due.items()):  # a worker that dies at once is not restarted in a tight loop
                if when <= time.monotonic() and not self.closing.is_set():
                    del self.due[index]
                    self._spawn(index)
            by_pid = {p.pid: wid for wid, (_, p) in self.procs.items()}
        for job in self.store.expired():
            if job.pid in by_pid and by_pid[job.pid] == job.worker:
                self._kill(job.worker or "", f"its lease on job {job.id} ran out (hung)")
            else:
                self.store.requeue_running("id = ? AND token = ?", (job.id, job.token), False, self.config.max_crashes)
        for job in self.store.cancel_overdue(self.config.cancel_grace_s):
            if job.worker:
                self._kill(job.worker, f"job {job.id} did not stop within {self.config.cancel_grace_s:.0f} s of its cancel")

    def _kill(self, wid: str, why: str) -> None:
        with self.lock:
            proc = self.procs.get(wid, (0, None))[1]
        if proc is not None and proc.poll() is None:
            _log(f"killing worker {wid} (pid {proc.pid}): {why}")
            proc.kill()

    def close(self, grace_s: float = ORPHAN_GRACE_S) -> None:
        """Shut down: the workers' pipes close (they stop their jobs at a safe point and give them back),
        then whatever is still alive after `grace_s` is killed and its job re-queued."""
        self.closing.set()
        if self.thread.is_alive():
            self.thread.join(5)
        with self.lock:
            procs = {wid: p for wid, (_, p) in self.procs.items()}
        for proc in procs.values():
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.close()
        deadline = time.monotonic() + grace_s
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for wid, proc in procs.items():
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            self.store.requeue_worker(wid, crashed=False, max_crashes=self.config.max_crashes)


if __name__ == "__main__":
    sys.exit(main())
