"""What the batch's executors and the jobs they run share: the work function's shape (`Work`), what an item
needs of its machine (`ItemNeeds`), a finished item (`Done`), the `Executor` protocol and `run_item` (one item
in a worker, its escape caught). `executors.py` (local) and `ray_executor.py` (Ray) implement the protocol;
`jobs.py` says what a model's item needs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from precision_doctor.control import StopToken, signals_stop
from precision_doctor.errors import one_line

WORKER_GRACE_S = 5.0  # after a stop, the workers' time to checkpoint before SIGTERM
POLL_S = 0.5  # how often a waiting executor looks at its StopToken

# fn(item, stop): `stop` is the StopToken of the process the item runs in.
Work = Callable[[Any, StopToken], Any]


@dataclass(frozen=True)
class ItemNeeds:
    """What one item needs from the machine it runs on (the Ray executor's resources and path check;
    local executors run where the batch runs and ignore it)."""

    gpu: str | None = None  # "needs" or "wants" a GPU (backends.registry.gpu_use), or None
    reads: tuple[str, ...] = ()  # files the item reads
    writes: tuple[str, ...] = ()  # directories it writes into

    def gpus(self, cluster_gpus: float) -> int | None:
        """GPUs its Ray task asks for on a cluster with `cluster_gpus`; None: it needs one, there is none."""
        if self.gpu == "needs":
            return 1 if cluster_gpus else None
        return 1 if self.gpu == "wants" and cluster_gpus else 0


@dataclass
class Done:
    """One finished item: `result` of `fn(item, stop)`, or `error` when the executor could not run it
    (its worker process died)."""

    item: Any
    result: Any = None
    error: str | None = None


class Executor(Protocol):
    """Runs `fn(item, stop)` over `items` and yields a `Done` per item as each completes (any order).

    `fn` is a picklable top-level function that handles its own failures; the executor reports only
    what `fn` cannot (a worker that died). `stop` is the caller's StopToken: once it is stopped, no
    further item starts and running ones are stopped (they checkpoint). Each item gets the StopToken
    of the process it runs in (the caller's in-process; a fresh one, stopped by SIGINT or SIGTERM, in a worker).

    `threads` is the number of ONNX Runtime intra-op threads each item should use (0: ORT's default).
    `batch.ray_executor.RayExecutor` has the same shape: the tasks carry absolute paths and write their
    own run directories, so nothing else in the batch changes.
    """

    jobs: int
    threads: int

    def map(self, fn: Work, items: Iterable[Any], stop: StopToken | None = None) -> Iterator[Done]: ...


def run_item(fn: Work, item: Any, token: StopToken) -> tuple[str, Any]:
    """In a worker: `("ok", fn(item, token))` with SIGINT or SIGTERM stopping `token`, or `("error", one line)` for
    whatever escaped `fn`."""
    try:
        with signals_stop(token):
            return ("ok", fn(item, token))
    except BaseException as exc:  # fn handles its own failures; report whatever escapes it
        return ("error", one_line(exc) or type(exc).__name__)
