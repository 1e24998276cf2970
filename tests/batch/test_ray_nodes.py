"""`batch --executor ray` on a simulated 3-node Ray cluster (`ray.cluster_utils.Cluster`: a head and three
worker nodes, each a raylet of its own on this machine with 1 CPU and a resource of its own): a node removed
while it diagnoses a model, and a task whose nodes keep dying.

Skipped where Ray does not import, unless PRECISION_DOCTOR_REQUIRE_RAY=1 (CI installs Ray and sets it).
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import onnx
import pytest
from test_batch import _wait_until, zoo  # noqa: F401 (zoo: the planted zoo fixture)

from precision_doctor import planted
from precision_doctor.results.runlock import LOCK

try:
    import ray
except ImportError as exc:  # the ray extra is not installed
    ray, _WHY = None, str(exc)

WORKER_NODES = 3
STORE_BYTES = 80 * 1024**2  # per node (Ray's minimum is 75 MiB): tasks pass paths and small rows
_NODE_NUMBERS = itertools.count()
LOOP_ITERATIONS = 2000  # loop_heavy's evaluations last a fraction of a second each: a search of seconds to cut


@pytest.fixture(scope="module")
def cluster():
    """A head without CPUs (so no task runs beside the driver) and worker nodes of 1 CPU each."""
    if ray is None:
        if os.environ.get("PRECISION_DOCTOR_REQUIRE_RAY") == "1":
            pytest.fail(f"Ray is required here (PRECISION_DOCTOR_REQUIRE_RAY=1) but does not import: {_WHY}",
                        pytrace=False)
        pytest.skip(f"Ray is not installed ({_WHY})")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                      "object_store_memory": STORE_BYTES})
    try:
        yield c
    finally:
        c.shutdown()


@pytest.fixture
def nodes(cluster):
    """The cluster topped up to WORKER_NODES worker nodes (a test before may have removed some); yields
    {raylet pid: node} (a Ray worker process is a child of its node's raylet)."""
    from ray._private import ray_constants

    while len(cluster.worker_nodes) < WORKER_NODES:
        cluster.add_node(num_cpus=1, resources={f"node{next(_NODE_NUMBERS)}": 1}, object_store_memory=STORE_BYTES)
    cluster.wait_for_nodes(timeout=120)
    return {n.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid: n for n in cluster.worker_nodes}


def _parent(pid: int | None) -> int | None:
    """The parent pid of a live process (Linux /proc), None when it is gone (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[1])


def _holder(out: Path, name: str) -> int | None:
    """The pid in OUT/.locks/<name>.lock: the process that holds (or last held) the model's lock."""
    try:
        return int((out / ".locks" / f"{name}.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_batch_survives_the_loss_of_a_node_mid_model(cluster, nodes, zoo, tmp_path):  # noqa: F811
    """Four models on three nodes (one waits for a free node); the node diagnosing the slow one is killed
    (not gracefully) once that model is in its search. Every model is reported once and passes; the slow
    one is run again by a fresh task on a live node, which takes the model's lock after the dead worker
    let go of it and continues from the checkpoint (no evaluation made twice); the summary files are whole."""
    from service_helpers import assert_resumed_once, slow_model

    root, expected = zoo
    (root / "broken.onnx").unlink()  # every model here is a real diagnosis that passes
    case = planted.cancellation()
    onnx.save(case.model, str(root / "cancellation.onnx"))
    (root / "cancellation.json").write_text(json.dumps({
        "inputs": {"samples": 2, "seed": 0}, "tolerance": {"atol": case.atol, "rtol": case.rtol}}))
    expected["cancellation"] = case.expected
    _, settings = slow_model(root / "loop_heavy.onnx", blocks=24, iterations=LOOP_ITERATIONS)
    (root / "loop_heavy.json").write_text(json.dumps({
        "inputs": settings["inputs"], "tolerance": settings["tolerance"], "strategy": settings["search"]["strategy"]}))
    names = ["cancellation", "large_reducesum", "loop_heavy", "overflow_island"]  # four models, three nodes
    out, run = tmp_path / "out", tmp_path / "out" / "loop_heavy"
    cmd = [sys.executable, "-m", "precision_doctor", "batch", str(root), "--out", str(out),
           "--executor", "ray", "--ray-address", cluster.address]
    log = tmp_path / "batch.log"
    with open(log, "w") as sink:  # a file, not a pipe: nobody reads it while the batch runs
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        # the slow model's lock held by a Ray worker (a raylet's child) and its search begun: a checkpoint to resume
        _wait_until(lambda: _parent(_holder(out, "loop_heavy")) in nodes and len(_lines(run / "search.jsonl")) >= 2,
                    proc, "loop_heavy searching on a worker node")
        first = _holder(out, "loop_heavy")
        victim = nodes.pop(_parent(first))
        before = _lines(run / "search.jsonl")
        cluster.remove_node(victim, allow_graceful=False)  # as a machine lost: its raylet and workers killed
        # run again by a worker of a surviving node (the lock's pid is written once it is held)
        _wait_until(lambda: _holder(out, "loop_heavy") != first and _parent(_holder(out, "loop_heavy")) in nodes,
                    proc, "loop_heavy run again on a surviving node")
        assert _parent(first) is None  # the second attempt holds the model's lock: the first one's worker is gone
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]

    summary = json.loads((out / "summary.json").read_text())["models"]
    assert [(r["model"], r["status"]) for r in summary] == [(n, "passed") for n in names]
    with open(out / "summary.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [(r["model"], r["status"]) for r in table] == [(n, "passed") for n in names]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".summary")]  # no temporary file left behind
    assert_resumed_once(run, before)
    for name, want in expected.items():
        assert set(json.loads((out / name / "report.json").read_text())["answer"]["fallback_nodes"]) == want
    assert not list(out.glob(f"*/{LOCK}"))  # every run let go of its directory (the dead worker's lock was taken over)


def _block(marker_dir: str, stop) -> str:
    """A task that records its node, then waits (for its node's death, in this test)."""
    node = ray.get_runtime_context().get_node_id()
    Path(marker_dir, f"{os.getpid()}.node").write_text(node)
    deadline = time.monotonic() + 300
    while not stop.stopped and time.monotonic() < deadline:
        time.sleep(0.05)
    return node


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_task_whose_nodes_keep_dying_is_an_error_naming_them(cluster, nodes, tmp_path, monkeypatch):
    """Each attempt's node removed while the task runs there: a fresh task each time on another node,
    then, the attempts spent, an error row naming every node that died."""
    from precision_doctor.batch import ray_executor
    from precision_doctor.batch.ray_executor import RayExecutor

    monkeypatch.setattr(ray_executor, "NODE_LOSS_TRIES", 2)
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(RayExecutor().map(_block, [str(tmp_path)])), daemon=True)
    worker.start()
    try:
        removed: list[str] = []
        seen: set[Path] = set()
        by_id = {n.node_id: n for n in nodes.values()}
        for attempt in (1, 2):
            deadline = time.monotonic() + 120
            while not (new := set(tmp_path.glob("*.node")) - seen):
                assert worker.is_alive() and time.monotonic() < deadline, f"attempt {attempt} did not start"
                time.sleep(0.05)
            [marker] = new
            seen.add(marker)
            node_id = marker.read_text()
            assert node_id not in removed  # each attempt on a live node
            cluster.remove_node(by_id[node_id], allow_graceful=False)
            removed.append(node_id)
        worker.join(120)
        assert not worker.is_alive()
    finally:
        ray.shutdown()
    [done] = results
    assert done.error.startswith("the Ray node running it died, 2 times in a row (nodes ") and "run the batch again" in done.error
    assert all(f"node ID {n}" in done.error for n in removed), done.error


def test_a_worker_that_inherited_an_ignored_sigint_can_still_be_cancelled():
    """ray.cancel interrupts a task with a simulated SIGINT, which Python drops where SIGINT is ignored (workers of a
    batch started as a shell's background job inherit that): the task's entry point puts Python's handling back."""
    import signal

    from precision_doctor.batch.ray_executor import cancellable

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cancellable()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, handled := (lambda *a: None))
        cancellable()  # a handler of its own is left as it is
        assert signal.getsignal(signal.SIGINT) is handled
    finally:
        signal.signal(signal.SIGINT, before)
