"""Worker processes: claim a job, run it, record it; one job at a time.

`run_claimed_job(state_dir, job_id, token, spec)` runs one job that a worker has claimed, start to end,
and records the outcome in the store: its arguments are plain strings and the spec's JSON, so a Ray
task (or any other executor) can call it as well as the process worker's loop (`Worker`) does.

A process worker (`python -m precision_doctor.service.workers`, started by the supervisor) reads its
daemon's pipe on stdin: a line wakes it (a job was submitted), end-of-file means the daemon is gone
(killed, or shutting down). The job in hand then stops at the core's next safe point (its checkpoint
is on disk) and goes back to the queue, and the worker exits (after ORPHAN_GRACE_S at the latest). A
side thread (`Pulse`) renews the job's lease, writes its progress, and turns a cancel or a lost lease
into a stop. A job's run directory is owned by one worker at a time: `jobs/<id>/job.lock` (an flock
naming the owner's pid).

The store may refuse writes for a while (another process holds its lock, the disk is full): a worker
then keeps trying (claims every second, heartbeats every tick, its job's outcome for up to
RECORD_PATIENCE_S) instead of ending, and logs the trouble once, not at every try. A job reads only
the files pinned into its own directory (`paths.check_pinned`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import json
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from precision_doctor.control import (
    CaptureEvent,
    CaptureSizeEvent,
    EvaluationEvent,
    PhaseEvent,
    ProgressEvent,
    RoundingFloorEvent,
    StopToken,
)
from precision_doctor.errors import UserError, one_line
from precision_doctor.outcome import JobState, RunStatus
from precision_doctor.render.wording import run_warning
from precision_doctor.service.config import StateDir
from precision_doctor.service.health import out_of_space
from precision_doctor.service.jobs import LOADER_DIR, MODEL_DIR, REFERENCE_DIR, SAMPLE_DIRS
from precision_doctor.service.schema import CaptureProgress, Progress, Result
from precision_doctor.service.store import Store, StoreError

ORPHAN_GRACE_S = 20.0  # after the daemon is gone: the job's time to reach a safe point
LOCK_WAIT_S = 60.0  # how long a worker waits for a job's run directory (a worker of a killed daemon may hold it)
PROGRESS_EVERY_S = 0.25
BEAT_S = 8.0  # a running job's progress is written at least this often (its events: no silence over 10 s)
LEASE_S = 20.0
RECORD_PATIENCE_S = 600.0  # how long a worker retries recording its job's outcome while the store refuses writes
CACHE_MB = 4096.0
_LOG_PREFIX = "precision-doctor worker"
LOST = "lost"  # what `run_claimed_job` returns when another owner has the job now (not a state of the job)


@dataclasses.dataclass(frozen=True)
class Ran:
    """How running a job ended: `state` DONE with its result or FAILED with a message (`error`), or None when it
    was stopped (a cancel, a shutdown, a lost lease) with the result so far, if any."""

    state: JobState | None
    result: Result | None = None
    error: str | None = None


class Pulse(threading.Thread):
    """The side thread of one running job: heartbeat and progress into the store; a cancel, a lost lease
    or a vanished daemon (`daemon_gone`, where there is one) stop the job at the core's next safe point."""

    def __init__(self, store: Store, job_id: str, token: str, lease_s: float, stop: StopToken,
                 daemon_gone: threading.Event | None):
        super().__init__(name="pd-pulse", daemon=True)
        self.store, self.job_id, self.token, self.lease_s = store, job_id, token, lease_s
        self.stop_token, self.daemon_gone = stop, daemon_gone
        self.progress = Progress(phase="claimed")
        self.phase_started = time.monotonic()
        self.lock = threading.Lock()
        self.dirty = True
        self.done = threading.Event()
        self.stop_deadline: float | None = None
        self.failing: str | None = None  # the store's last refusal (logged once until it takes writes again)
        self.asked: set[str] = set()  # the reasons the run was asked to stop for: each asked once

    def _ask_stop(self, reason: str) -> None:
        """Ask the run to stop for `reason`, once: the store says "cancel" at every heartbeat after one, and a second
        stop() would read as a second Ctrl-C (it stops the report's writing too)."""
        if reason not in self.asked and (reason == LOST or not self.stop_token.stopped):  # a lost lease: said too
            self.asked.add(reason)
            self.stop_token.stop(reason)

    def on_progress(self, event: ProgressEvent) -> None:
        """The run's progress sink (called in the job's thread): cheap, no I/O."""
        with self.lock:
            p = self.progress
            if isinstance(event, PhaseEvent):
                self._close_phase()
                p.phase = event.phase
            elif isinstance(event, CaptureEvent):
                p.capture = CaptureProgress(event.stage, event.done, event.total)
            elif isinstance(event, EvaluationEvent):
                p.evaluations, p.search_phase, p.last_size = event.step, event.phase, event.size
                p.last_passed, p.best_size, p.search_round = event.passed, event.best_size, event.round
            elif isinstance(event, RoundingFloorEvent | CaptureSizeEvent):
                said = run_warning(event)
                if said is not None and said not in p.warnings:
                    p.warnings = [*p.warnings, said]
            self.dirty = True

    def _close_phase(self) -> None:
        """Add the time since the phase began to its total in `phase_s` (under the lock)."""
        now, spent = time.monotonic(), self.progress.phase_s
        phase = self.progress.phase
        spent[phase] = round(spent.get(phase, 0.0) + now - self.phase_started, 3)
        self.phase_started = now

    def snapshot(self, final: bool = False) -> Progress:
        with self.lock:
            if final:
                self._close_phase()
            self.dirty = False
            for_s = None if final else round(time.monotonic() - self.phase_started, 1)
            return dataclasses.replace(self.progress, phase_s=dict(self.progress.phase_s), phase_for_s=for_s)

    def run(self) -> None:
        last_beat = last_write = 0.0
        while not self.done.wait(PROGRESS_EVERY_S):
            now = time.monotonic()
            if now - last_write >= BEAT_S:
                self.dirty = True  # a beat: no event came for a while, the job still says how long its phase has run
            gone = self.daemon_gone is not None and self.daemon_gone.is_set()
            if gone and not self.stop_token.stopped:
                self._ask_stop("shutdown")
            if self.stop_token.stopped and self.stop_deadline is None:
                self.stop_deadline = now + ORPHAN_GRACE_S
            if gone and self.stop_deadline is not None and now > self.stop_deadline:
                _log(f"job {self.job_id} did not stop within {ORPHAN_GRACE_S:.0f} s of the daemon's end; exiting")
                os._exit(3)
            if not self.dirty and now - last_beat < self.lease_s / 4:
                try:
                    if not self.stop_token.stopped and self.store.cancel_requested(self.job_id):
                        self._ask_stop("cancel")
                except Exception as exc:  # a locked or vanished database: try again next tick
                    self._failed(f"reading job {self.job_id} failed: {one_line(exc)}")
                continue
            try:
                wrote = self.dirty
                ours, cancel = self.store.heartbeat(self.job_id, self.token, self.lease_s,
                                                    self.snapshot() if wrote else None)
                if wrote:
                    last_write = now
            except Exception as exc:  # a locked or vanished database: try again next tick
                self.dirty = True
                self._failed(f"heartbeat of job {self.job_id} failed: {one_line(exc)}")
                continue
            if self.failing is not None:
                _log(f"job {self.job_id}: the store takes writes again")
                self.failing = None
            last_beat = now
            if not ours:
                self._ask_stop(LOST)
            elif cancel:
                self._ask_stop("cancel")

    def _failed(self, message: str) -> None:
        if message != self.failing:
            _log(message)
        self.failing = message

    def close(self) -> None:
        self.done.set()
        self.join(5)


@contextlib.contextmanager
def job_lock(path: Path, give_up: Callable[[], bool], wait_s: float = LOCK_WAIT_S) -> Iterator[bool]:
    """The job's run-directory lock (batch's flock, naming this pid), waiting up to `wait_s` or until
    `give_up()`; yields whether it is held."""
    from precision_doctor.batch.jobs import file_lock

    deadline = time.monotonic() + wait_s
    while True:
        with file_lock(path, min(1.0, wait_s)) as held:
            if held or give_up() or time.monotonic() > deadline:
                yield held
                return


def run_claimed_job(state_dir: str | Path, job_id: str, token: str, spec: dict, *, worker: str = "",
                    lease_s: float = LEASE_S, cache_mb: float = CACHE_MB,
                    daemon_gone: threading.Event | None = None, store: Store | None = None) -> str:
    """Run the job `job_id` that this caller claimed (lease `token`) with its settings `spec` (the RunSpec's
    JSON) in its run directory under `state_dir`, and record the outcome in the store. Returns the state it
    left the job in: done, failed, cancelled, or queued (given back: the daemon went away or the run
    directory was busy; the next attempt resumes), or "lost" (another owner has it now). `store`: the job
    store if not the one in `state_dir` (a Ray task on another machine reaches the daemon's through Ray)."""
    from precision_doctor.service.cache import DirectoryCaptureCache

    state = StateDir(Path(state_dir))
    store = store or Store(state.db)
    gone = daemon_gone.is_set if daemon_gone is not None else lambda: False
    beat = _persist(lambda: store.heartbeat(job_id, token, lease_s), f"the first heartbeat of job {job_id}", gone, lease_s)
    if beat is None or not beat[0]:  # a stale claim (a retried task, say) touches nothing
        return LOST
    cache = DirectoryCaptureCache(state.cache, cache_mb) if cache_mb > 0 else None
    stop = StopToken()
    pulse = Pulse(store, job_id, token, lease_s, stop, daemon_gone)
    pulse.start()
    try:
        with job_lock(state.job_dir(job_id) / "job.lock", lambda: stop.stopped) as held:
            if not held:  # another process still works in its directory, or we are stopping
                if stop.reason == LOST:
                    return LOST
                released = _persist(lambda: store.release(job_id, token, delay_s=0.0 if stop.stopped else 2.0),
                                    f"giving job {job_id} back", gone)
                return JobState.QUEUED if released else LOST
            _record_attempt(state, store, job_id, worker)
            ran = _execute(state, job_id, spec, stop, pulse, cache)
        return _conclude(store, job_id, token, stop, pulse, ran, gone)
    finally:
        pulse.close()


def _execute(state: StateDir, job_id: str, spec: dict, stop: StopToken, pulse: Pulse,
             cache) -> Ran:
    """Run the job: done with its result, failed with a message, or stopped (with its result, if any)."""
    from precision_doctor.service.engine import can_resume, run_job
    from precision_doctor.service.paths import check_pinned
    from precision_doctor.spec import RunSpec

    def failed(message: str) -> Ran:  # what a submitter reads: no path of the daemon's (the job's log has them)
        return Ran(JobState.FAILED, error=submitted_names(state.redact(message)))

    try:  # the job's files are its own pinned copies, nothing else
        check_pinned(RunSpec.from_json(spec).user_files(), state.inputs_dir(job_id))
    except UserError as exc:
        return failed(one_line(exc))
    run_dir = state.run_dir(job_id)
    attempts = ("resume", "fresh") if can_resume(run_dir) else ("fresh",)
    submitted = _submitted(state, job_id)
    for attempt in attempts:
        try:
            result = run_job(spec, run_dir, progress=pulse.on_progress, stop=stop, resume=attempt == "resume",
                             cache=cache, job=submitted)
        except UserError as exc:
            return failed(one_line(exc))
        except KeyboardInterrupt:  # a SIGINT from outside (the daemon forwards none): give the job back
            stop.stop("shutdown")
            return Ran(None)
        except Exception as exc:
            _log_traceback(state, job_id)
            if out_of_space(exc):  # not the job's fault, and starting over would not help
                return failed(f"no space left on the disk of the daemon's state directory ({one_line(exc)})")
            if attempt == "resume" and not stop.stopped:
                continue  # what the cut-off attempt left cannot be continued: start over, once
            return failed(one_line(exc))
        if result.status in (RunStatus.INTERRUPTED, RunStatus.STOPPED):
            if not stop.stopped:  # a SIGINT from outside: give the job back
                stop.stop("shutdown")
            return Ran(None, result)
        return Ran(JobState.DONE, result)
    raise AssertionError("unreachable")


_SAMPLES, _ONE_FILE = "|".join(SAMPLE_DIRS.values()), "|".join((MODEL_DIR, REFERENCE_DIR, LOADER_DIR))
_PINNED = re.compile(rf"\binputs/(?:(?:{_SAMPLES})/\d{{3}}-|(?:{_ONE_FILE})/)")  # as jobs.create_job pins them


def submitted_names(text: str) -> str:
    """A job's message with its files named as submitted (their file names) instead of the job directory's pinned
    copies (`inputs/samples/000-x.npz` -> `x.npz`, `inputs/model/m.onnx` -> `m.onnx`)."""
    return _PINNED.sub("", text)


def _submitted(state: StateDir, job_id: str):
    """The job as submitted (a `results.report.ServiceJob`: `jobs.create_job` wrote it); None for a job of a
    daemon that did not."""
    from precision_doctor.results.report import ServiceJob

    try:
        return ServiceJob.from_json(json.loads(state.submitted(job_id).read_text(encoding="utf-8")))
    except (OSError, ValueError, UserError):
        return None


def _conclude(store: Store, job_id: str, token: str, stop: StopToken, pulse: Pulse, ran: Ran,
              gone: Callable[[], bool]) -> str:
    """Record how the job ended (retried while the store refuses writes; given up after RECORD_PATIENCE_S, or
    when the daemon is gone: the job's lease then runs out, it is re-queued and resumes from its checkpoint)."""
    progress = pulse.snapshot(final=True)
    what = f"recording the end of job {job_id}"
    if ran.state is None and stop.reason == "cancel":
        progress.phase = JobState.CANCELLED
        done = _persist(lambda: store.finish(job_id, token, JobState.CANCELLED, ran.result, "cancelled while running",
                                             progress), what, gone)
        return JobState.CANCELLED if done else LOST
    if ran.state is None:  # shutdown or lost: the next attempt resumes from the checkpoint
        return JobState.QUEUED if _persist(lambda: store.release(job_id, token), what, gone) else LOST
    progress.phase = ran.state
    done = _persist(lambda: store.finish(job_id, token, ran.state, ran.result, ran.error, progress), what, gone)
    return ran.state if done else LOST


def _persist(call: Callable, what: str, gone: Callable[[], bool], patience_s: float = RECORD_PATIENCE_S):
    """call() until the store takes it (None after `patience_s` or once `gone()`), logging the trouble once."""
    deadline, delay, logged = time.monotonic() + patience_s, 0.2, False
    while True:
        try:
            out = call()
        except StoreError as exc:
            if not logged:
                _log(f"{what} failed, retrying for up to {patience_s:.0f} s: {one_line(exc)}")
                logged = True
            if gone() or time.monotonic() + delay > deadline:
                _log(f"{what}: gave up ({one_line(exc)})")
                return None
            time.sleep(delay)
            delay = min(2 * delay, 2.0)
            continue
        if logged:
            _log(f"{what}: done")
        return out


def _record_attempt(state: StateDir, store: Store, job_id: str, worker: str) -> None:
    """A line in the job's runs.log (best effort: a refusing store or a full disk does not stop the job)."""
    try:
        job = store.get(job_id)
        line = {"attempt": job.attempts if job else None, "pid": os.getpid(), "worker": worker,
                "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")}
        with open(state.job_dir(job_id) / "runs.log", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except (StoreError, OSError) as exc:
        _log(f"job {job_id}: runs.log not written ({one_line(exc)})")


def _log_traceback(state: StateDir, job_id: str) -> None:
    try:
        with open(state.job_dir(job_id) / "job.log", "a", encoding="utf-8") as f:
            f.write(f"pid {os.getpid()}:\n{traceback.format_exc()}\n")
    except OSError as exc:  # a full disk: the daemon's log gets it
        _log(f"job {job_id}: job.log not written ({one_line(exc)}):\n{traceback.format_exc()}")


def _log(msg: str) -> None:
    with contextlib.suppress(OSError):  # a log on a full disk must not end the caller
        print(f"{_LOG_PREFIX} {os.getpid()}: {msg}", file=sys.stderr, flush=True)


class Worker:
    """A process worker's loop: claim, run, until the daemon goes or `max_jobs` ran."""

    def __init__(self, state: StateDir, worker_id: str, lease_s: float, max_jobs: int, cache_mb: float):
        self.state, self.id, self.lease_s, self.max_jobs, self.cache_mb = state, worker_id, lease_s, max_jobs, cache_mb
        self.store = Store(state.db)
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
        failing: str | None = None
        while not self.daemon_gone.is_set() and ran < self.max_jobs:
            try:
                job = self.store.claim(self.id, os.getpid(), self.lease_s)
            except StoreError as exc:  # locked or full: wait, as for an empty queue, and try again
                if one_line(exc) != failing:
                    _log(f"claiming a job failed, will retry: {one_line(exc)}")
                failing, job = one_line(exc), None
            if job is None:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            run_claimed_job(self.state.root, job.id, job.token or "", job.spec, worker=self.id, lease_s=self.lease_s,
                            cache_mb=self.cache_mb, daemon_gone=self.daemon_gone)
            ran += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="precision_doctor.service.workers", description="A precision-doctor worker "
                                "(started by `precision-doctor serve`; reads its daemon's pipe on stdin).")
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease-s", type=float, default=LEASE_S)
    p.add_argument("--max-jobs", type=int, default=200)
    p.add_argument("--cache-mb", type=float, default=CACHE_MB)
    a = p.parse_args(argv)
    worker = Worker(StateDir(a.state_dir), a.worker_id, a.lease_s, a.max_jobs, a.cache_mb)
    worker.listen(sys.stdin.buffer)
    try:
        worker.serve()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
