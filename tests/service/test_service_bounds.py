"""Issue 32, the daemon's side: a submission's server files are pinned once by their real path (a file named 40 times
is one file, not 40 copies), must be sample files by their suffix and at most MAX_JOB_FILES; a glob may not hold `..`
and its matching is bounded in count and time (off the event loop: create_job runs in the request's worker thread);
a job's samples are bounded as a run's (the worker refuses the tester's files from their headers, its peak memory
asserted under RLIMIT_AS); a failed job's message names the job's files as its directory does, never the daemon's
paths; `/healthz` states the limits."""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import httpx
import pytest
from evil_files import million_samples_npz, wide_text_h5
from service_helpers import Daemon, planted_job_files

from precision_doctor.data.input_spec import MAX_FILE_BYTES, MAX_RUN_SAMPLES, MAX_SAMPLE_BYTES
from precision_doctor.service.config import GLOB_TIME_S, MAX_JOB_FILES, ServiceConfig, StateDir
from precision_doctor.service.jobs import create_job
from precision_doctor.service.paths import Pins, expand_confined
from precision_doctor.service.store import Store
from precision_doctor.service.uploads import Refused, Submission
from precision_doctor.service.workers import run_claimed_job

DAEMON_AS_MB = 768  # the daemon's and each worker's address space (the daemon alone reserves about 450 MiB)
WORKER_PEAK_MB = 300  # a worker's resident peak after refusing the tester's files (1.2 to 2.4 GB before)
TERMINAL = ("done", "failed", "cancelled")


@pytest.fixture
def site(tmp_path):
    """A state directory, its store, an allowed root with a planted model and samples, and a submit function."""
    state = StateDir(tmp_path / "state")
    state.root.mkdir()
    root = tmp_path / "root"
    model, samples, settings = planted_job_files(root / "case", name="clean", n=3)
    store = Store(state.db)

    def submit(inputs: dict) -> object:
        config = ServiceConfig(state_dir=state.root, allow_roots=[root])
        return create_job(Submission("job", {**settings, "inputs": inputs}, model_path=str(model)), config, state, store)

    return state, store, root, model, samples, submit


def _refused(submit, inputs: dict) -> Refused:
    with pytest.raises(Refused) as info:
        submit(inputs)
    assert "\n" not in info.value.detail
    return info.value


def test_a_file_named_many_times_is_pinned_once(site):
    """The tester's 40 copies of one allowed file (800 MiB into the state folder): one pinned file now, named once;
    the same file by a link, a directory and a glob is that one file too, in search and held-out lists alike."""
    state, _, root, _, samples, submit = site
    (root / "case" / "again.npz").symlink_to(samples[0])
    job = submit({"files": [str(samples[0])] * 40 + [str(root / "case" / "again.npz")],
                  "validate_files": [str(samples[0]), str(root / "case"), str(root / "case" / "*_[0].npz")]})
    files, held = job.spec["inputs"]["files"], job.spec["inputs"]["validate_files"]
    assert len(files) == 1 and Path(files[0]).name == f"000-{samples[0].name}", files
    assert files[0] in held and len(held) == len(set(held)) == 3, held  # samples 0, 1, 2 of the directory
    pinned = [p for p in state.inputs_dir(job.id).rglob("*.npz")]
    assert len(pinned) == 3, pinned


def test_only_sample_files_are_pinned(site):
    state, _, root, model, samples, submit = site
    shutil.copy(model, root / "case" / "big.onnx")
    (root / "case" / "looks.npz").symlink_to(root / "case" / "big.onnx")  # a sample's name, a model's file
    for value in (str(root / "case" / "big.onnx"), str(root / "case" / "looks.npz")):
        err = _refused(submit, {"files": [str(samples[0]), value]})
        assert err.status_code == 422 and err.setting == "inputs.files" and "is not a sample file" in err.detail
    err = _refused(submit, {"files": [str(samples[0])], "reference_outputs": str(samples[1])})
    assert err.status_code == 422 and err.setting == "inputs.reference_outputs" and "end in .json" in err.detail
    assert not list((state.root / "jobs").glob("*")), "a refused submission leaves nothing behind"


def test_globs_refuse_parent_steps_and_are_bounded(site):
    """`ROOT + '/*/..' * 6 + '/s0.npz'` (58 characters) pinned one file 4,096 times; 14 levels would have listed 268
    million paths. Now refused as it is; matches and directory entries are bounded in count and time."""
    state, _, root, _, samples, submit = site
    for level in range(4):
        (root / "case" / f"d{level}").mkdir()
    err = _refused(submit, {"files": [str(root / "case") + "/*/.." * 6 + f"/{samples[0].name}"]})
    assert err.status_code == 422 and err.setting == "inputs.files" and "may not hold '..'" in err.detail
    assert not list((state.root / "jobs").glob("*"))
    for value in (str(root / "case" / "*.npz"), str(root / "case")):
        err = expect_refused(lambda v=value: expand_confined(v, [root], "inputs.files", "inputs.files", limit=2))
        assert err.status_code == 422 and "more than 2" in err.detail, err.detail
    for value in (str(root / "case" / "*.npz"), str(root / "case")):  # a deadline already past: the first entry stops it
        err = expect_refused(lambda v=value: expand_confined(v, [root], "inputs.files", "inputs.files", time_s=-1.0))
        assert err.status_code == 422 and "took too long" in err.detail, err.detail
    assert expand_confined(str(root / "case" / "*.npz"), [root], "inputs.files", limit=3) == [str(s) for s in samples]
    assert MAX_JOB_FILES == 10_000 and GLOB_TIME_S == 10.0


def expect_refused(call) -> Refused:
    with pytest.raises(Refused) as info:
        call()
    return info.value


def test_a_job_holds_a_bounded_number_of_files(site, tmp_path):
    state, _, root, _, samples, _ = site
    pins = Pins([root], limit=2)
    for s in samples[:2]:
        pins.pin(str(s), "inputs.files", tmp_path / "pinned", setting="inputs.files", suffixes=(".npz",))
    pins.pin(str(samples[0]), "inputs.files", tmp_path / "pinned", setting="inputs.files")  # pinned already: no count
    err = expect_refused(lambda: pins.pin(str(samples[2]), "inputs.files", tmp_path / "pinned", setting="inputs.files"))
    assert err.status_code == 422 and "more than 2 files in one job" in err.detail


def test_a_failed_jobs_message_shows_no_server_path(site):
    """The job's pinned wide-text sample is refused by the worker from its header; the message names the file as the
    submitter named it (wide.h5, not the job directory's inputs/samples/000-wide.h5), never the daemon's state
    directory."""
    state, store, root, _, _, submit = site
    wide_text_h5(root / "case" / "wide.h5")
    job = submit({"files": [str(root / "case" / "wide.h5")]})
    claimed = store.claim("w", os.getpid(), 60.0)
    assert run_claimed_job(state.root, claimed.id, claimed.token, claimed.spec, worker="w") == "failed"
    error = store.get(job.id).error
    assert error.startswith("inputs file wide.h5: array 'x' holds text of type |S33554432"), error
    assert str(state.root) not in error and os.path.realpath(state.root) not in error and "/tmp" not in error


# -- a real daemon, its workers under RLIMIT_AS ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def bounded_daemon(tmp_path_factory):
    """A daemon whose process (and so each worker it starts) may map at most DAEMON_AS_MB; `files` is its allowed root."""
    base = tmp_path_factory.mktemp("bounds")
    files = base / "files"
    files.mkdir()
    limit = DAEMON_AS_MB << 20

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {"PRECISION_DOCTOR_ORT_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    d = Daemon(base / "state", "--allow-root", str(files), env=env, preexec_fn=cap).start()
    yield d, files
    d.stop()


def _worker_peak_mb(d: Daemon) -> int:
    """The largest resident peak (VmHWM) of the daemon's workers."""
    peaks = []
    for pid in d.worker_pids():
        with open(f"/proc/{pid}/status") as f:
            peaks += [int(line.split()[1]) >> 10 for line in f if line.startswith("VmHWM:")]
    assert peaks, "no worker found"
    return max(peaks)


def test_the_daemon_refuses_the_testers_requests_with_bounded_workers(bounded_daemon):
    """The refused jobs run first, so that the worker's resident peak is theirs (a normal job of the planted model
    takes a worker to about 280 MiB by itself)."""
    d, files = bounded_daemon
    model, samples, settings = planted_job_files(files / "case", name="clean", n=2)
    health = httpx.get(f"{d.url}/healthz", timeout=30).json()
    assert health["limits"]["max_job_files"] == MAX_JOB_FILES and health["limits"]["max_job_samples"] == MAX_RUN_SAMPLES
    assert health["limits"]["max_sample_bytes"] == MAX_SAMPLE_BYTES and health["limits"]["max_file_bytes"] == MAX_FILE_BYTES
    # an uploaded 1,400-byte HDF5 declaring 1 GiB of text, and 6 uploaded files declaring 2**20 samples each
    wide = wide_text_h5(files / "wide.h5")
    million = million_samples_npz(files / "million.npz", sample_shape=(2, 32))  # the clean model's x: [2, 32]
    jobs = {}
    for label, parts in (("wide", [("inputs", ("wide.h5", wide.read_bytes()))]),
                         ("million", [("inputs", (f"m{i}.npz", million.read_bytes())) for i in range(6)])):
        r = httpx.post(f"{d.url}/jobs", files=[("model", ("m.onnx", model.read_bytes())), *parts],
                       data={"settings": '{"tolerance": {"atol": 0.01, "rtol": 0.01}}'}, timeout=60)
        assert r.status_code == 201, r.text
        jobs[label] = r.json()["id"]
    for label, words in (("wide", "inputs file wide.h5: array 'x' holds text of type |S33554432"),
                         ("million", "inputs file m1.npz brings the run's samples to 2,097,152")):
        end = d.wait_for(jobs[label], lambda j: j["state"] in TERMINAL, timeout=180, what="an end")
        assert end["state"] == "failed" and end["error"].startswith(words), end
        assert str(d.state_dir) not in end["error"] and "\n" not in end["error"]
    assert _worker_peak_mb(d) < WORKER_PEAK_MB
    # 40 names of one file: one pinned file
    r = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": {
        **settings, "inputs": {"files": [str(samples[0])] * 40}}}, timeout=60)
    assert r.status_code == 201, r.text
    assert len(d.job(r.json()["id"])["spec"]["inputs"]["files"]) == 1
    assert len(list((d.state_dir / "jobs" / r.json()["id"] / "inputs" / "samples").iterdir())) == 1
    # the multiplying glob
    r = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": {
        **settings, "inputs": {"files": [str(files / "case") + "/*/.." * 6 + f"/{samples[0].name}"]}}}, timeout=60)
    assert r.status_code == 422 and "may not hold '..'" in r.json()["detail"] and r.json()["setting"] == "inputs.files"
    assert httpx.get(f"{d.url}/healthz", timeout=30).json()["workers"] == 1
