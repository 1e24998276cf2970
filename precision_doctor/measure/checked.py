"""Samples run and checked against their references, one after another, the checks beside the runs of the next ones.

On a GPU a run of a transformer's gated graph costs less than the check of its outputs on the CPU (whisper-base on the
H200: 30 ms a sample in the Where form, a 2M-element output's check about 0.1 s on one core), so each sample's run
waited for the previous check. Here, where the backend runs on a GPU (`overlap`), the checks run on worker threads (up
to `check_threads()` beside a run) while the next samples run (ONNX Runtime and numpy release the GIL). Results and their
order are the sequential ones, and a result already checked is handed over before the next run starts: a consumer
that stops after a failing sample has had at most one run more made than it asked for per check still running (their
outputs dropped), and an error in such a run is raised only if the consumer asks for its result (a KeyboardInterrupt
at once).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future

from precision_doctor.backends.base import Runner
from precision_doctor.measure.accumulate import shared_pool
from precision_doctor.measure.tolerance import OutputCheck, Tolerance, check_all

Checks = dict[str, OutputCheck]
CHECK_THREADS = 4  # checks at once at most, beside the runs (a quarter of the cores, at least one)


def check_threads() -> int:
    """How many checks run at once beside the runs: CHECK_THREADS, at most a quarter of the cores, at least one."""
    return max(1, min(CHECK_THREADS, (os.cpu_count() or 1) // 4))


def checked_runs(runner: Runner, samples: Sequence, refs: Sequence[dict], order: Iterable[int], tol: Tolerance,
                 overlap: bool = False, before_run: Callable[[], None] | None = None) -> Iterator[tuple[int, Checks]]:
    """(i, sample i's checks) for each i of `order`, in that order: `samples[i]` run by `runner` and checked against
    `refs[i]` under `tol`; `before_run` is called before each run (a stop or a budget raises there). With `overlap`,
    the checks run on worker threads beside the runs of the next samples."""
    if not overlap:
        for i in order:
            if before_run is not None:
                before_run()
            yield i, check_all(runner.run(samples[i], list(refs[i])), refs[i], tol)
        return
    depth = check_threads()
    pool = shared_pool("check", depth)  # made once per process: a search makes thousands of evaluations
    pending: deque[tuple[int, Future[Checks]]] = deque()

    def handed(keep: int) -> Iterator[tuple[int, Checks]]:
        """The pending results in order while more than `keep` are pending or the first is known."""
        while pending and (len(pending) > keep or pending[0][1].done()):
            j, done = pending.popleft()
            yield j, done.result()

    try:
        for i in order:
            yield from handed(depth)  # what is known first
            error: Exception | None = None
            try:
                if before_run is not None:
                    before_run()
                outs = runner.run(samples[i], list(refs[i]))
            except Exception as exc:  # noqa: BLE001 (raised below, once the earlier samples' results are taken)
                error = exc  # (a KeyboardInterrupt or a stop goes up at once: never lost with a consumer that stopped)
            if error is not None:
                yield from handed(0)
                raise error
            pending.append((i, pool.submit(check_all, outs, refs[i], tol)))
        yield from handed(0)
    finally:  # a consumer that stopped: the checks not started are dropped, the running ones end on their own
        for _, future in pending:
            future.cancel()
