"""What another executor (Ray, issue #14) builds on: `workers.run_claimed_job` runs a claimed job from
plain, picklable arguments in any process, and the supervisor runs workers through any `WorkerLauncher`
(here one whose workers are threads of this process, several runs at once with their own stop tokens)."""

from __future__ import annotations

import os
import pickle
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from service_helpers import planted_job_files

from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.jobs import create_job
from precision_doctor.service.store import Job, Store
from precision_doctor.service.supervisor import Supervisor
from precision_doctor.service.uploads import Submission
from precision_doctor.service.workers import run_claimed_job


def _queue(state: StateDir, store: Store, files: Path, name: str) -> Job:
    """A planted case queued as the daemon queues it (`create_job`: its files pinned into the job's directory,
    which is all a worker reads)."""
    model, samples, settings = planted_job_files(files / name, name=name)
    config = ServiceConfig(state_dir=state.root, allow_roots=[files])
    sub = Submission(name, {**settings, "inputs": {"files": [str(f) for f in samples]}}, model_path=str(model))
    return create_job(sub, config, state, store)


def test_a_claimed_job_runs_from_picklable_arguments_in_another_process(tmp_path) -> None:
    state = StateDir(tmp_path / "state")
    state.root.mkdir()
    store = Store(state.db)
    job = _queue(state, store, tmp_path / "files", "three_defects")
    claimed = store.claim("task-1", os.getpid(), 30.0)
    assert claimed is not None and claimed.id == job.id
    args = (str(state.root), claimed.id, claimed.token, claimed.spec)
    assert pickle.loads(pickle.dumps(args)) == args
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:  # a fresh interpreter, as a Ray task's
        outcome = pool.submit(run_claimed_job, *args, worker="task-1").result(timeout=600)
    assert outcome == "done"
    done = store.get(job.id)
    assert done is not None and done.state == "done" and done.result is not None and done.result.passed
    assert done.progress.phase == "done" and done.progress.evaluations == done.result.evaluations
    report = state.run_dir(job.id) / "report.json"
    before = report.stat().st_mtime_ns
    assert run_claimed_job(*args, worker="task-1-retried") == "lost"  # a stale claim changes nothing
    assert report.stat().st_mtime_ns == before and store.get(job.id).attempts == 1


class ThreadWorker:
    """A worker that is a thread of this process: claims jobs and runs each with `run_claimed_job`."""

    def __init__(self, worker_id: str, state: StateDir):
        self.id, self.state = worker_id, state
        self.closed, self.woken = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        store = Store(self.state.db)
        while not self.closed.is_set():
            job = store.claim(self.id, os.getpid(), 30.0)
            if job is None:
                self.woken.wait(0.5)
                self.woken.clear()
                continue
            run_claimed_job(self.state.root, job.id, job.token or "", job.spec, worker=self.id, daemon_gone=self.closed)

    def poll(self) -> int | None:
        return None if self.thread.is_alive() else 0

    def wake(self) -> None:
        self.woken.set()

    def close(self) -> None:
        self.closed.set()
        self.woken.set()

    kill = close

    def wait(self, timeout: float) -> None:
        self.thread.join(timeout)


class ThreadLauncher:
    def __init__(self, state: StateDir):
        self.state, self.started = state, []

    def start(self, worker_id: str, index: int) -> ThreadWorker:
        self.started.append(worker_id)
        return ThreadWorker(worker_id, self.state)


def test_the_supervisor_runs_workers_through_any_launcher(tmp_path) -> None:
    config = ServiceConfig(state_dir=tmp_path / "state", workers=2)
    state = StateDir(config.state_dir)
    state.root.mkdir()
    store = Store(state.db)
    launcher = ThreadLauncher(state)
    supervisor = Supervisor(config, store, launcher)
    supervisor.start()
    try:
        assert supervisor.alive() == 2 and len(launcher.started) == 2
        ids = [_queue(state, store, tmp_path / "files", name).id for name in ("clean", "overflow_island", "three_defects")]
        supervisor.wake()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not all(store.get(i).terminal for i in ids):
            time.sleep(0.2)
        jobs = [store.get(i) for i in ids]
        assert all(j.state == "done" and j.attempts == 1 and j.result.passed for j in jobs), [
            (j.name, j.state, j.error) for j in jobs]
        assert {j.worker for j in jobs} <= set(launcher.started)
    finally:
        supervisor.close(grace_s=30)
    assert supervisor.alive() == 0


def test_a_silent_step_still_changes_the_job_every_beat(tmp_path, monkeypatch) -> None:
    """A running job whose step sends no progress event (a large model's load, one capture sample) is still written
    every `BEAT_S` with how long its phase has run: its event stream (a `job` event per change) is never silent for
    long (issue 35: no phase silent over 10 s, in the service's job events too)."""
    from precision_doctor.control import PhaseEvent, StopToken
    from precision_doctor.service import workers

    monkeypatch.setattr(workers, "BEAT_S", 0.5)  # the service's is 8 s: the same loop, in less time
    state = StateDir(tmp_path / "state")
    state.root.mkdir()
    store = Store(state.db)
    job = store.create("m", {"model": "m.onnx"})
    claimed = store.claim("w", os.getpid(), 60.0)
    pulse = workers.Pulse(store, job.id, claimed.token, 60.0, StopToken(), None)
    pulse.on_progress(PhaseEvent("capture"))
    pulse.start()
    seen: list[tuple[int, float | None]] = []
    try:
        t_end = time.monotonic() + 30.0  # a busy machine's beats come late, not never
        while time.monotonic() < t_end and len(seen) < 6:  # no event at all meanwhile
            j = store.get(job.id)
            if not seen or seen[-1][0] != j.version:
                seen.append((j.version, j.progress.phase_for_s))
            time.sleep(0.05)
    finally:
        pulse.close()
    assert len(seen) >= 5, seen  # about one write per 0.5 s beat
    fors = [f for _, f in seen[1:]]
    assert all(f is not None for f in fors) and fors == sorted(fors) and fors[-1] >= 2.0, seen
    assert store.get(job.id).progress.phase == "capture"


def test_a_cancel_stops_the_run_once(tmp_path, monkeypatch) -> None:
    """The store says "cancel" at every heartbeat after a job's cancel: the run is asked to stop once, so that the stop
    is acted on in the search and the report is still written (a second stop() reads as a second Ctrl-C, which ends
    the writing of the artifacts: "stopped again while its artifacts were made" after one cancel)."""
    from precision_doctor.control import StopToken
    from precision_doctor.service import workers

    monkeypatch.setattr(workers, "BEAT_S", 0.05)
    monkeypatch.setattr(workers, "PROGRESS_EVERY_S", 0.02)
    state = StateDir(tmp_path / "state")
    state.root.mkdir()
    store = Store(state.db)
    job = store.create("m", {"model": "m.onnx"})
    claimed = store.claim("w", os.getpid(), 0.2)  # a short lease: a heartbeat every 0.05 s
    token = StopToken()
    pulse = workers.Pulse(store, job.id, claimed.token, 0.2, token, None)
    store.request_cancel(job.id)
    pulse.start()
    try:
        t_end = time.monotonic() + 20.0
        while time.monotonic() < t_end and not token.stopped:
            time.sleep(0.02)
        assert token.stopped
        token.handled()  # the search acted on it
        time.sleep(1.0)  # many heartbeats, each reading the cancel again
        assert not token.pending
    finally:
        pulse.close()
