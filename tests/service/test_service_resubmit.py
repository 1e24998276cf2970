"""`precision-doctor resubmit ID` against a real daemon (service/resubmit.py): an incomplete job's next step, run as its
report prints it, resumes the search on the daemon's copies of the files (nothing uploaded again, no evaluation
repeated); a change of settings starts over; a running job, a file flag, an unknown job and a job whose files the
retention removed are refused in one line (the last naming the files to bring)."""

from __future__ import annotations

import json
import shlex

import httpx
import pytest
from service_helpers import CLI, Daemon, planted_job_files, slow_model

from precision_doctor.service.config import StateDir
from precision_doctor.service.retention import Retention, prune
from precision_doctor.service.store import Store


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("resubmit")
    (root / "files").mkdir()
    d = Daemon(root / "state", "--allow-root", str(root / "files"), workers=1).start()
    yield d, root / "files"
    d.stop()


def _flags(settings: dict) -> list[str]:
    tol = settings["tolerance"]
    return ["--atol", str(tol["atol"]), "--rtol", str(tol["rtol"])]


def _report(d: Daemon, job_id: str, name: str = "report.json") -> httpx.Response:
    return httpx.get(f"{d.url}/jobs/{job_id}/artifacts/{name}", timeout=10)


def _checkpoint(d: Daemon, job_id: str) -> list[dict]:
    return [json.loads(x) for x in _report(d, job_id, "search.jsonl").text.splitlines() if x.strip()]


def test_an_incomplete_jobs_next_step_resumes_it_as_printed(env, tmp_path) -> None:
    d, files = env
    model, samples, settings = planted_job_files(files / "budget")
    first = d.cli("submit", model, *[a for f in samples for a in ("--inputs", f)], *_flags(settings),
                  "--max-evaluations", "2").stdout.split()[-1]
    waited = d.cli("wait", first)
    assert waited.returncode == 1 and "INCOMPLETE (budget exhausted)" in waited.stdout, waited.stdout + waited.stderr
    before = _checkpoint(d, first)
    assert len(before) == 2
    # the report's next step, as printed (the markdown report: the command under "Continue it where it stopped")
    md = _report(d, first, "report.md").text
    step = md.split("Continue it where it stopped")[1].split("```bash")[1].split("```")[0].strip()
    assert step == shlex.join(["precision-doctor", "resubmit", first, "--server", d.url]), step
    assert "wait" not in step and "--inputs" not in step  # nothing that does nothing, no file the user must find
    ran = d.cli(*shlex.split(step)[1:])  # from an empty folder: the daemon has the files
    assert ran.returncode == 0, ran.stderr
    second = ran.stdout.strip().splitlines()[-1]
    assert second != first and "resuming its search where it stopped" in ran.stderr and f"wait {second}" in ran.stderr
    done = d.cli("wait", second)
    assert done.returncode == 0 and "done: PASSED" in done.stdout, done.stdout + done.stderr
    after = _checkpoint(d, second)
    assert after[:2] == before  # continued: the old evaluations kept, none repeated
    sets = [tuple(sorted(x["fallback"])) for x in after]
    assert len(sets) == len(set(sets)) > 2
    report = _report(d, second).json()
    assert report["status"] == "complete" and report["passed"] and report["search"]["evaluations"] == len(after)
    assert report["invocation"]["service_job"]["id"] == second and report["invocation"]["service_job"]["model"] == model.name
    job = d.job(second)
    assert job["spec"]["search"]["max_evaluations"] is None  # the budget is each run's own
    assert f"/jobs/{second}/" in job["spec"]["model"] and json.loads(_report(d, first).text)["status"] == "budget_exhausted"

    # other settings: the job again from the start on the same files, with the change (and the old budget)
    changed = d.cli("resubmit", first, "--margin", "0.2", "--name", "wider")
    assert changed.returncode == 0, changed.stderr
    third = changed.stdout.split()[-1]
    assert "from the start, with the changes" in changed.stderr
    assert d.cli("wait", third).returncode == 1  # its budget (2) is kept: a fresh run of 2 evaluations
    job = d.job(third)
    assert job["name"] == "wider" and job["spec"]["search"]["margin"] == 0.2 and job["spec"]["search"]["max_evaluations"] == 2
    assert len(_checkpoint(d, third)) == 2


def test_resubmit_refusals_are_one_line(env) -> None:
    d, files = env
    model, settings = slow_model(files / "slow_resubmit.onnx", blocks=24, iterations=16000)
    running = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": settings}, timeout=30).json()["id"]
    d.wait_for(running, lambda j: j["state"] == "running", what="its start")
    busy = d.cli("resubmit", running)
    assert busy.returncode == 2 and "still running" in busy.stderr and "Traceback" not in busy.stderr, busy.stderr
    assert d.cli("cancel", running).returncode == 0
    d.wait_for(running, lambda j: j["state"] == "cancelled", what="the cancel")
    as_flag = d.cli("resubmit", running, "--inputs", "x.npz")
    assert as_flag.returncode == 2 and "--inputs" in as_flag.stderr and "Traceback" not in as_flag.stderr
    api = httpx.post(f"{d.url}/jobs/{running}/resubmit", json={"settings": {"inputs": {"files": ["/etc/passwd"]}}}, timeout=10)
    assert api.status_code == 422 and api.json()["setting"] == "inputs.files"
    bad = d.cli("resubmit", running, "--margin", "1.5")
    assert bad.returncode == 2 and "--margin" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    unknown = d.cli("resubmit", "0123456789ab")
    assert unknown.returncode == 2 and "no job" in unknown.stderr


def test_a_job_whose_files_are_gone_names_the_files_to_bring(tmp_path) -> None:
    (tmp_path / "files").mkdir()
    d = Daemon(tmp_path / "state", workers=1).start()
    try:
        model, samples, settings = planted_job_files(tmp_path / "mine")
        job_id = d.cli("submit", model, *[a for f in samples for a in ("--inputs", f)], *_flags(settings),
                       "--max-evaluations", "1").stdout.split()[-1]
        assert d.cli("wait", job_id).returncode == 1
        state = StateDir(tmp_path / "state")
        assert prune(Store(state.db), state, Retention(keep_jobs=0)) == [job_id]  # what the retention's pass does
        gone = d.cli("resubmit", job_id)
        assert gone.returncode == 2 and "were removed" in gone.stderr and "Traceback" not in gone.stderr, gone.stderr
        said = " ".join(gone.stderr.split())
        submit = said.split("from the folder that holds them: ")[1]
        assert submit.startswith(f"precision-doctor submit {model.name} ")
        assert all(f"--inputs {f.name}" in submit for f in samples) and f"--server {d.url}" in submit, submit
        assert "--max-evaluations 1" in submit
        # ... and it runs as said, from the folder that holds them
        import subprocess

        again = subprocess.run([*CLI, *shlex.split(submit)[1:]], cwd=tmp_path / "mine", capture_output=True, text=True,
                               timeout=120, env={**d.env})
        assert again.returncode == 0, again.stderr
    finally:
        d.stop()
