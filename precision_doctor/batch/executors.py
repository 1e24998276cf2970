"""Where the work of a batch runs: an `Executor` (`work.py`) maps a function over items and yields each result.

`InlineExecutor` runs in this process (tests, debugging, `--jobs 0`); `LocalExecutor` runs local worker
processes; `batch.ray_executor.RayExecutor` (imported only for `--executor ray`) runs each item as a Ray task.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

from precision_doctor.batch.work import POLL_S, WORKER_GRACE_S, Done, Executor, Work, run_item
from precision_doctor.control import Stopped, StopToken, check
from precision_doctor.errors import SpecError, one_line

ORPHAN_GRACE_S = 30.0  # after the batch process died, a worker's time to checkpoint before it exits
_WATCHING = False


class InlineExecutor:
    """Runs every item in this process, one after another (tests, debugging, `--jobs 0`)."""

    jobs = 1
    threads = 0

    def map(self, fn: Work, items: Iterable[Any], stop: StopToken | None = None) -> Iterator[Done]:
        token = stop or StopToken()
        for it in items:
            yield Done(it, fn(it, token))
            if token.stopped:  # a stop that ended the item (handled there or not) ends the batch too
                raise Stopped(token.reason or "interrupted")


class LocalExecutor:
    """`jobs` local worker processes, a fresh process per item (so memory does not carry over
    between models), at most `jobs` at a time. A worker that dies (a crash in native code, the OOM
    killer) fails only its own item.

    When the consumer is interrupted (Ctrl-C) or stops early (its StopToken), the running workers get
    SIGINT (so that they checkpoint and record "interrupted"), WORKER_GRACE_S to end, then SIGTERM and
    SIGKILL; the next batch resumes from their run directories. Plain processes rather than a
    concurrent.futures pool: a pool with one task per child can hang at interpreter exit after an
    interrupted shutdown (CPython gh-119592)."""

    def __init__(self, jobs: int, gpus: int = 0):
        if jobs < 1:
            raise SpecError("jobs", "{jobs} must be at least 1")
        self.jobs = jobs
        self.threads = threads_per_worker(jobs)
        self.devices = visible_gpus(gpus)

    def map(self, fn: Work, items: Iterable[Any], stop: StopToken | None = None) -> Iterator[Done]:
        from multiprocessing.connection import wait as wait_ready

        ctx = _mp_context()
        queue = list(items)
        queue.reverse()  # pop() from the end: items start in their order
        running: dict[Any, tuple[Any, Any]] = {}  # result connection -> (process, item)
        slots = list(range(self.jobs))  # free worker slots; slot k computes on GPU devices[k % len(devices)]
        slot_of: dict[Any, int] = {}
        finished = False
        try:
            while queue or running:
                check(stop)  # also a Ctrl-C that a weakref callback swallowed in this process
                while queue and len(running) < self.jobs:
                    item = queue.pop()
                    slot = slots.pop(0)
                    env = {"CUDA_VISIBLE_DEVICES": self.devices[slot % len(self.devices)]} if self.devices else {}
                    recv, send = ctx.Pipe(duplex=False)
                    proc = ctx.Process(target=_child_main, args=(fn, item, send, env), name="precision-doctor-worker")
                    try:
                        proc.start()
                    except Exception as exc:  # e.g. an item that cannot be pickled: that item fails
                        recv.close()
                        slots.append(slot)
                        yield Done(item, error=f"could not start a worker: {one_line(exc)}")
                        continue
                    finally:
                        send.close()  # the child holds the sending end; EOF here when it dies
                    running[recv] = (proc, item)
                    slot_of[recv] = slot
                ready = set(wait_ready(list(running), None if stop is None else POLL_S))
                for recv in [c for c in running if c in ready]:
                    proc, item = running.pop(recv)
                    slots.append(slot_of.pop(recv))
                    slots.sort()
                    try:
                        status, value = recv.recv()
                    except (EOFError, OSError):
                        status, value = "died", None
                    finally:
                        recv.close()
                    proc.join(5)
                    if status == "ok":
                        yield Done(item, value)
                    elif status == "error":
                        yield Done(item, error=value)
                    else:
                        yield Done(item, error="the worker process died (exit code "
                                   f"{proc.exitcode}: a crash in native code, or out of memory)")
            finished = True
        finally:
            if not finished:
                _stop_workers([proc for proc, _ in running.values()])
            for recv in running:
                recv.close()


EXECUTORS = ("local", "ray")


def check_executor(executor: str, ray_address: str | None, ray_cpus: float | None) -> None:
    """SpecError for an unknown executor or Ray settings without `ray` (batch and serve share these flags)."""
    if executor not in EXECUTORS:
        raise SpecError("executor", f"unknown {{executor}} '{executor}'; choose local or ray")
    if executor == "local":
        for setting, value in (("ray_address", ray_address), ("ray_cpus", ray_cpus)):
            if value is not None:
                raise SpecError(setting, f"{{{setting}}} needs {{executor}} ray")


def make_executor(jobs: int, executor: str = "local", ray_address: str | None = None,
                  ray_cpus: float | None = None) -> Executor:
    """The executor a batch asked for, its options checked before any work: `local` runs `jobs` worker
    processes (0: this process); `ray` one Ray task per model (`ray_cpus` each) on the cluster at
    `ray_address`, or on a local Ray instance (SpecError naming --executor when Ray is not installed)."""
    check_executor(executor, ray_address, ray_cpus)
    if executor == "local":
        if jobs == 0:
            return InlineExecutor()
        from precision_doctor.environment import gpus

        return LocalExecutor(jobs, len(gpus()) if jobs > 1 else 0)
    if jobs != 1:
        raise SpecError("jobs", "{jobs} sets local worker processes; with {executor} ray each model is a Ray task "
                        "({ray_cpus} sets its CPUs)")
    from precision_doctor.batch.jobs import task_needs
    from precision_doctor.batch.ray_executor import RayExecutor

    return RayExecutor(ray_address, cpus=1.0 if ray_cpus is None else ray_cpus, needs=task_needs)


def threads_per_worker(jobs: int) -> int:
    """ONNX Runtime intra-op threads for each of `jobs` workers (0 = ORT's default, for one job)."""
    if jobs <= 1:
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // jobs)


def _mp_context():
    """forkserver where available (fast, and safe with ONNX Runtime's threads), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def visible_gpus(gpus: int) -> list[str]:
    """The GPUs batch workers are spread over, as CUDA_VISIBLE_DEVICES names them (within the user's own
    CUDA_VISIBLE_DEVICES where it is set); none for fewer than two: every worker computes on the one GPU, and runs
    take turns on it (backends/gpu_turn.py)."""
    named = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    devices = named if "CUDA_VISIBLE_DEVICES" in os.environ else [str(i) for i in range(gpus)]
    return devices if len(devices) > 1 else []


def _child_main(fn: Work, item: Any, conn: Any, env: dict[str, str] | None = None) -> None:
    """A worker process: `fn(item, stop)` with a StopToken that SIGINT, SIGTERM and the death of the batch process
    stop, and its result (or what it raised, in one line) sent on `conn`. `env`: its GPU (CUDA_VISIBLE_DEVICES), set
    before anything starts CUDA."""
    os.environ.update(env or {})
    token = StopToken()
    _stop_with_parent(token)
    msg = run_item(fn, item, token)
    try:
        conn.send(msg)
    finally:
        conn.close()


def _stop_workers(procs: list) -> None:
    """SIGINT, a grace period, then SIGTERM and SIGKILL for the processes still alive."""
    import signal

    def send(sig: int) -> None:
        for p in procs:
            if p.is_alive() and p.pid:
                try:
                    os.kill(p.pid, sig)
                except OSError:
                    pass

    try:
        send(signal.SIGINT)
        deadline = time.monotonic() + WORKER_GRACE_S
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
        pass
    send(signal.SIGTERM)
    for p in procs:
        p.join(2)
    send(getattr(signal, "SIGKILL", signal.SIGTERM))
    for p in procs:
        p.join(2)


def _stop_with_parent(stop: StopToken) -> None:
    """In a worker process: when the batch process dies (SIGKILL, OOM killer, a closed terminal),
    stop too instead of running on unseen. The worker's token is stopped and its main thread
    interrupted (the search checkpoints and the row says "interrupted"); it exits after
    ORPHAN_GRACE_S at the latest."""
    import multiprocessing.process as mpp
    import threading

    global _WATCHING
    parent = mpp.parent_process()
    if _WATCHING or parent is None or getattr(parent, "sentinel", None) is None:
        return  # the batch's own process, or watched already
    _WATCHING = True

    def watch() -> None:
        from multiprocessing.connection import wait as wait_ready

        try:
            wait_ready([parent.sentinel])
        except OSError:
            return
        import _thread

        stop.stop("the batch process ended")
        _thread.interrupt_main()
        time.sleep(ORPHAN_GRACE_S)
        os._exit(130)

    threading.Thread(target=watch, name="pd-parent-watch", daemon=True).start()
