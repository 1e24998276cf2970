"""One step's values (a group of layers, one sample) added to the tensors' accumulators on several threads.

Each tensor's accumulator still takes its samples one after the other (a step's sums are waited for before the next
step's start), so its sums are the same, to the last bit, as on one thread; NumPy's loops release the GIL, so the
tensors of a step are summed side by side, and beside the run that computes the next step (ONNX Runtime releases it
too): a capture holds two steps' values at a time. Measured on the GPU machine: the capture's statistics of
isnet-1024 ran on one core of 16, 4 s a step, while the GPU waited (docs/history/large-models.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

Job = tuple[int, Callable[[], None]]  # (its size, for the order: the largest first; the work)


def stats_threads() -> int:
    """Threads for the statistics: a batch worker's share of the cores (`PRECISION_DOCTOR_ORT_THREADS`, which it sets),
    else every core this process may use, at most 16."""
    env = os.environ.get("PRECISION_DOCTOR_ORT_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return min(int(env), 16)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 16))


def shared_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """A thread pool that lives with the process, one per `name` and thread count (made once, under a lock; a forked
    child makes its own): for work handed out thousands of times a run (a search's checks, a large tensor's chunks)."""
    key = (os.getpid(), name, threads)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ThreadPoolExecutor(threads, thread_name_prefix=name)
        return _POOLS[key]


_POOLS: dict[tuple[int, str, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


class StepAdder:
    """`start(jobs)` runs one step's additions (the largest first) on the pool, `wait()` waits for them and raises
    the first error; with one thread they run in `start`, in order. A context manager: the pool ends with it."""

    def __init__(self, threads: int | None = None):
        self.threads = stats_threads() if threads is None else max(1, threads)
        self.pool: ThreadPoolExecutor | None = None
        self.pending: list[Future] = []

    def __enter__(self) -> StepAdder:
        if self.threads > 1:
            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="pd-stats")
        return self

    def start(self, jobs: Sequence[Job]) -> None:
        self.wait()
        ordered = sorted(jobs, key=lambda j: -j[0])
        if self.pool is None or len(ordered) < 2:
            for _, work in ordered:
                work()
            return
        self.pending = [self.pool.submit(work) for _, work in ordered]

    def wait(self) -> None:
        pending, self.pending = self.pending, []
        errors = [e for e in (f.exception() for f in pending) if e is not None]
        if errors:
            raise errors[0]

    def run(self, jobs: Sequence[Job]) -> None:
        """`start`, then `wait`."""
        self.start(jobs)
        self.wait()

    def __exit__(self, exc_type, *rest) -> None:
        try:
            if exc_type is None:
                self.wait()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
