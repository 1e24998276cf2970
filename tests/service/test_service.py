"""The daemon through a real uvicorn on loopback and real client processes: submit/wait/status/jobs/
cancel, exit codes, the capture shared across jobs, artifacts confined to the run directory, the
upload limit, malformed requests (4xx, never a 500), server-sent events, and a worker that dies."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import numpy as np
import onnx
import pytest
from service_helpers import Daemon, assert_resumed_once, planted_job_files, slow_model

from precision_doctor.cli.shared import PROGRESS_LINE


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    """A daemon with two workers, a 2 MiB upload limit, and `root` as its allowed root."""
    root = tmp_path_factory.mktemp("svc")
    (root / "files").mkdir()
    d = Daemon(root / "state", "--allow-root", str(root / "files"), "--max-upload-mb", "2", workers=2).start()
    yield d, root / "files"
    d.stop()


def _settings_flags(settings: dict) -> list[str]:
    tol = settings["tolerance"]
    return ["--atol", str(tol["atol"]), "--rtol", str(tol["rtol"])]


def test_submit_wait_status_and_the_shared_capture(env) -> None:
    d, files = env
    model, samples, settings = planted_job_files(files / "three")
    sub = d.cli("submit", model, *[a for f in samples for a in ("--inputs", f)], *_settings_flags(settings),
                "--cost", "nodes")  # the node-minimal answer's size is known
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().splitlines()[-1]
    assert len(job_id) == 12 and job_id in sub.stderr  # the id alone on the last line of stdout
    waited = d.cli("wait", job_id)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "done: PASSED" in waited.stdout and "with 7 of" in waited.stdout
    # stderr is not a terminal here: plain lines instead of the bar, the last one of the job's end
    followed = [ln for ln in waited.stderr.splitlines() if PROGRESS_LINE.match(ln) and f"job {job_id}: " in ln]
    assert followed and "done" in followed[-1] and "\x1b" not in waited.stderr, waited.stderr
    # followed again once it has ended (a job that ends before `wait` connects, made certain): the same final lines
    again = d.cli("wait", job_id)
    assert again.returncode == 0 and again.stdout == waited.stdout, again.stdout + again.stderr
    ended = [ln for ln in again.stderr.splitlines() if PROGRESS_LINE.match(ln)]
    assert len(ended) == 1 and f"job {job_id}: done, " in ended[0] and "so far" not in ended[0], again.stderr  # once

    status = d.cli("status", job_id, "--json")
    assert status.returncode == 0, status.stderr
    job = json.loads(status.stdout)
    assert job["state"] == "done" and job["attempts"] == 1 and job["progress"]["phase"] == "done"
    assert job["report"]["passed"] is True and len(job["report"]["answer"]["fallback_nodes"]) == 7
    assert job["result"]["capture_reused"] is False \
        and job["result"]["evaluations"] == job["report"]["search"]["evaluations"]

    # the same model and samples again, this time named by server path: the capture is reused
    again = d.cli("submit", model, "--remote", *[a for f in samples for a in ("--inputs", f)], *_settings_flags(settings),
                  "--cost", "nodes")
    assert again.returncode == 0, again.stderr
    second = again.stdout.strip().splitlines()[-1]
    assert d.cli("wait", second).returncode == 0
    job2 = json.loads(d.cli("status", second, "--json").stdout)
    assert job2["result"]["capture_reused"] is True
    # same answer from the shared capture
    assert job2["report"]["answer"]["fallback_nodes"] == job["report"]["answer"]["fallback_nodes"]
    listed = d.cli("jobs")
    assert listed.returncode == 0 and job_id in listed.stdout and second in listed.stdout
    assert httpx.get(f"{d.url}/jobs/{job_id}/report").headers["content-type"].startswith("text/html")


def test_wait_exit_codes(env) -> None:
    d, files = env
    model, samples, settings = planted_job_files(files / "codes")
    uploads = [a for f in samples for a in ("--inputs", f)]
    # budget of one evaluation: done, but without a passing set -> 1
    no_set = d.cli("submit", model, *uploads, *_settings_flags(settings), "--max-evaluations", "1").stdout.split()[-1]
    # a sample whose input name the model does not have: refused at submission (2), naming the file as given
    bad = files / "codes" / "wrong_name.npz"
    np.savez(bad, y=np.zeros((2, 16), np.float32))
    refused = d.cli("submit", model, "--inputs", bad)
    assert refused.returncode == 2 and "wrong_name.npz: unknown input 'y'" in refused.stderr, refused.stderr
    # one of the right name and the wrong rank (its values are read when the job runs): the job fails -> 3
    bad = files / "codes" / "wrong_rank.npz"
    np.savez(bad, x=np.zeros((2, 3, 5, 7), np.float32))
    failing = d.cli("submit", model, "--inputs", bad).stdout.split()[-1]
    r1, r3 = d.cli("wait", no_set), d.cli("wait", failing)
    assert r1.returncode == 1, r1.stdout + r1.stderr
    assert "INCOMPLETE (budget exhausted)" in r1.stdout
    assert r3.returncode == 3, r3.stdout + r3.stderr
    error = d.job(failing)["error"]  # the file as the submitter named it, not the job's pinned copy
    assert d.job(failing)["state"] == "failed" and "x" in error and "wrong_rank.npz" in error, error
    assert "inputs/samples/" not in error, error
    unknown = d.cli("status", "0123456789ab")
    assert unknown.returncode == 2 and "no job" in unknown.stderr and "Traceback" not in unknown.stderr
    bad_flag = d.cli("submit", model, "--margin", "1.5")
    assert bad_flag.returncode == 2 and "--margin" in bad_flag.stderr and "Traceback" not in bad_flag.stderr


def test_a_jobs_warnings_reach_its_followers(env) -> None:
    """A tolerance below FP16's rounding at the outputs (polygraphy's default 1e-5): the CLI warns before its search;
    a job says it in its progress (`warnings`), and `wait` prints it once."""
    d, files = env
    model, samples, _ = planted_job_files(files / "warned")
    job_id = d.cli("submit", model, *[a for f in samples for a in ("--inputs", f)], "--max-evaluations", "1",
                   ).stdout.split()[-1]
    waited = d.cli("wait", job_id)
    assert waited.returncode in (0, 1), waited.stdout + waited.stderr
    said = [ln for ln in waited.stderr.splitlines() if ln.startswith(f"warning: job {job_id}: ")]
    assert len(said) == 1 and "is tighter than FP16 can represent at the outputs" in said[0], waited.stderr
    warnings = d.job(job_id)["progress"]["warnings"]
    assert len(warnings) == 1 and warnings[0] in " ".join(said[0].split())
    again = d.cli("wait", job_id)  # the job has ended: its warning once more, once, and its final state line
    assert again.returncode == waited.returncode and again.stdout == waited.stdout
    assert [ln for ln in again.stderr.splitlines() if ln.startswith("warning:")] == said, again.stderr
    assert [ln for ln in again.stderr.splitlines() if PROGRESS_LINE.match(ln) and f"job {job_id}: " in ln], again.stderr


def test_cancel_running_and_finished_jobs(env) -> None:
    d, files = env
    model, settings = slow_model(files / "slow_cancel.onnx", blocks=24, iterations=16000)  # a search of tens of seconds
    job = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": settings}, timeout=30).json()
    d.wait_for(job["id"], lambda j: (j["progress"].get("evaluations") or 0) >= 2, what="two evaluations")
    r = d.cli("cancel", job["id"])
    assert r.returncode == 0 and "asked to stop" in r.stdout, r.stdout + r.stderr
    waited = d.cli("wait", job["id"])
    assert waited.returncode == 3, waited.stdout + waited.stderr
    final = d.job(job["id"])
    assert final["state"] == "cancelled" and final["attempts"] == 1
    # the search stopped at a safe point: its partial report says so and lists no more evaluations than it ran
    report = httpx.get(f"{d.url}/jobs/{job['id']}/artifacts/report.json").json()
    assert report["status"] == "interrupted"
    lines = httpx.get(f"{d.url}/jobs/{job['id']}/artifacts/search.jsonl").text.splitlines()
    assert len(lines) == report["search"]["evaluations"]  # how many ran before the cancel landed depends on the machine's load
    again = httpx.delete(f"{d.url}/jobs/{job['id']}")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]


def test_artifact_names_are_confined_to_the_run_directory(env) -> None:
    d, files = env
    model, samples, settings = planted_job_files(files / "art", name="clean")
    job = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": {
        **settings, "inputs": {"files": [str(f) for f in samples]}}}, timeout=30).json()
    d.wait_for(job["id"], lambda j: j["state"] == "done", what="done")
    base = f"{d.url}/jobs/{job['id']}/artifacts"
    names = [a["name"] for a in httpx.get(base).json()["artifacts"]]
    assert "report.json" in names and "fixed.onnx" in names
    assert httpx.get(f"{base}/report.json").json()["passed"] is True
    onnx.load_from_string(httpx.get(f"{base}/fixed.onnx").content)
    run_dir = d.state_dir / "jobs" / job["id"] / "run"
    (run_dir / "leak").symlink_to(d.state_dir / "jobs.db")
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "up").symlink_to(run_dir.parent)
    for name, status in [
        ("..%2F..%2F..%2Fjobs.db", 400), ("%2E%2E/%2E%2E/jobs.db", 400), ("%2Fetc%2Fpasswd", 400),
        ("sub/..%2F..%2Fjob.lock", 400), ("leak", 403), ("sub/up/runs.log", 403), (".activations.h5.partial", 404),
        ("no_such_file", 404), ("sub", 404),
    ]:
        r = httpx.get(f"{base}/{name}")
        assert r.status_code == status, (name, r.status_code, r.text)
        assert "detail" in r.json() and "Traceback" not in r.text
    assert "leak" not in [a["name"] for a in httpx.get(base).json()["artifacts"]]


def test_a_report_of_an_earlier_version_is_refused_in_one_line(env) -> None:
    """A job whose report.json an earlier daemon wrote: its summary is a 409 saying why (not the server's path), its
    page shows the job without the brief, and the report's files are still served as they are."""
    d, files = env
    model, samples, settings = planted_job_files(files / "old", name="clean")
    job = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": {
        **settings, "inputs": {"files": [str(f) for f in samples]}}}, timeout=30).json()
    d.wait_for(job["id"], lambda j: j["state"] == "done", what="done")
    summary = f"{d.url}/jobs/{job['id']}/summary"
    assert httpx.get(summary).status_code == 200
    report = d.state_dir / "jobs" / job["id"] / "run" / "report.json"
    report.write_text(json.dumps({**json.loads(report.read_text()), "schema_version": 1}))
    r = httpx.get(summary)
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == (f"job {job['id']}'s report.json: written by an earlier precision-doctor "
                                  "(schema_version 1; this one reads 3 only): run the diagnosis again to write a "
                                  "current report")
    assert httpx.get(f"{d.url}/ui/jobs/{job['id']}").status_code == 200
    assert httpx.get(f"{d.url}/jobs/{job['id']}/artifacts/report.json").json()["schema_version"] == 1


def test_malformed_requests_get_4xx_with_a_message(env) -> None:
    d, files = env
    model, samples, _ = planted_job_files(files / "bad", name="clean")
    outside = d.state_dir.parent / "outside.onnx"
    outside.write_bytes(model.read_bytes())
    (files / "bad" / "link.onnx").symlink_to(outside)
    url = f"{d.url}/jobs"
    cases = [
        (dict(json={"model": str(model), "settings": {"search": {"margin": 2}}}), 422, "search.margin"),
        (dict(json={"model": str(model), "settings": {"search": {"nope": 1}}}), 422, "search.nope"),
        (dict(json={"model": str(model), "settings": {"tolerance": {"atol": "x"}}}), 422, "tolerance.atol"),
        (dict(json={"model": str(model), "settings": {"inputs": {"samples": 1.5}}}), 422, "inputs.samples"),
        (dict(json={"model": str(model), "settings": {"backends": {"backend": "tpu"}}}), 422, "backends.backend"),
        (dict(json={"model": str(model), "settings": {"search": {"strategy": "magic"}}}), 422, "strategy"),
        (dict(json={"model": str(model), "settings": {"inputs": {"val_ranges": ["x:[1"]}}}), 422, "inputs.val_ranges"),
        (dict(json={"model": str(model), "settings": []}), 422, "settings"),
        (dict(json={"model": str(outside)}), 403, "is not a file this server may read"),
        (dict(json={"model": str(files / "bad" / "link.onnx")}), 403, "is not a file this server may read"),
        (dict(json={"model": "relative.onnx"}), 400, "absolute"),
        (dict(json={"model": str(files / "missing.onnx")}), 403, "is not a file this server may read"),  # the same
        (dict(json={"model": str(model), "settings": {"inputs": {"files": ["/etc/hostname"]}}}), 403, "inputs.files"),
        (dict(json={"settings": {}}), 400, "model"),
        (dict(json={"model": str(model), "extra": 1}), 400, "unknown field"),
        (dict(content=b"{not json", headers={"content-type": "application/json"}), 400, "not valid JSON"),
        (dict(content=b"hello", headers={"content-type": "text/plain"}), 415, "multipart"),
        (dict(files={"model": ("m.txt", b"x")}), 400, ".onnx"),
        (dict(files={"inputs": ("a.npz", b"x")}), 400, "exactly one model"),
        (dict(files={"model": ("m.onnx", model.read_bytes())}, data={"settings": "{bad"}), 400, "settings"),
        (dict(files={"model": ("m.onnx", model.read_bytes())}, data={"surprise": "1"}), 400, "unknown form field"),
        (dict(content=b"--x\r\ngarbage", headers={"content-type": "multipart/form-data; boundary=x"}), 400, "model"),
    ]
    for kwargs, status, words in cases:
        r = httpx.post(url, timeout=30, **kwargs)
        assert r.status_code == status, (kwargs.get("json"), r.status_code, r.text)
        assert words in r.json()["detail"] or words == r.json().get("setting"), (words, r.text)
    for method, path, status in [("GET", "/jobs/ffffffffffff", 404), ("GET", "/jobs?state=bogus", 400),
                                 ("GET", "/jobs?limit=0", 422), ("DELETE", "/jobs/ffffffffffff", 404),
                                 ("GET", "/jobs/ffffffffffff/report", 404), ("GET", "/ui/jobs/ffffffffffff", 404)]:
        r = httpx.request(method, f"{d.url}{path}")
        assert r.status_code == status and "detail" in r.json(), (path, r.status_code, r.text)
    assert not list((d.state_dir / "jobs").glob("*/inputs/*.txt"))  # refused uploads leave nothing behind
    assert httpx.get(f"{d.url}/jobs", headers={"host": "evil.example"}).status_code == 421  # DNS rebinding


def test_uploads_above_the_limit_get_413(env) -> None:
    d, _ = env
    big = b"\0" * (3 << 20)
    r = httpx.post(f"{d.url}/jobs", files={"model": ("m.onnx", big)}, timeout=30)
    assert r.status_code == 413 and "limit" in r.json()["detail"]

    def chunks():  # no Content-Length: the limit applies to the bytes as they arrive
        yield (b'--b\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n'
               b"Content-Type: application/octet-stream\r\n\r\n")
        for _ in range(12):
            yield b"\0" * (256 << 10)
        yield b"\r\n--b--\r\n"

    r = httpx.post(f"{d.url}/jobs", content=chunks(), headers={"content-type": "multipart/form-data; boundary=b"}, timeout=30)
    assert r.status_code == 413, r.text
    assert not list((d.state_dir / "jobs").glob("*/inputs/m.onnx"))


def test_events_stream_the_job_to_its_end(env) -> None:
    d, files = env
    model, samples, settings = planted_job_files(files / "sse")
    job = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": {
        **settings, "inputs": {"files": [str(f) for f in samples]}}}, timeout=30).json()
    events = []
    with httpx.stream("GET", f"{d.url}/jobs/{job['id']}/events", timeout=60) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in resp.iter_lines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line[5:])))
    assert events[-1][0] == "end" and events[-1][1]["state"] == "done"
    assert all(e[1]["id"] == job["id"] for e in events) and len(events) >= 2


def test_a_dead_worker_is_replaced_and_its_job_resumes(env) -> None:
    d, files = env
    model, settings = slow_model(files / "slow_worker.onnx", blocks=24)
    job = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": settings}, timeout=30).json()
    running = d.wait_for(job["id"], lambda j: (j["progress"].get("evaluations") or 0) >= 3, what="three evaluations")
    pid = running["worker_pid"]
    lock = (d.state_dir / "jobs" / job["id"] / "job.lock").read_text().split()
    assert lock[0] == str(pid)  # the lock file names the owner
    run_dir = d.state_dir / "jobs" / job["id"] / "run"
    os.kill(pid, signal.SIGKILL)
    before = (run_dir / "search.jsonl").read_text().splitlines()
    done = d.wait_for(job["id"], lambda j: j["state"] in ("done", "failed"), what="an end")
    assert done["state"] == "done" and done["attempts"] == 2, done
    runs = [json.loads(x) for x in (d.state_dir / "jobs" / job["id"] / "runs.log").read_text().splitlines()]
    assert [r["attempt"] for r in runs] == [1, 2] and runs[0]["pid"] == pid != runs[1]["pid"]
    assert_resumed_once(run_dir, before)
    deadline = time.monotonic() + 30
    while httpx.get(f"{d.url}/healthz").json()["workers"] != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(f"{d.url}/healthz").json()["workers"] == 2
