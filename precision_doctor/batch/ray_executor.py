"""Batches on Ray: `RayExecutor` runs each item as one Ray task (`--executor ray`).

Imported only when asked for; Ray is the optional extra `pip install '.[ray]'`. Tasks carry paths, not
data: every node that runs them needs the batch's model, input and output files at the same paths (a
shared file system) and precision-doctor installed; `map` checks that up front with a tiny task per node.

Each item is a task with `max_calls=1` (a fresh worker process per model, as `LocalExecutor`: memory
and process-wide settings do not carry over) and `max_retries=0` (a model that kills its worker is an
error row, not retried; the next batch resumes it). A task whose node dies under it (Ray's NodeDiedError)
is submitted again as a fresh task, which the scheduler places on a live node, up to NODE_LOSS_TRIES
attempts in all; the work must be idempotent (a batch's `run_model` takes the model's lock, then resumes
or redoes it). Results stream back as tasks finish (`ray.wait`).
A stop (the caller's StopToken, Ctrl-C) cancels every outstanding task: queued ones never start,
running ones get a KeyboardInterrupt (their StopToken is stopped, they checkpoint and record
"interrupted"), WORKER_GRACE_S to end, then their workers are killed.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from precision_doctor.batch.work import POLL_S, WORKER_GRACE_S, Done, ItemNeeds, Work, run_item
from precision_doctor.control import StopToken, check
from precision_doctor.errors import SpecError, UserError, one_line

INSTALL_HINT = "install with pip install '.[ray]'"
LOCAL_OBJECT_STORE_BYTES = 128 * 1024**2  # tasks pass paths and small rows: a small object store suffices
PATH_CHECK_TIMEOUT_S = 120.0
NO_GPU = "needs a GPU (its backend runs on one) and the Ray cluster has none"
CONNECT_TIMEOUT_S = 10.0  # ray.init retries an unreachable address for ever: a TCP probe first
NODE_LOSS_TRIES = 3  # attempts of an item whose node keeps dying under it (a worker's own death is not retried)


def import_ray() -> Any:
    """The `ray` module, or a SpecError naming --executor when it is not installed."""
    try:
        import ray
    except ImportError:
        raise SpecError("executor", f"{{executor}} ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


@dataclass(frozen=True)
class PathProblem:
    """What a worker node could not see or write."""

    node: str
    message: str


class RayConnection:
    """A connection to the Ray cluster at `address` or, without one, to a local Ray instance that this
    object starts and shuts down. An already connected process (`ray.is_initialized()`) is used as it is
    and left connected. The batch's `RayExecutor` and the daemon's `RayLauncher` both hold one."""

    def __init__(self, address: str | None = None):
        self.address = address
        self._ray = import_ray()
        self._owner = False  # whether start() connected (then close() disconnects)

    def start(self) -> None:
        """Connect to the cluster (or start the local instance); a one-line UserError when that fails."""
        ray = self._ray
        if ray.is_initialized():
            return
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        unreachable = _unreachable(self.address) if self.address else None
        if unreachable:
            raise SpecError("ray_address", f"cannot reach the Ray cluster at {self.address} ({{ray_address}}): "
                            f"{unreachable}")
        try:
            if self.address:
                ray.init(address=self.address, **quiet)
            else:  # "local": a fresh instance, never one found in RAY_ADDRESS or /tmp/ray
                ray.init(address="local", include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                         **quiet)
        except Exception as exc:
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
            raise SpecError("ray_address", f"cannot connect to {where} ({{ray_address}}): {one_line(exc)}") from None
        self._owner = True

    def close(self) -> None:
        """Disconnect (and stop the local instance) if `start` connected."""
        if self._owner:
            self._owner = False
            self._ray.shutdown()


class RayExecutor:
    """One Ray task per item, on the cluster at `address` or, without one, on a local Ray instance that
    this executor starts and shuts down (`RayConnection`).

    `cpus` is what each task requests (and the ONNX Runtime threads it uses); `needs(item)` says which
    items need a GPU (`num_gpus=1`) and which files every node must see (`batch.jobs.task_needs` for a
    batch). An item that needs a GPU on a cluster without any fails at once instead of waiting forever."""

    jobs = 0  # the cluster decides how many tasks run at once

    def __init__(self, address: str | None = None, cpus: float = 1.0,
                 needs: Callable[[Any], ItemNeeds] | None = None):
        if cpus <= 0:
            raise SpecError("ray_cpus", "{ray_cpus} must be positive")
        self.address = address
        self.cpus = cpus
        self.threads = max(1, int(cpus))
        self.needs = needs or (lambda item: ItemNeeds())
        self._connection = RayConnection(address)
        self._ray = import_ray()

    # -- connection -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect to the cluster (or start the local instance); a one-line UserError when that fails."""
        self._connection.start()

    def close(self) -> None:
        """Disconnect (and stop the local instance) if `start` connected."""
        self._connection.close()

    def __enter__(self) -> RayExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- work -----------------------------------------------------------------------------------------
    def map(self, fn: Work, items: Iterable[Any], stop: StopToken | None = None) -> Iterator[Done]:
        connected_here = not self._ray.is_initialized()
        self.start()
        try:
            yield from self._map(fn, list(items), stop)
        finally:
            if connected_here:
                self.close()

    def _map(self, fn: Work, items: list[Any], stop: StopToken | None) -> Iterator[Done]:
        ray = self._ray
        needs = [self.needs(it) for it in items]
        problem = self.check_paths(needs)
        if problem is not None:
            raise UserError(f"a Ray worker on node {problem.node} {problem.message}; every node needs the batch's "
                            "files at the same paths (a shared file system: tasks carry paths, not data)")
        gpus = ray.cluster_resources().get("GPU", 0)
        task = ray.remote(max_calls=1, max_retries=0)(_ray_main)
        refs: dict[Any, tuple[int, Any]] = {}  # task -> (index, item)
        submit: dict[int, Any] = {}  # index -> its task's options (resources)
        lost: dict[int, list[str]] = {}  # index -> the nodes that died under its tasks
        finished = False

        def start(i: int, item: Any) -> str | None:
            try:
                refs[submit[i].remote(fn, item)] = (i, item)
            except Exception as exc:  # e.g. an item that cannot be pickled: that item fails
                return f"could not submit a Ray task: {one_line(exc)}"
            return None

        try:
            for i, (item, need) in enumerate(zip(items, needs)):
                num_gpus = need.gpus(gpus)
                if num_gpus is None:
                    yield Done(item, error=NO_GPU)
                    continue
                submit[i] = task.options(num_cpus=self.cpus, num_gpus=num_gpus)
                error = start(i, item)
                if error:
                    yield Done(item, error=error)
            while refs:
                check(stop)
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    i, item = refs.pop(ref)
                    status, value = self._outcome(ref)
                    if status == "lost":
                        lost.setdefault(i, []).append(value)
                        if len(lost[i]) >= NODE_LOSS_TRIES:
                            status, value = "error", _lost_message(lost[i])
                        else:  # again, as a fresh task: Ray places it on a live node
                            status, value = "error", start(i, item)
                            if value is None:
                                continue
                    yield Done(item, value) if status == "ok" else Done(item, error=value)
            finished = True
        finally:
            if not finished and refs:
                self._cancel(list(refs))

    def _outcome(self, ref: Any) -> tuple[str, Any]:
        """("ok", result), ("error", one line), or ("lost", the node) when the task's node died under it."""
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(ref)
        except exceptions.TaskCancelledError:
            return "error", "the Ray task was cancelled"
        except exceptions.NodeDiedError as exc:
            return "lost", _node_named(str(exc))
        except (exceptions.WorkerCrashedError, exceptions.OutOfMemoryError) as exc:
            return "error", (f"the Ray worker died ({type(exc).__name__}: a crash in native code, "
                             "or out of memory)")
        except exceptions.RayError as exc:
            return "error", f"the Ray task failed: {one_line(exc)}"

    def _cancel(self, refs: list[Any]) -> None:
        """Queued tasks never start; running ones are interrupted (they checkpoint), given WORKER_GRACE_S,
        then killed."""
        ray = self._ray
        for ref in refs:
            ray.cancel(ref, force=False)
        left = refs
        try:
            _, left = ray.wait(refs, num_returns=len(refs), timeout=WORKER_GRACE_S)
        except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
            pass
        for ref in left:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # finished meanwhile
                pass

    def check_paths(self, needs: list[ItemNeeds]) -> PathProblem | None:
        """The first file a node that runs tasks cannot read or directory it cannot write."""
        return check_node_paths(sorted({p for n in needs for p in n.reads}),
                                sorted({p for n in needs for p in n.writes}))


def check_node_paths(reads: list[str], writes: list[str]) -> PathProblem | None:
    """The first path of `reads` that a node which runs tasks cannot read or of `writes` (directories)
    it cannot write in, asked of a tiny task on each such node (nodes with neither CPUs nor GPUs, such
    as a bare head, are left out); needs a connected Ray."""
    if not reads and not writes:
        return None
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(_path_problem)
    nodes = [n for n in ray.nodes() if n.get("Alive") and
             (n.get("Resources", {}).get("CPU", 0) > 0 or n.get("Resources", {}).get("GPU", 0) > 0)]
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(reads, writes) for n in nodes]
    try:
        found = ray.get(refs, timeout=PATH_CHECK_TIMEOUT_S)
    except Exception as exc:
        raise UserError(f"the Ray cluster did not run the path check: {one_line(exc)}") from None
    for node, message in zip(nodes, found):
        if message:
            return PathProblem(str(node.get("NodeManagerAddress") or node["NodeID"]), message)
    return None


def _node_named(message: str) -> str:
    """The node a NodeDiedError's message names ("10.0.0.5 (node ID 3f2a...)"), or "unknown"."""
    found = re.search(r"Node IP: ([^,\s]+), node ID: (\w+)", message)
    return f"{found[1]} (node ID {found[2]})" if found else "unknown"


def _lost_message(nodes: list[str]) -> str:
    """The error of an item whose every attempt ended with its node's death."""
    return (f"the Ray node running it died, {len(nodes)} times in a row (nodes {'; '.join(nodes)}); "
            "run the batch again to resume it")


def _ray_main(fn: Work, item: Any) -> tuple[str, Any]:
    """A Ray task: `fn(item, stop)` with a fresh StopToken that ray.cancel (a KeyboardInterrupt in the
    task's main thread) stops."""
    cancellable()
    return run_item(fn, item, StopToken())


def cancellable() -> None:
    """In a Ray worker's main thread, SIGINT handled by Python: ray.cancel's KeyboardInterrupt is a simulated SIGINT,
    which Python drops where SIGINT is ignored, as it is in workers started under a parent that ignores it (a batch
    run as a shell's background job): such a task ran on through the stop, to be killed 5 s later, maybe just after
    writing a final report under an entry that says interrupted."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _unreachable(address: str) -> str | None:
    """Why a TCP connection to the host:port of `address` (also ray://host:port) fails, or None (also for
    an address that is not host:port, such as "auto": Ray resolves those)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _path_problem(reads: list[str], writes: list[str]) -> str | None:
    """On a worker node: "cannot see FILE" / "cannot write in DIR (...)" for the first problem, else None."""
    import tempfile

    for path in reads:
        if not os.access(path, os.R_OK):
            return f"cannot see {path}"
    for folder in writes:
        try:
            fd, probe = tempfile.mkstemp(prefix=".pd-ray-check-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            return f"cannot write in {folder} ({exc.strerror or type(exc).__name__})"
    return None
