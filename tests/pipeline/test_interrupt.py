"""Ctrl-C (or a StopToken) during the search leaves a valid partial report with the best passing set so
far; a Ctrl-C that CPython swallows (raised inside a weakref callback or __del__) is not lost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import onnx
import pytest
from service_helpers import slow_model

from precision_doctor import api, planted
from precision_doctor.batch.executors import InlineExecutor
from precision_doctor.batch.orchestrate import run_batch
from precision_doctor.control import EvaluationEvent, StopToken
from precision_doctor.data.workload import Workload
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.diagnose import run_diagnose
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.spec import RunSpec


@pytest.mark.parametrize("how", ["ctrl-c", "stop token"])
def test_interrupt_keeps_best_passing_set(tmp_path, how):
    """A KeyboardInterrupt raised inside an evaluation (Ctrl-C), or the run's token stopped from outside (as
    a service would): the search ends with the smallest passing set seen."""
    case = planted.three_defects()
    work = Workload(from_proto(case.model), case.samples(2))
    seen: list[EvaluationEvent] = []
    stop = StopToken()

    def progress(ev):
        if isinstance(ev, EvaluationEvent):
            seen.append(ev)
            if any(e.passed for e in seen) and len(seen) >= 4:
                if how == "ctrl-c":
                    raise KeyboardInterrupt
                stop.stop("stopped by the test")

    spec = RunSpec("", tolerance=Tolerance(case.atol, case.rtol))
    report = run_diagnose(work, [], validate_spec(spec), tmp_path, progress=progress, stop=stop)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert report.to_json() == rep and rep["status"] == "interrupted"
    best = min((e for e in seen if e.passed), key=lambda e: e.size)
    assert len(rep["answer"]["fallback_nodes"]) == best.size == seen[-1].best_size
    passing = [t for t in rep["search"]["trajectory"] if t["passed"] and t["size"] == best.size]
    assert sorted(rep["answer"]["fallback_nodes"]) == passing[0]["fallback"]
    assert rep["search"]["evaluations"] == len(seen)
    assert (tmp_path / "report.html").exists() and (tmp_path / "fixed.onnx").exists()
    assert len((tmp_path / "search.jsonl").read_text().splitlines()) == len(seen)


def test_swallowed_interrupt_is_raised_again_at_the_next_check():
    code = textwrap.dedent("""
        import gc, signal, sys
        from precision_doctor.control import StopToken, signals_stop

        token = StopToken()
        with signals_stop(token):
            class Lands:  # SIGINT arrives while CPython runs a finalizer: the KeyboardInterrupt is dropped
                def __del__(self):
                    signal.raise_signal(signal.SIGINT)

            Lands()
            gc.collect()
            print("went on after the swallowed interrupt", flush=True)
            try:
                token.check()
            except KeyboardInterrupt:
                print("raised again at check()")
                token.handled()
                token.check()  # handled: no second raise
                sys.exit(0)
            sys.exit(1)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "went on after the swallowed interrupt" in r.stdout and "raised again at check()" in r.stdout
    assert "Exception ignored" not in r.stderr  # CPython's note on the dropped interrupt is not shown


def test_oracle_checks_its_stop_token():
    from precision_doctor.backends.emulate import EmulateBackend
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.search import Oracle

    case = planted.cancellation()
    model = from_proto(case.model)
    samples = case.samples(1, 0)
    stop = StopToken()
    o = Oracle(EmulateBackend(model), samples, [ReferenceRunner(model).run(samples[0])],
               Tolerance(case.atol, case.rtol), stop=stop)
    stop.stop()
    with pytest.raises(KeyboardInterrupt):
        o.evaluate(())
    assert o.evaluations == 0 and stop.stopped
    stop.handled()
    assert o.evaluate(()).passed is False and o.evaluations == 1


def test_another_thread_stops_a_run_by_its_token(tmp_path):
    """As a service would: the run goes on in a worker thread, another thread stops it."""
    case = planted.three_defects()
    model = tmp_path / "m.onnx"
    onnx.save(case.model, str(model))
    spec = RunSpec(str(model), tolerance=Tolerance(case.atol, case.rtol))
    stop, searching, stopped, result = StopToken(), threading.Event(), threading.Event(), {}

    def progress(ev):  # the first evaluation waits until the other thread has stopped the run
        if isinstance(ev, EvaluationEvent):
            searching.set()
            stopped.wait(120)

    def run():
        result["report"] = api.diagnose(spec, tmp_path / "run", progress=progress, stop=stop)

    worker = threading.Thread(target=run)
    worker.start()
    assert searching.wait(120)
    stop.stop("cancelled by the service")
    stopped.set()
    worker.join(120)
    rep = result["report"]
    assert rep.status == "interrupted" and rep.search.evaluations >= 1
    assert (tmp_path / "run" / "report.json").is_file()


def test_a_stopped_token_ends_an_inline_batch_after_its_item(tmp_path):
    for name in ("cancellation", "clean"):
        onnx.save(planted.CASES[name]().model, str(tmp_path / f"{name}.onnx"))
        (tmp_path / f"{name}.json").write_text(json.dumps({"inputs": {"samples": 2}, "tolerance": {"atol": 1e-2, "rtol": 1e-2}}))
    stop, rows = StopToken(), []

    def on_done(row):
        rows.append(row)
        stop.stop("cancelled")

    with pytest.raises(KeyboardInterrupt):
        run_batch(tmp_path, tmp_path / "out", executor=InlineExecutor(), on_done=on_done, stop=stop)
    assert [r.model for r in rows] == ["cancellation"]
    again = run_batch(tmp_path, tmp_path / "out", executor=InlineExecutor())
    assert again.skipped == ["cancellation"] and again.ran == ["clean"]


def test_sigterm_stops_the_token_like_ctrl_c_and_the_handlers_come_back():
    """Inside `signals_stop` SIGTERM stops the token and raises (as SIGINT does); outside it the earlier handling is
    back; a handler someone else installed is left alone."""
    from precision_doctor.control import Stopped, signals_stop

    # a process's own SIGTERM handling as a fresh CLI process has it (an earlier test's ray.init installs its own)
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        token = StopToken()
        with pytest.raises(Stopped, match="SIGTERM"), signals_stop(token):
            signal.raise_signal(signal.SIGTERM)
        assert token.stopped and token.reason == "terminated (SIGTERM)"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)

    def theirs(signum, frame):
        seen.append(signum)

    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, theirs)
    try:
        with signals_stop(StopToken()):
            signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) is theirs
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_to_the_cli_checkpoints_and_says_how_to_resume(tmp_path):
    """`kill PID` (a CI job's timeout, `docker stop`) during a diagnose run ends it as Ctrl-C does: exit 130, the
    command that resumes it, and the resumed run repeats no evaluation."""
    pd = Path(sys.executable).parent / "precision-doctor"
    # a search of seconds (a planted stack's took 0.03 s: under load the signal came after it, during the report)
    slow_model(tmp_path / "m.onnx", blocks=24, iterations=4000)
    out = tmp_path / "run"
    cmd = [str(pd), "diagnose", "m.onnx", "--samples", "4", "--atol", "1e-2", "--rtol", "1e-2", "--strategy", "linear",
           "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((out / "search.jsonl").is_file() and (out / "search.jsonl").read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)  # the search has started
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    resume = f"precision-doctor diagnose m.onnx --resume --out {out}"
    assert f"to continue: {resume}" in stdout + stderr, stdout + stderr
    assert "interrupted by SIGTERM" in stdout or "interrupted;" in stderr  # in the search, or outside it
    assert "Traceback" not in stderr
    done = subprocess.run([str(pd), *resume.split()[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rep = json.loads((out / "report.json").read_text())
    logged = sum(len((out / f).read_text().splitlines()) for f in ("search.jsonl", "repair.jsonl") if (out / f).is_file())
    assert rep["status"] == "complete" and rep["search"]["evaluations"] == logged  # the checkpoints: every evaluation once


def test_a_stop_while_the_artifacts_are_made_still_writes_the_report(tmp_path):
    """A stop that lands after every check (the fixed capture is running, as a service job's cancel may) ends the
    run as interrupted with the answer found and its report written, not as a run with no report; resumed, it makes
    the artifacts and ends where an uninterrupted run ends."""
    from precision_doctor.control import PhaseEvent

    case = planted.three_defects()
    model = tmp_path / "m.onnx"
    onnx.save(case.model, str(model))
    spec = RunSpec(str(model), tolerance=Tolerance(case.atol, case.rtol))
    whole = api.diagnose(spec, tmp_path / "whole")
    assert whole.status == "complete" and whole.passed
    stop = StopToken()

    def sink(event):
        if isinstance(event, PhaseEvent) and event.phase == "artifacts":
            stop.stop("cancelled by the service")
    out = tmp_path / "run"
    try:
        cut = api.diagnose(spec, out, progress=sink, stop=stop)
    except KeyboardInterrupt:
        pytest.fail("the stop ended the run without a report")
    assert cut.status == "interrupted" and "artifacts" in cut.reason
    assert cut.answer.fallback_nodes == whole.answer.fallback_nodes
    assert json.loads((out / "report.json").read_text())["status"] == "interrupted"
    assert not (out / "fixed.onnx").exists()
    resumed = api.diagnose(spec, out, resume=True)
    assert resumed.status == "complete" and resumed.answer.fallback_nodes == whole.answer.fallback_nodes
    assert (out / "fixed.onnx").is_file()


def test_a_second_stop_while_the_artifacts_are_made_keeps_why_the_run_ended_first(tmp_path):
    """Stopped in the search, then again while the artifacts are made: the report keeps the search's reason (the
    answer is the best so far, not a settled one) and says the artifacts were stopped too; no fixed.onnx is left."""
    from precision_doctor.control import PhaseEvent

    case = planted.three_defects()
    model = tmp_path / "m.onnx"
    onnx.save(case.model, str(model))
    spec = RunSpec(str(model), tolerance=Tolerance(case.atol, case.rtol))
    stop, seen = StopToken(), []

    def sink(event):
        if isinstance(event, EvaluationEvent):
            seen.append(event)
            if len(seen) == 4:
                stop.stop()
        if isinstance(event, PhaseEvent) and event.phase == "artifacts" and stop.stopped:
            stop.stop()
    out = tmp_path / "run"
    try:
        cut = api.diagnose(spec, out, progress=sink, stop=stop)
    except KeyboardInterrupt:
        pytest.fail("the second stop ended the run without a report")
    assert cut.status == "interrupted" and cut.reason.startswith("interrupted by the user; "), cut.reason
    assert cut.reason.endswith("; stopped again while its artifacts were made"), cut.reason
    assert not (out / "fixed.onnx").exists() and (out / "report.json").is_file()
