"""Samples run and checked against their references, one after another, the check of one beside the run of the next.

On a GPU a run of a transformer's gated graph and the check of its outputs on the CPU cost about the same (whisper-base
on the H200: about 0.2 s a sample, a 2M-element output's check 0.1 s of it on one core), and each waited for the
other. Here, where the backend runs on a GPU (`overlap`), sample i's outputs are checked on a worker thread while sample
i+1 runs (ONNX Runtime releases the GIL while it runs). Results and their order are the sequential ones: a consumer
that stops after a failing sample has had one run more made than it asked for (its outputs dropped), and an error in
that run is raised only if the consumer asks for its result (a KeyboardInterrupt at once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from precision_doctor.backends.base import Runner
from precision_doctor.measure.tolerance import OutputCheck, Tolerance, check_all

Checks = dict[str, OutputCheck]


def checked_runs(runner: Runner, samples: Sequence, refs: Sequence[dict], order: Iterable[int], tol: Tolerance,
                 overlap: bool = False, before_run: Callable[[], None] | None = None) -> Iterator[tuple[int, Checks]]:
    """(i, sample i's checks) for each i of `order`, in that order: `samples[i]` run by `runner` and checked against
    `refs[i]` under `tol`; `before_run` is called before each run (a stop or a budget raises there). With `overlap`,
    the check of one sample runs on a worker thread beside the run of the next."""
    if not overlap:
        for i in order:
            if before_run is not None:
                before_run()
            yield i, check_all(runner.run(samples[i], list(refs[i])), refs[i], tol)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="check") as pool:
        pending: tuple[int, Future[Checks]] | None = None
        for i in order:
            error: Exception | None = None
            try:
                if before_run is not None:
                    before_run()
                outs = runner.run(samples[i], list(refs[i]))
            except Exception as exc:  # noqa: BLE001 (raised below, once the previous sample's result is taken)
                error = exc  # (a KeyboardInterrupt or a stop goes up at once: never lost with a consumer that stopped)
            if pending is not None:
                yield pending[0], pending[1].result()
                pending = None
            if error is not None:
                raise error
            pending = i, pool.submit(check_all, outs, refs[i], tol)
        if pending is not None:
            yield pending[0], pending[1].result()
