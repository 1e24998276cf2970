"""`batch`: a zoo of planted models (one broken file), summaries, resuming, executors, recipes."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from precision_doctor import planted
from precision_doctor.batch.executors import InlineExecutor, LocalExecutor, threads_per_worker
from precision_doctor.batch.jobs import ENTRY
from precision_doctor.batch.orchestrate import run_batch
from precision_doctor.batch.recipes import discover
from precision_doctor.errors import UserError
from precision_doctor.spec import CaptureSpec, RunSpec


@pytest.fixture
def zoo(tmp_path):
    """overflow_island (JSON recipe, .npz input files), large_reducesum (YAML recipe, generated inputs),
    broken (not an ONNX file)."""
    root = tmp_path / "zoo"
    (root / "inputs").mkdir(parents=True)
    case = planted.overflow_island()
    onnx.save(case.model, str(root / "overflow_island.onnx"))
    files = []
    for i, s in enumerate(case.samples(3, seed=0)):
        np.savez(root / "inputs" / f"oi_{i}.npz", **s)
        files.append(f"inputs/oi_{i}.npz")
    (root / "overflow_island.json").write_text(json.dumps({
        "inputs": {"files": files},
        "tolerance": {"atol": case.atol, "rtol": case.rtol},
        "max_evaluations": 60,
    }))
    lr = planted.large_reducesum()
    onnx.save(lr.model, str(root / "large_reducesum.onnx"))
    (root / "large_reducesum.yaml").write_text(
        "inputs:\n  samples: 2\n  seed: 1\n  val_range: {x: [20, 40]}\n"
        f"tolerance: {{atol: {lr.atol}, rtol: {lr.rtol}}}\nstrategy: auto\n"
    )
    (root / "broken.onnx").write_bytes(b"this is not a protobuf \x00\x01\x02" * 10)
    return root, {"overflow_island": case.expected, "large_reducesum": lr.expected}


def _mtimes(out, names):
    return {n: os.stat(out / n / "report.json").st_mtime_ns for n in names}


def test_batch_summary_error_and_rerun_skips(zoo, tmp_path):
    root, expected = zoo
    out = tmp_path / "out"
    res = run_batch(root, out, executor=InlineExecutor())
    rows = {r.model: r for r in res.rows}
    assert list(rows) == ["broken", "large_reducesum", "overflow_island"]
    assert [r.model for r in res.errors] == ["broken"]
    err = rows["broken"].message
    assert "not a readable ONNX model" in err and "\n" not in err
    for name, want in expected.items():
        r = rows[name]
        assert r.status == "passed" and r.passed is True
        rep = json.loads((out / name / "report.json").read_text())
        assert set(rep["answer"]["fallback_nodes"]) == want
        assert r.fallback_size == len(want) and r.evaluations >= 1
        assert (out / name / "report.html").is_file() and (out / name / ENTRY).is_file()
    # The recipes were applied: files for one, generated samples (seed 1) for the other.
    rep = json.loads((out / "large_reducesum" / "report.json").read_text())
    assert rep["search"]["inputs"]["generated"] == 2 and rep["search"]["inputs"]["seed"] == 1
    assert rep["search"]["tolerance"]["atol"] == pytest.approx(1e-2)

    with open(out / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert [t["model"] for t in table] == ["broken", "large_reducesum", "overflow_island"]
    assert [t["status"] for t in table] == ["error", "passed", "passed"]
    assert table[2]["report"] == "overflow_island/report.html"
    html = (out / "summary.html").read_text()
    assert 'href="overflow_island/report.html"' in html and 'href="large_reducesum/report.html"' in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html) and "<link" not in html  # self-contained
    assert "not a readable ONNX model" in html

    # Again: the finished models are not redone (the error is tried again).
    before = _mtimes(out, expected)
    again = run_batch(root, out, executor=InlineExecutor())
    assert sorted(again.skipped) == sorted(expected) and again.ran == ["broken"]
    assert _mtimes(out, expected) == before
    assert [r.status for r in again.rows] == ["error", "passed", "passed"]

    # A changed recipe (settings) makes that one model run again, and only that one.
    (root / "large_reducesum.yaml").write_text("inputs:\n  samples: 2\n  seed: 2\n  val_range: {x: [20, 40]}\n"
                                               "tolerance: {atol: 0.01, rtol: 0.01}\n")
    third = run_batch(root, out, executor=InlineExecutor())
    assert sorted(third.ran) == ["broken", "large_reducesum"] and third.skipped == ["overflow_island"]


def test_interrupted_batch_resumes(zoo, tmp_path, monkeypatch):
    root, expected = zoo
    out = tmp_path / "out"
    # the whole capture kept: below, a finished run is cut back to one cut off mid-search, which keeps it whole
    keep = RunSpec(model="", capture=CaptureSpec(keep="all"))
    # "Interrupted" after the first model: only it ran; the summary shows the others pending.
    first = run_batch(root, out, keep, executor=InlineExecutor(), only=["overflow_island"])
    assert first.ran == ["overflow_island"]
    statuses = {r.model: r.status for r in first.rows}
    assert statuses == {"broken": "pending", "large_reducesum": "pending", "overflow_island": "passed"}
    before = _mtimes(out, ["overflow_island"])
    second = run_batch(root, out, keep, executor=InlineExecutor())
    assert second.skipped == ["overflow_island"] and sorted(second.ran) == ["broken", "large_reducesum"]
    assert _mtimes(out, ["overflow_island"]) == before

    # A run cut off mid-search (entry says running, no report yet) continues from its checkpoint:
    # the capture is reused, not made again.
    run_dir = out / "large_reducesum"
    entry = json.loads((run_dir / ENTRY).read_text())
    entry["row"] = {"model": "large_reducesum", "status": "running"}
    (run_dir / ENTRY).write_text(json.dumps(entry))
    (run_dir / "report.json").unlink()

    def no_capture(*a, **k):
        raise AssertionError("captured again instead of resuming")

    monkeypatch.setattr("precision_doctor.pipeline.diagnose.capture_and_analyse", no_capture)
    third = run_batch(root, out, keep, executor=InlineExecutor())
    assert sorted(third.ran) == ["broken", "large_reducesum"]
    rep = json.loads((run_dir / "report.json").read_text())
    assert rep["passed"] and set(rep["answer"]["fallback_nodes"]) == expected["large_reducesum"]
    monkeypatch.undo()

    # A capture cut short (a truncated file) cannot be continued: the model starts over, once.
    (run_dir / ENTRY).write_text(json.dumps(entry))
    (run_dir / "report.json").unlink()
    (run_dir / "activations.h5").write_bytes(b"truncated")
    fourth = run_batch(root, out, keep, executor=InlineExecutor(), only=["large_reducesum"])
    assert fourth.ran == ["large_reducesum"] and {r.model: r.status for r in fourth.rows}["large_reducesum"] == "passed"


def test_cli_batch_with_two_worker_processes(zoo, tmp_path, run_cli):
    root, expected = zoo
    (root / "broken.onnx").unlink()
    out = tmp_path / "cli-out"
    code, stdout, stderr = run_cli("batch", root, "--jobs", "2", "--out", out)
    assert code == 0, stderr
    assert "Batch summary" in stdout and "2 diagnosed, 0 skipped" in stdout
    code, stdout, _ = run_cli("batch", root, "--jobs", "2", "--out", out)
    assert code == 0 and "0 diagnosed, 2 skipped" in stdout
    # A non-empty directory that is not a batch is refused (exit 2, one line).
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("mine")
    code, _, stderr = run_cli("batch", root, "--out", other)
    assert code == 2 and "not empty" in stderr


def test_a_batch_is_never_silent_while_a_model_runs(zoo, tmp_path, run_cli, monkeypatch):
    """Where stderr is no terminal, a line comes at least every EVERY_S seconds while a model is diagnosed (it takes
    minutes on a large model): the batch's heartbeat says how many models are done, still working. (EVERY_S made short
    here: the models are small.)"""
    import functools

    from precision_doctor.cli import batch as batch_cli
    from precision_doctor.cli.shared import PROGRESS_LINE, PlainProgress, heartbeat

    monkeypatch.setattr(PlainProgress, "EVERY_S", 0.05)
    monkeypatch.setattr(batch_cli, "heartbeat", functools.partial(heartbeat, every_s=0.01))  # beats a fast model gets too
    root, _ = zoo
    (root / "broken.onnx").unlink()
    code, _, stderr = run_cli("batch", root, "--out", tmp_path / "o")
    assert code == 0, stderr
    lines = [ln for ln in stderr.splitlines() if PROGRESS_LINE.match(ln)]
    assert any(ln.endswith("diagnosing 2 models, 1 job: large_reducesum, overflow_island") for ln in lines)
    assert any("diagnosing 2 models, 1 job: " in ln and "(still working" in ln for ln in lines)
    assert sum(": PASSED" in ln for ln in lines) == 2


def test_batch_error_exit_code(tmp_path, run_cli):
    root = tmp_path / "z"
    root.mkdir()
    (root / "bad.onnx").write_bytes(b"nope")
    code, stdout, _ = run_cli("batch", root, "--jobs", "0", "--out", tmp_path / "o")
    assert code == 1 and "0 diagnosed, 0 skipped (finished earlier), 1 error" in " ".join(stdout.split())


def _die_on_two(x: int, stop) -> int:
    if x == 2:
        os._exit(3)
    return x * 10


def test_local_executor_survives_a_dying_worker():
    done = list(LocalExecutor(2).map(_die_on_two, [1, 2, 3]))
    by = {d.item: d for d in done}
    assert sorted(by) == [1, 2, 3]
    assert by[1].result == 10 and by[3].result == 30
    assert by[2].error and "died" in by[2].error


def _gpu_of(x: int, stop) -> tuple[int, str | None, float, float]:
    t0 = time.time()
    time.sleep(0.4)
    return x, os.environ.get("CUDA_VISIBLE_DEVICES"), t0, time.time()


def test_local_workers_are_spread_over_the_gpus(monkeypatch):
    """With two GPUs, two jobs never compute on the same one at once (runs sharing a GPU fail, backends/gpu_turn.py);
    with one, nothing is set (they take turns on it); within the user's CUDA_VISIBLE_DEVICES where it is set."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    done = [d.result for d in LocalExecutor(2, gpus=2).map(_gpu_of, range(4))]
    assert {g for _, g, _, _ in done} == {"0", "1"}
    for a in done:
        for b in done:
            if a is not b and a[2] < b[3] and b[2] < a[3]:  # ran at the same time
                assert a[1] != b[1]
    assert {d.result[1] for d in LocalExecutor(2, gpus=1).map(_gpu_of, range(2))} == {None}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert {d.result[1] for d in LocalExecutor(2, gpus=8).map(_gpu_of, range(4))} == {"5", "7"}


def test_recipes_manifest_and_names(tmp_path):
    root = tmp_path
    onnx.save(planted.clean().model, str(root / "a b.onnx"))
    (root / "a b.json").write_text(json.dumps({
        "inputs": {"input_shapes": {"x": [2, 32]}, "val_range": {"*": [-1, 1]}}, "tolerance": {"atol": 0.5},
        "about": {"anything": "goes"},
    }))
    specs = discover(root, RunSpec(""))
    assert [s.name for s in specs] == ["a_b"]
    s = specs[0].spec
    assert s.inputs.input_shapes == ("x:[2,32]",) and s.inputs.val_ranges == ("[-1,1]",)
    assert s.tolerance.atol == 0.5 and s.tolerance.rtol == 1e-5
    assert s.search.margin == 0.1 and s.search.augment == 0  # the defaults
    assert s.key() == s.with_settings({"search.margin": 0.1}).key() != s.with_settings({"search.margin": 0.2}).key()
    assert s.backends.confirm_backend is None
    assert s.key() != s.with_settings({"backends.confirm_backend": "ort-cuda"}).key()
    (root / "a b.json").write_text(json.dumps({"tolerance": {"margin": 0.25}, "confirm_backend": "ort-cpu", "augment": 2}))
    s2 = discover(root, RunSpec("").with_settings({"search.margin": 0.1}))[0].spec
    assert s2.search.margin == 0.25 and s2.backends.confirm_backend == "ort-cpu"  # the recipe overrides
    assert s2.search.augment == 2 and s2.key() != s.key()
    (root / "a b.json").write_text(json.dumps({"augment": 99}))
    bad = discover(root, RunSpec(""))[0]
    assert bad.error and "augment must lie in [0, 32]" in bad.error  # named by its recipe key

    (root / "a b.json").write_text(json.dumps({"tolerance": {"atoll": 1}}))
    bad = discover(root, RunSpec(""))[0]
    assert bad.error and "atoll" in bad.error

    manifest = root / "m.yaml"
    manifest.write_text(
        "defaults: {tolerance: {atol: 0.1, rtol: 0.1}, max_evaluations: 5}\n"
        "models:\n  - path: a b.onnx\n    name: first\n  - {path: a b.onnx, name: first, precision: bf16}\n"
        "  - path: missing.onnx\n"
    )
    specs = discover(manifest, RunSpec(""))
    assert [s.name for s in specs] == ["first", "first-2", "missing"]
    assert specs[0].spec.tolerance.atol == 0.1 and specs[0].spec.search.max_evaluations == 5
    assert specs[1].spec.precision == "bf16"
    res = run_batch(manifest, tmp_path / "out", executor=InlineExecutor(), only=["missing"])
    row = {r.model: r for r in res.rows}["missing"]
    assert row.status == "error" and "not found" in row.message
    with pytest.raises(UserError, match="unknown model"):
        run_batch(manifest, tmp_path / "out", executor=InlineExecutor(), only=["nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no models"):
        discover(tmp_path / "empty", RunSpec(""))


def test_threads_per_worker():
    assert threads_per_worker(1) == 0
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert threads_per_worker(2) == max(1, n // 2)
    assert threads_per_worker(10_000) == 1


# -- a real interruption: the CLI in a subprocess, stopped by signals --------------------------------------


def _batch_cmd(root, out) -> list[str]:
    return [sys.executable, "-m", "precision_doctor", "batch", str(root), "--jobs", "1", "--out", str(out)]


def _status(out, name: str) -> str | None:
    try:
        return json.loads((out / name / ENTRY).read_text())["row"]["status"]
    except (OSError, ValueError, KeyError):
        return None


def _wait_until(cond, proc, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"the batch ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def _session_processes(sid: int) -> list[int]:
    """Processes still alive (not zombies) in session `sid` (Linux /proc)."""
    alive = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getsid(int(d.name)) == sid and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(int(d.name))
        except (OSError, IndexError):
            pass
    return alive


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process sessions and /proc")
def test_cli_batch_resumes_after_ctrl_c_and_sigkill(tmp_path):
    """Ctrl-C (SIGINT to the process group) once the first model is done; the next run is killed
    (SIGKILL of the batch process alone, its worker left running) while the second model runs; a
    third run finishes. Nothing finished is diagnosed again, and the summary lists every model."""
    root = tmp_path / "zoo"
    root.mkdir()
    names = ["cancellation", "deep_stack_one_bad", "overflow_island"]
    for name in names:
        case = planted.CASES[name]()
        onnx.save(case.model, str(root / f"{name}.onnx"))
        samples = 2 if name == names[0] else 64  # the later models take seconds, so the signals land mid-batch
        (root / f"{name}.json").write_text(json.dumps({
            "inputs": {"samples": samples, "seed": 0}, "tolerance": {"atol": case.atol, "rtol": case.rtol},
        }))
    out = tmp_path / "out"
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        # SIGINT's default action restored: a shell starts background jobs with SIGINT ignored, and an
        # ignored SIGINT would be inherited (Python then installs no KeyboardInterrupt handler).
        proc = subprocess.Popen(_batch_cmd(root, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        started.append(proc)
        return proc

    try:
        # 1. Ctrl-C as a terminal sends it: to the batch and its workers.
        first = start()
        _wait_until(lambda: _status(out, names[0]) == "passed", first, f"{names[0]} finished")
        os.killpg(first.pid, signal.SIGINT)
        try:
            _, err1 = first.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # as a user would, press Ctrl-C once more
            os.killpg(first.pid, signal.SIGINT)
            _, err1 = first.communicate(timeout=120)
        assert first.returncode == 130, err1[-2000:]
        assert "to continue where it stopped" in err1
        done1 = {n for n in names if _status(out, n) == "passed"}
        assert names[0] in done1 and len(done1) < len(names), done1
        kept = {n: os.stat(out / n / "report.json").st_mtime_ns for n in done1}

        # 2. SIGKILL of the batch process only, while a worker diagnoses the next model.
        second = start()
        todo = [n for n in names if n not in done1]
        _wait_until(lambda: (out / todo[0] / ENTRY).is_file(), second, f"{todo[0]} started")
        os.kill(second.pid, signal.SIGKILL)
        second.communicate(timeout=120)

        # 3. Started at once, while the orphaned worker may still be writing: it waits for it.
        third = subprocess.run(_batch_cmd(root, out), capture_output=True, text=True, timeout=600)
        assert third.returncode == 0, third.stderr[-2000:]
        assert f"not redone: {', '.join(sorted(done1))}" in third.stderr
        assert {n: os.stat(out / n / "report.json").st_mtime_ns for n in done1} == kept  # not diagnosed again
        summary = json.loads((out / "summary.json").read_text())["models"]
        assert [(r["model"], r["status"]) for r in summary] == [(n, "passed") for n in names]
        for n in names:
            rep = json.loads((out / n / "report.json").read_text())
            checkpoint = (out / n / "search.jsonl").read_text().splitlines()
            assert rep["passed"] and rep["search"]["evaluations"] == len(checkpoint)  # no evaluation repeated
            assert (out / n / "report.html").is_file()
        assert not _session_processes(second.pid), "a worker of the killed batch is still running"
    finally:
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_run_cut_off_after_its_report_counts_as_finished(tmp_path):
    """Cut off after report.json was written (report.html not yet, the entry still says running):
    the next batch does not diagnose it again; it renders the missing reports and records the row."""
    root = tmp_path / "zoo"
    root.mkdir()
    case = planted.cancellation()
    onnx.save(case.model, str(root / "m.onnx"))
    (root / "m.json").write_text(json.dumps({"inputs": {"samples": 2}, "tolerance": {"atol": case.atol, "rtol": case.rtol}}))
    out = tmp_path / "out"
    run_batch(root, out, executor=InlineExecutor())
    run_dir = out / "m"
    entry = json.loads((run_dir / ENTRY).read_text())
    row = entry["row"]
    assert row["status"] == "passed"
    for status in ("running", "interrupted"):
        (run_dir / ENTRY).write_text(json.dumps({**entry, "row": {"model": "m", "status": status}}))
        (run_dir / "report.html").unlink()
        (run_dir / "report.md").unlink()
        before = os.stat(run_dir / "report.json").st_mtime_ns
        again = run_batch(root, out, executor=InlineExecutor())
        assert again.skipped == ["m"] and again.ran == []
        assert os.stat(run_dir / "report.json").st_mtime_ns == before
        assert (run_dir / "report.html").is_file() and (run_dir / "report.md").is_file()
        fixed = json.loads((run_dir / ENTRY).read_text())["row"]
        assert {k: fixed[k] for k in ("status", "fallback_size", "evaluations")} == \
            {k: row[k] for k in ("status", "fallback_size", "evaluations")}
    # An interrupted report (Ctrl-C during the search) is not a finished run: it is resumed.
    rep = json.loads((run_dir / "report.json").read_text())
    (run_dir / "report.json").write_text(json.dumps({**rep, "status": "interrupted"}))
    (run_dir / ENTRY).write_text(json.dumps({**entry, "row": {"model": "m", "status": "interrupted"}}))
    assert run_batch(root, out, executor=InlineExecutor()).ran == ["m"]


def test_second_batch_on_the_same_out_is_refused(tmp_path):
    from precision_doctor.batch import jobs
    from precision_doctor.batch.jobs import LOCK_DIR, file_lock
    from precision_doctor.results.runlock import RunLock

    root = tmp_path / "zoo"
    root.mkdir()
    onnx.save(planted.clean().model, str(root / "m.onnx"))
    out = tmp_path / "out"
    out.mkdir()
    with RunLock(out, command="precision-doctor batch zoo"):  # as another batch process would
        with pytest.raises(UserError, match=f"another batch is using .*process {os.getpid()}"):
            run_batch(root, out, executor=InlineExecutor())
    assert run_batch(root, out, executor=InlineExecutor()).ran == ["m"]
    # A model whose lock is held (a worker of a killed batch still writing) is waited for, then
    # reported as an error rather than touched.
    with file_lock(out / LOCK_DIR / "m.lock", 0), pytest.MonkeyPatch.context() as mp:
        mp.setattr(jobs, "LOCK_WAIT_S", 0.3)
        res = run_batch(root, out, executor=InlineExecutor(), rerun=True)
    assert res.rows[0].status == "error" and "still diagnosing" in res.rows[0].message


def test_local_executor_reports_an_item_it_cannot_start():
    done = list(LocalExecutor(1).map(_die_on_two, [1, lambda: None, 3]))  # a lambda cannot be pickled
    assert [d.result for d in done if d.error is None] == [10, 30]
    bad = [d for d in done if d.error]
    assert len(bad) == 1 and "could not start a worker" in bad[0].error


def test_batch_with_confirm_backend_from_a_recipe(tmp_path):
    """A recipe's confirm_backend runs through the batch: the report has its confirm section and the
    summary row says what the confirmation did (its evaluations are not in the search's count)."""
    case = planted.cancellation()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    (tmp_path / "m.json").write_text(json.dumps({
        "inputs": {"samples": 4}, "tolerance": {"atol": case.atol, "rtol": case.rtol}, "confirm_backend": "ort-cpu",
    }))
    res = run_batch(tmp_path, tmp_path / "out", executor=InlineExecutor())
    row = res.rows[0]
    rep = json.loads((tmp_path / "out" / "m" / "report.json").read_text())
    assert row.status == "passed" and rep["checks"]["confirm"]["backend"] == "ort-cpu" and rep["checks"]["confirm"]["passed"]
    assert "Checked on ort-cpu" in row.message


def test_a_stop_records_a_killed_item_as_interrupted(tmp_path):
    """After a stop, an item whose worker was killed before it recorded "interrupted" (its entry still says running,
    its lock free) is recorded as interrupted; one whose worker still holds its lock is left alone."""
    from precision_doctor.batch.jobs import LOCK_DIR, ModelTask, earlier_row, file_lock, write_entry
    from precision_doctor.batch.orchestrate import _cut_off
    from precision_doctor.outcome import RowStatus, SummaryRow

    tasks = [ModelTask(n, str(tmp_path / n), RunSpec(str(tmp_path / f"{n}.onnx")), "key", "hash") for n in "ab"]
    for t in tasks:
        Path(t.run_dir).mkdir()
        write_entry(Path(t.run_dir), t, SummaryRow(t.name, RowStatus.RUNNING))
    with file_lock(tmp_path / LOCK_DIR / "b.lock", 0) as held:  # b's worker is still alive
        assert held
        rows = _cut_off(tmp_path, tasks)
    assert {n: r.status for n, r in rows.items()} == {"a": RowStatus.INTERRUPTED}
    assert earlier_row(tmp_path / "a").status == RowStatus.INTERRUPTED
    assert earlier_row(tmp_path / "b").status == RowStatus.RUNNING
