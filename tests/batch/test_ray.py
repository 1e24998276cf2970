"""`batch --executor ray` on a real local Ray cluster (one per module): the same summary as the local
executor, failing tasks recorded while the batch goes on, an interrupted batch resumed without redoing
what finished, the path check, GPU requests; and `--executor ray` without Ray installed.

Skipped where Ray does not import, unless PRECISION_DOCTOR_REQUIRE_RAY=1 (CI installs Ray and sets it).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

import httpx
import onnx
import pytest
from test_batch import _mtimes, _status, _wait_until, zoo  # noqa: F401 (zoo: the planted zoo fixture)

from precision_doctor import planted
from precision_doctor.batch.executors import LocalExecutor, make_executor
from precision_doctor.batch.jobs import ModelTask, task_needs
from precision_doctor.batch.orchestrate import run_batch
from precision_doctor.batch.work import ItemNeeds
from precision_doctor.errors import UserError
from precision_doctor.spec import RunSpec

try:
    import ray
except ImportError as exc:  # the ray extra is not installed
    ray, _WHY = None, str(exc)


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance for the module (2 CPUs, one logical GPU so that GPU requests can be seen);
    yields its address for CLI processes."""
    if ray is None:
        if os.environ.get("PRECISION_DOCTOR_REQUIRE_RAY") == "1":
            pytest.fail(f"Ray is required here (PRECISION_DOCTOR_REQUIRE_RAY=1) but does not import: {_WHY}",
                        pytrace=False)
        pytest.skip(f"Ray is not installed ({_WHY})")
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, object_store_memory=128 * 1024**2,
             log_to_driver=False, logging_level=logging.WARNING)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _rows(result) -> list[dict]:
    return [{k: v for k, v in r.columns().items() if k != "elapsed_s"} for r in result.rows]


def test_ray_batch_has_the_local_summary_and_skips_finished_models(cluster, zoo, tmp_path):  # noqa: F811
    root, expected = zoo
    local = run_batch(root, tmp_path / "local", executor=LocalExecutor(2))
    on_ray = run_batch(root, tmp_path / "ray", executor=make_executor(1, "ray"))
    assert _rows(on_ray) == _rows(local)
    assert [(r.model, r.status) for r in on_ray.rows] == \
        [("broken", "error"), ("large_reducesum", "passed"), ("overflow_island", "passed")]
    assert "not a readable ONNX model" in on_ray.rows[0].message  # the broken model is recorded, the batch went on
    for name, want in expected.items():
        assert set(json.loads((tmp_path / "ray" / name / "report.json").read_text())["answer"]["fallback_nodes"]) == want
    local_csv = (tmp_path / "local" / "summary.csv").read_text().splitlines()
    ray_csv = (tmp_path / "ray" / "summary.csv").read_text().splitlines()
    assert len(local_csv) == len(ray_csv) == 4

    before = _mtimes(tmp_path / "ray", expected)
    again = run_batch(root, tmp_path / "ray", executor=make_executor(1, "ray"))
    assert sorted(again.skipped) == sorted(expected) and again.ran == ["broken"]
    assert _mtimes(tmp_path / "ray", expected) == before


def _work(item: str, stop) -> object:
    """What each test item does in its Ray task."""
    if item == "die":
        os._exit(3)
    if item == "raise":
        raise RuntimeError("boom\nsecond line")
    return (item, {k: v for k, v in ray.get_runtime_context().get_assigned_resources().items() if v})


def test_failed_tasks_are_recorded_and_the_rest_runs(cluster):
    from precision_doctor.batch.ray_executor import RayExecutor

    needs = {"gpu": ItemNeeds(gpu="needs"), "auto": ItemNeeds(gpu="wants")}
    executor = RayExecutor(cpus=1, needs=lambda it: needs.get(it, ItemNeeds()))
    done = {d.item: d for d in executor.map(_work, ["a", "die", "raise", "gpu", "auto", "b"])}
    assert sorted(done) == ["a", "auto", "b", "die", "gpu", "raise"]
    assert done["die"].error and "worker died" in done["die"].error
    assert done["raise"].error == "RuntimeError: boom"
    assert done["a"].result == ("a", {"CPU": 1.0}) and done["b"].error is None
    assert done["gpu"].result == ("gpu", {"CPU": 1.0, "GPU": 1.0})  # a GPU model asks for one
    assert done["auto"].result == ("auto", {"CPU": 1.0, "GPU": 1.0})  # auto confirms on the cluster's GPU


def test_a_gpu_task_on_a_cluster_without_gpus_fails_at_once(cluster, monkeypatch):
    from precision_doctor.batch.ray_executor import RayExecutor

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})  # the driver's view of a CPU-only cluster
    executor = RayExecutor(needs=lambda it: ItemNeeds(gpu={"gpu": "needs", "auto": "wants"}.get(it)))
    done = {d.item: d for d in executor.map(_work, ["gpu", "auto", "a"])}
    assert "the Ray cluster has none" in done["gpu"].error and done["a"].error is None
    assert done["auto"].result == ("auto", {"CPU": 1.0})  # auto runs without one (and says it did not confirm)


def test_task_needs_of_a_model():
    spec = RunSpec("/z/m.onnx").with_settings({"inputs.files": ("/z/a.npz",), "backends.confirm_backend": "ort-cuda"})
    task = ModelTask("m", "/out/m", spec, "key", "hash")
    assert task_needs(task) == ItemNeeds(gpu="needs", reads=("/z/m.onnx", "/z/a.npz"), writes=("/out",))
    assert task_needs(ModelTask("m", "/out/m", RunSpec("/z/m.onnx"), "key", "hash")).gpu == "wants"  # auto
    emulated = RunSpec("/z/m.onnx").with_settings({"backends.backend": "emulate"})
    assert task_needs(ModelTask("m", "/out/m", emulated, "key", "hash")).gpu is None
    assert task_needs(ModelTask("m", "/out/m", spec, "key", None, error="model file not found")) == ItemNeeds()


def test_path_check_names_what_a_worker_cannot_see(cluster, zoo, tmp_path):  # noqa: F811
    from precision_doctor.batch.ray_executor import RayExecutor

    missing = str(tmp_path / "elsewhere" / "m.onnx")
    executor = RayExecutor(needs=lambda it: ItemNeeds(reads=(missing,)))
    with pytest.raises(UserError, match=f"cannot see {missing};.*same paths"):
        list(executor.map(_work, ["a"]))
    not_a_dir = tmp_path / "out"
    not_a_dir.write_text("a file, not a directory")
    executor = RayExecutor(needs=lambda it: ItemNeeds(writes=(str(not_a_dir),)))
    with pytest.raises(UserError, match=f"cannot write in {not_a_dir} \\(Not a directory\\)"):
        list(executor.map(_work, ["a"]))


def _slow_zoo(root) -> list[str]:
    """A quick model and one whose search takes seconds (a linear search of ~25 evaluations, each a safe
    point), so that an interruption lands mid-search."""
    from service_helpers import slow_model

    root.mkdir()
    case = planted.CASES["cancellation"]()
    onnx.save(case.model, str(root / "cancellation.onnx"))
    (root / "cancellation.json").write_text(json.dumps({
        "inputs": {"samples": 2, "seed": 0}, "tolerance": {"atol": case.atol, "rtol": case.rtol}}))
    _, settings = slow_model(root / "slow.onnx", blocks=24, iterations=4000)
    recipe = {"inputs": settings["inputs"], "tolerance": settings["tolerance"], "strategy": settings["search"]["strategy"]}
    (root / "slow.json").write_text(json.dumps(recipe))
    return ["cancellation", "slow"]


def _searching(run_dir, evaluations: int) -> bool:
    try:
        return len((run_dir / "search.jsonl").read_text().splitlines()) >= evaluations
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")
def test_cli_batch_on_ray_interrupted_and_resumed(cluster, tmp_path, run_cli):
    """SIGINT to the CLI process once the first model is done: the running tasks checkpoint and the CLI
    exits 130; the next run redoes nothing finished and evaluates nothing twice."""
    root, out = tmp_path / "zoo", tmp_path / "out"
    names = _slow_zoo(root)
    cmd = [sys.executable, "-m", "precision_doctor", "batch", str(root), "--out", str(out),
           "--executor", "ray", "--ray-address", cluster]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # once the first model is done and a slow one is in its search, where every evaluation is a safe point
        # (a capture under load can outlast the grace before a forced cancel)
        _wait_until(lambda: _status(out, names[0]) == "passed" and _searching(out / names[1], 2), proc,
                    f"{names[0]} finished and {names[1]} searching")
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "to continue where it stopped" in err
    done = {n for n in names if _status(out, n) == "passed"}
    assert names[0] in done and len(done) < len(names), done
    assert "interrupted" in {_status(out, n) for n in names}  # a running task was cancelled and checkpointed
    kept = _mtimes(out, done)

    code, stdout, stderr = run_cli("batch", root, "--out", out, "--executor", "ray", "--ray-address", cluster)
    assert code == 0, stderr
    assert f"not redone: {', '.join(sorted(done))}" in stderr and f"{len(names) - len(done)} diagnosed" in stdout
    assert _mtimes(out, done) == kept
    summary = json.loads((out / "summary.json").read_text())["models"]
    assert [(r["model"], r["status"]) for r in summary] == [(n, "passed") for n in names]
    for n in names:
        rep = json.loads((out / n / "report.json").read_text())
        assert rep["passed"] and rep["search"]["evaluations"] == len((out / n / "search.jsonl").read_text().splitlines())


def test_executor_ray_without_ray_is_one_line(tmp_path, run_cli, monkeypatch, zoo):  # noqa: F811
    root, _ = zoo
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: `import ray` raises ImportError
    out = tmp_path / "out"
    code, _, stderr = run_cli("batch", root, "--executor", "ray", "--out", out)
    assert code == 2 and "--executor ray needs Ray" in stderr and "pip install '.[ray]'" in stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr and not out.exists()
    for args, says in ((("--executor", "dask"), "unknown --executor 'dask'"),
                       (("--ray-address", "h:1"), "--ray-address needs --executor ray"),
                       (("--executor", "ray", "--jobs", "2"), "--jobs sets local worker processes"),
                       (("--executor", "ray", "--ray-cpus", "0"), "--ray-cpus must be positive")):
        code, _, stderr = run_cli("batch", root, *args, "--out", out)
        assert code == 2 and says in stderr and len(stderr.strip().splitlines()) == 1, stderr


# -- serve --executor ray ---------------------------------------------------------------------------------


def test_serve_on_ray_same_report_as_local_workers_cancel_and_a_dead_task(cluster, tmp_path):
    """A daemon whose jobs run as Ray tasks: a job's report is the local workers' report, a cancel stops a
    running job at its next safe point, and a job whose task's worker process is killed is re-queued and
    resumes from its checkpoint (the process worker's semantics)."""
    from service_helpers import Daemon, assert_resumed_once, planted_job_files, slow_model

    files = tmp_path / "files"
    model, samples, settings = planted_job_files(files / "three")
    body = {"model": str(model), "settings": {**settings, "inputs": {"files": [str(f) for f in samples]}}}
    local = Daemon(tmp_path / "local", "--allow-root", str(files), workers=1).start()
    d = Daemon(tmp_path / "ray", "--allow-root", str(files), "--executor", "ray", "--ray-address", cluster,
               workers=2).start(timeout=120)
    try:
        assert d.worker_pids() == []  # no worker processes: the jobs run as Ray tasks
        ids = [httpx.post(f"{x.url}/jobs", json=body, timeout=30).json()["id"] for x in (local, d)]
        ends = [x.wait_for(i, lambda j: j["state"] in ("done", "failed"), timeout=300, what="an end")
                for x, i in zip((local, d), ids)]
        assert [e["state"] for e in ends] == ["done", "done"], ends
        reports = [httpx.get(f"{x.url}/jobs/{i}/artifacts/report.json", timeout=30).json() for x, i in zip((local, d), ids)]
        def same(r):
            return (r["passed"], r["status"], r["answer"]["fallback_nodes"], r["search"]["evaluations"],
                    r["answer"]["fp32_flop_share"])
        assert same(reports[0]) == same(reports[1])
        runs = [json.loads(x) for x in (d.state_dir / "jobs" / ids[1] / "runs.log").read_text().splitlines()]
        assert runs[0]["pid"] != d.proc.pid  # run in a Ray worker process, not in the daemon

        slow, slow_settings = slow_model(files / "slow.onnx", blocks=24, iterations=16000)
        slow_settings["backends"] = {"backend": "emulate"}  # no GPU wanted: both run at once on the 1-GPU cluster
        cancel, dies = (httpx.post(f"{d.url}/jobs", json={"model": str(slow), "settings": slow_settings},
                                   timeout=30).json()["id"] for _ in range(2))
        running = [d.wait_for(j, lambda j: (j["progress"].get("evaluations") or 0) >= 2, timeout=300,
                              what="two evaluations") for j in (cancel, dies)]
        assert all(r["state"] == "running" for r in running)
        assert httpx.delete(f"{d.url}/jobs/{cancel}", timeout=30).status_code == 202
        task_pid = json.loads((d.state_dir / "jobs" / dies / "runs.log").read_text().splitlines()[-1])["pid"]
        run_dir = d.state_dir / "jobs" / dies / "run"
        os.kill(task_pid, signal.SIGKILL)
        before = (run_dir / "search.jsonl").read_text().splitlines()

        cancelled = d.wait_for(cancel, lambda j: j["state"] != "running", timeout=120, what="the cancel")
        assert cancelled["state"] == "cancelled" and cancelled["attempts"] == 1, cancelled
        partial = httpx.get(f"{d.url}/jobs/{cancel}/artifacts/report.json", timeout=30).json()
        assert partial["status"] == "interrupted"  # how many evaluations ran first is the machine's load

        resumed = d.wait_for(dies, lambda j: j["state"] in ("done", "failed"), timeout=300, what="an end")
        assert resumed["state"] == "done" and resumed["attempts"] == 2, resumed
        runs = [json.loads(x) for x in (d.state_dir / "jobs" / dies / "runs.log").read_text().splitlines()]
        assert [r["attempt"] for r in runs] == [1, 2] and runs[0]["pid"] == task_pid != runs[1]["pid"]
        assert_resumed_once(run_dir, before)
        assert httpx.get(f"{d.url}/healthz", timeout=10).json()["workers"] == 2  # the dead task's slot was refilled
    finally:
        d.stop()
        local.stop()
    assert d.proc.returncode == local.proc.returncode, d.log.read_text()[-3000:]  # SIGTERM ends both alike


def test_serve_executor_flags_are_checked_before_the_server_starts(tmp_path, run_cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    for args, says in ((("--executor", "ray"), "--executor ray needs Ray"),
                       (("--executor", "dask"), "unknown --executor 'dask'"),
                       (("--ray-cpus", "2"), "--ray-cpus needs --executor ray")):
        code, _, stderr = run_cli("serve", "--state-dir", tmp_path / "state", "--port", "1", *args)
        assert code == 2 and says in stderr and len(stderr.strip().splitlines()) == 1, stderr
        assert "Traceback" not in stderr and not (tmp_path / "state").exists()
