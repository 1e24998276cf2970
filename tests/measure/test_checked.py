"""Runs checked one after another, a sample's check beside the next sample's run (measure/checked.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from precision_doctor.measure import checked
from precision_doctor.measure.checked import checked_runs
from precision_doctor.measure.tolerance import Tolerance

TOL = Tolerance(atol=1e-2, rtol=1e-2)


class Runner:
    """Outputs the sample's x plus the sample's planted error; counts its runs; can fail at one sample."""

    def __init__(self, fail_at: int | None = None):
        self.ran: list[int] = []
        self.fail_at = fail_at

    def run(self, feeds, outputs=None):
        i = int(feeds["i"])
        self.ran.append(i)
        if i == self.fail_at:
            raise RuntimeError(f"run {i} broke")
        return {"y": feeds["x"] + feeds["err"]}


def _samples(errors):
    rng = np.random.default_rng(0)
    samples = [{"i": i, "x": rng.standard_normal(1000).astype(np.float32), "err": np.float32(e)}
               for i, e in enumerate(errors)]
    refs = [{"y": s["x"]} for s in samples]
    return samples, refs


@pytest.fixture(params=[1, 3], ids=["one check beside a run", "three"])
def depth(request, monkeypatch):
    """Checks at once beside a run: one (a machine of 2-7 cores), three (more: up to 4 of 16 cores)."""
    monkeypatch.setattr(checked, "check_threads", lambda: request.param)
    return request.param


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [4, 2, 0, 1, 3]])
def test_overlap_gives_the_sequential_results_in_order(order, depth):
    samples, refs = _samples([0, 0.5, 0, 0.001, 0.2])
    plain = list(checked_runs(Runner(), samples, refs, order, TOL))
    beside = list(checked_runs(Runner(), samples, refs, order, TOL, overlap=True))
    assert [i for i, _ in beside] == [i for i, _ in plain] == order
    assert [c for _, c in beside] == [c for _, c in plain]
    assert [c["y"].passed for _, c in plain] == [[True, False, True, True, False][i] for i in order]


def test_a_stop_after_a_failure_costs_at_most_a_run_per_check_beside_it_and_hides_its_error(depth):
    samples, refs = _samples([0, 0.5, 0, 0, 0, 0])
    runner = Runner(fail_at=2)  # the run after the failing sample breaks: the consumer never asks for it
    seen = []
    runs = checked_runs(runner, samples, refs, range(6), TOL, overlap=True)
    for i, checks in runs:
        seen.append(i)
        if not checks["y"].passed:
            break
    runs.close()  # as the oracle's `contextlib.closing` does: nothing raised
    assert seen == [0, 1] and runner.ran[:2] == [0, 1] and len(runner.ran) <= 2 + depth  # run 2: if sample 1's check
    # was still running when it could start


def test_a_keyboard_interrupt_in_the_extra_run_is_never_lost(monkeypatch):
    """A Ctrl-C during the run beside a failing sample's check goes up at once, whether or not the consumer would
    have stopped there (sample 1's check is held until run 2 has begun: a check done earlier is handed over first
    and the consumer stops before run 2)."""
    run_2 = threading.Event()
    real = checked.check_all

    class Interrupted(Runner):
        def run(self, feeds, outputs=None):
            if int(feeds["i"]) == 2:
                run_2.set()
                raise KeyboardInterrupt
            return super().run(feeds, outputs)

    def held(outs, ref, tol):
        if ref is refs[1]:
            run_2.wait(10)
        return real(outs, ref, tol)

    monkeypatch.setattr(checked, "check_all", held)
    samples, refs = _samples([0, 0.5, 0, 0])
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for i, checks in checked_runs(Interrupted(), samples, refs, range(4), TOL, overlap=True):
            seen.append(i)
            if not checks["y"].passed:
                break
    assert seen == [0]


def test_an_error_is_raised_once_the_consumer_gets_that_far(depth):
    samples, refs = _samples([0, 0, 0, 0])
    seen = []
    with pytest.raises(RuntimeError, match="run 2 broke"):
        for i, _ in checked_runs(Runner(fail_at=2), samples, refs, range(4), TOL, overlap=True):
            seen.append(i)
    assert seen == [0, 1]


def test_before_run_is_called_before_each_run():
    samples, refs = _samples([0, 0, 0])
    calls, runner = [], Runner()

    def before():
        calls.append(len(runner.ran))
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        list(checked_runs(runner, samples, refs, range(3), TOL, overlap=True, before_run=before))
    assert calls == [0, 1, 2] and runner.ran == [0, 1]


@pytest.mark.parametrize("threads, run", [(1, 1), (3, 2)])
def test_checks_run_beside_the_next_runs(monkeypatch, threads, run):
    """Sample 0's check waits until sample `run`'s run has begun: with one check beside a run, the next sample's;
    with three, the one after (sample 1's check running meanwhile). Code that runs and checks in turn, or fewer
    checks at once, would wait forever (here: 60 s)."""
    monkeypatch.setattr(checked, "check_threads", lambda: threads)
    samples, refs = _samples([0, 0, 0, 0])
    began = threading.Event()
    waited = []
    real = checked.check_all

    class Signalling(Runner):
        def run(self, feeds, outputs=None):
            if int(feeds["i"]) == run:
                began.set()
            return super().run(feeds, outputs)

    def slow_check(outs, ref, tol):
        if ref is refs[0]:
            waited.append(began.wait(60))
        return real(outs, ref, tol)

    monkeypatch.setattr(checked, "check_all", slow_check)
    assert [i for i, _ in checked_runs(Signalling(), samples, refs, range(4), TOL, overlap=True)] == [0, 1, 2, 3]
    assert waited == [True]


def test_the_checks_take_a_quarter_of_the_cores_at_most_four_at_least_one(monkeypatch):
    for cores, threads in ((2, 1), (7, 1), (8, 2), (16, 4), (128, 4), (None, 1)):
        monkeypatch.setattr(checked.os, "cpu_count", lambda cores=cores: cores)
        assert checked.check_threads() == threads, cores
