"""The daemon's reliability and security, each against its own daemon: SIGKILL mid-job and a restart
(the job resumes from its checkpoint and completes once, queued jobs are kept, a `wait` client rides
it out), 50 jobs submitted at once (all complete, none lost or run twice), and the token."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from service_helpers import CLI, Daemon, assert_resumed_once, planted_job_files, slow_model


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its (gone) parent counts as ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_sigkill_mid_job_then_restart_resumes_and_completes_once(tmp_path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    model, settings = slow_model(files / "slow.onnx", blocks=24)  # ~25 evaluations: the kill lands mid-search
    quick, samples, quick_settings = planted_job_files(files / "quick")
    quick_settings["inputs"] = {"files": [str(f) for f in samples]}
    d = Daemon(tmp_path / "state", "--allow-root", str(files)).start()
    try:
        slow = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": settings}, timeout=30).json()
        queued = [httpx.post(f"{d.url}/jobs", json={"model": str(quick), "settings": quick_settings}, timeout=30).json()
                  for _ in range(2)]
        waiter = subprocess.Popen([*CLI, "wait", slow["id"]], env={**os.environ, "PRECISION_DOCTOR_SERVER": d.url},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running = d.wait_for(slow["id"], lambda j: (j["progress"].get("evaluations") or 0) >= 3, what="three evaluations")
        worker = running["worker_pid"]
        run_dir = d.state_dir / "jobs" / slow["id"] / "run"
        d.kill()
        before = (run_dir / "search.jsonl").read_text().splitlines()
        deadline = time.monotonic() + 30  # the orphaned worker notices, stops its job at a safe point, exits
        while _pid_alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _pid_alive(worker), "the worker outlived its daemon"
        assert not d.worker_pids()

        d.start()
        for job in [slow, *queued]:
            d.wait_for(job["id"], lambda j: j["state"] in ("done", "failed", "cancelled"), timeout=180, what="an end")
        final = d.job(slow["id"])
        assert final["state"] == "done" and final["attempts"] == 2, final
        assert_resumed_once(run_dir, before)
        runs = (d.state_dir / "jobs" / slow["id"] / "runs.log").read_text().splitlines()
        assert len(runs) == 2 and json.loads(runs[0])["pid"] == worker
        for job in queued:  # the queued jobs were kept and ran once
            j = d.job(job["id"])
            assert j["state"] == "done" and j["attempts"] == 1 and j["result"]["passed"], j
        out, errs = waiter.communicate(timeout=120)
        assert waiter.returncode == 0, out + errs  # the client waited through the restart
        assert slow["id"] in out and "PASSED" in out
    finally:
        d.stop()


@pytest.mark.slow
def test_fifty_concurrent_jobs_all_complete_once(tmp_path) -> None:
    files = tmp_path / "files"
    models = [planted_job_files(files / name, name=name) for name in ("clean", "overflow_island", "three_defects")]
    d = Daemon(tmp_path / "state", "--allow-root", str(files), workers=2).start()
    try:
        def submit(i: int) -> str:
            model, samples, settings = models[i % len(models)]
            body = {"model": str(model), "name": f"job-{i}",
                    "settings": {**settings, "inputs": {"files": [str(f) for f in samples]}}}
            r = httpx.post(f"{d.url}/jobs", json=body, timeout=60)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        with ThreadPoolExecutor(16) as pool:
            ids = list(pool.map(submit, range(50)))
        assert len(set(ids)) == 50
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            states = {j["id"]: j["state"] for j in httpx.get(f"{d.url}/jobs?limit=100", timeout=30).json()["jobs"]}
            if all(states.get(i) in ("done", "failed", "cancelled") for i in ids):
                break
            time.sleep(0.5)
        jobs = [d.job(i) for i in ids]
        not_done = [(j["id"], j["state"], j["error"]) for j in jobs if j["state"] != "done"]
        assert not not_done, not_done
        assert all(j["attempts"] == 1 and j["result"]["passed"] for j in jobs)
        for j in jobs:  # each ran exactly once: one attempt in its log, one report of its own
            runs = (d.state_dir / "jobs" / j["id"] / "runs.log").read_text().splitlines()
            assert len(runs) == 1, (j["id"], runs)
            report = json.loads((d.state_dir / "jobs" / j["id"] / "run" / "report.json").read_text())
            assert report["search"]["evaluations"] == j["result"]["evaluations"]
        reused = sum(j["result"]["capture_reused"] for j in jobs)
        assert reused == 50 - len(models), reused  # one capture per model, shared by the others
        assert httpx.get(f"{d.url}/healthz").json()["jobs"]["done"] == 50
    finally:
        d.stop()


def test_token_is_required_when_set(tmp_path) -> None:
    files = tmp_path / "files"
    model, samples, settings = planted_job_files(files, name="clean")
    token = "s3cret-token-for-tests"
    d = Daemon(tmp_path / "state", "--allow-root", str(files), "--token", token).start()
    try:
        assert httpx.get(f"{d.url}/healthz").status_code == 200  # open: liveness only
        for method, path in [("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/jobs/0123456789ab"), ("GET", "/docs"),
                             ("GET", "/openapi.json"), ("DELETE", "/jobs/0123456789ab")]:
            for headers in ({}, {"authorization": "Bearer wrong-token"}, {"authorization": token}):
                r = httpx.request(method, f"{d.url}{path}", headers=headers)
                assert r.status_code == 401, (method, path, headers, r.status_code)
        ui = httpx.get(f"{d.url}/ui")
        assert ui.status_code == 303 and ui.headers["location"] == "/login"
        auth = {"authorization": f"Bearer {token}"}
        assert httpx.get(f"{d.url}/jobs", headers=auth).status_code == 200
        # the CLI client takes the token from the environment
        denied = d.cli("submit", model, *[a for f in samples for a in ("--inputs", f)])
        assert denied.returncode == 2 and "401" in denied.stderr and "Traceback" not in denied.stderr
        sub = d.cli("submit", model, *[a for f in samples for a in ("--inputs", f)], "--atol", "0.01", "--rtol", "0.01",
                    token=token)
        assert sub.returncode == 0, sub.stderr
        assert d.cli("wait", sub.stdout.split()[-1], token=token).returncode == 0
        # a browser signs in once; the cookie then opens the pages and the API
        with httpx.Client(base_url=d.url) as browser:
            assert browser.post("/login", data={"token": "nope"}).status_code == 401
            r = browser.post("/login", data={"token": token})
            assert r.status_code == 303 and "httponly" in r.headers["set-cookie"].lower()
            assert browser.get("/ui").status_code == 200 and browser.get("/jobs").status_code == 200
        # another host name is fine with a token (no loopback-only rule)
        assert httpx.get(f"{d.url}/jobs", headers={**auth, "host": "pd.example"}).status_code == 200
    finally:
        d.stop()


def test_serve_and_submit_refuse_bad_input_in_one_line(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PRECISION_DOCTOR_TOKEN"}
    env["PRECISION_DOCTOR_SERVER"] = "http://127.0.0.1:9"  # nothing listens there
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "m.onnx").write_text("x")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for args, words in [
            (["serve", "--host", "0.0.0.0", "--state-dir", str(tmp_path / "s")], "--token"),
            (["serve", "--port", port, "--state-dir", str(tmp_path / "s")], "--port"),
            (["serve", "--state-dir", str(tmp_path / "a_file")], "--state-dir"),
            (["serve", "--workers", "0", "--state-dir", str(tmp_path / "s")], "--workers"),
            (["submit", str(tmp_path / "missing.onnx")], "MODEL"),
            (["submit", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "missing.npz")], "--inputs"),
            (["submit", str(tmp_path / "m.onnx")], "cannot reach the daemon"),
            (["jobs"], "cannot reach the daemon"),
        ]:
            r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert not (tmp_path / "s" / "jobs.db").exists()  # refused before anything started
