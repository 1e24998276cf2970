"""The statistics summed on several threads: the same numbers to the last bit, errors raised, order kept."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from precision_doctor.graph.formats import FP16
from precision_doctor.measure.accumulate import StepAdder, stats_threads
from precision_doctor.measure.stats import TensorAccumulator


def _sums(threads: int, steps: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]]) -> list:
    accs = [TensorAccumulator(FP16, lowp=True, local=True, absmax=True) for _ in steps[0]]
    with StepAdder(threads) as adder:
        for step in steps:
            adder.run([(r.size, partial(a.add, r, lo, lc)) for a, (r, lo, lc) in zip(accs, step)])
    return [a.result() for a in accs]


def test_threads_give_the_same_statistics_as_one():
    rng = np.random.default_rng(7)
    steps = []
    for _ in range(3):  # samples, in order: each tensor's sums depend on it
        step = []
        for n in (50_000, 3, 200_000, 1_000):
            r = rng.standard_normal(n).astype(np.float32) * 300
            step.append((r, (r * (1 + rng.standard_normal(n) * 1e-3)).astype(np.float32),
                         r.astype(np.float16).astype(np.float32)))
        steps.append(step)
    assert _sums(4, steps) == _sums(1, steps)


def test_an_error_in_a_step_reaches_the_caller():
    def boom():
        raise ValueError("bad tensor")

    with pytest.raises(ValueError, match="bad tensor"), StepAdder(2) as adder:
        adder.run([(1, lambda: None), (2, boom)])


def test_the_threads_follow_a_batch_workers_share(monkeypatch):
    monkeypatch.setenv("PRECISION_DOCTOR_ORT_THREADS", "3")
    assert stats_threads() == 3
    monkeypatch.delenv("PRECISION_DOCTOR_ORT_THREADS")
    assert 1 <= stats_threads() <= 16


def test_chunks_of_every_path_agree(monkeypatch):
    """A tensor longer than a chunk, NaN and Inf in one run and in the reference of some chunks, every statistic of
    the three runs and the rounding as `_Acc` gives them from the raw arrays (the same chunks): a prepared chunk's
    reference is not overwritten by another run's masked path."""
    from precision_doctor.measure import stats

    monkeypatch.setattr(stats, "CHUNK", 16)
    rng = np.random.default_rng(3)
    ref = (rng.uniform(1, 2, 100) * 100).astype(np.float32)
    ref[1] = 7e4  # beyond FP16's range
    ref[21] = 1e-3  # the largest relative error, just after a NaN of the low-precision run (its chunk's masked path)
    lowp = ref * np.float32(1.001)
    local = ref + rng.standard_normal(100).astype(np.float32) * 1e-2
    lowp[20], lowp[70] = np.nan, np.inf
    bad_ref = ref.copy()
    bad_ref[40] = np.inf
    for r in (ref, bad_ref):
        acc = TensorAccumulator(FP16, lowp=True, local=True, absmax=True)
        acc.add(r, lowp, local)
        want = []
        for out in (lowp, local, FP16.round(r)):
            a = stats._Acc(FP16)
            a.add(out, r)
            want.append(a.result())
        got = acc.result()
        assert [repr(got.lowp), repr(got.local), repr(got.rounding)] == [repr(w) for w in want]
        assert got.absmax == float(np.abs(r[np.isfinite(r)]).max())


def test_a_large_tensors_chunks_summed_on_threads_give_the_same_bits(monkeypatch):
    """A tensor of PARALLEL_CHUNKS chunks or more is summed a chunk per thread and merged in order: the same
    statistics, to the last bit, as its chunks one after the other (every role; runs with NaN and inf; references
    with NaN, inf, values beyond FP16's range and below its normals; a last chunk shorter than the others; several
    samples; a low-precision value of another shape in one of them)."""
    from concurrent.futures import ThreadPoolExecutor

    from precision_doctor.measure import stats

    rng = np.random.default_rng(11)
    n = stats.CHUNK * stats.PARALLEL_CHUNKS + 12_345
    samples = []
    for k in range(4):
        r = (rng.standard_normal(n) * 400).astype(np.float32)
        r[rng.integers(0, n, 7)] = 0.0
        r[rng.integers(0, n, 9)] = 7e4  # beyond FP16's 65504
        r[rng.integers(0, n, 9)] = 3e-6  # below FP16's smallest normal
        if k == 3:
            r[rng.integers(0, n, 3)] = np.nan
            r[rng.integers(0, n, 3)] = -np.inf
        lo = (r * (1 + rng.standard_normal(n) * 1e-3)).astype(np.float32)
        lo[rng.integers(0, n, 5)] = np.inf if k % 2 else np.nan
        with np.errstate(over="ignore"):
            lc = r.astype(np.float16).astype(np.float32)  # FP16's own overflow: inf where r is 7e4
        samples.append((r, lo if k != 1 else lo[:-1], lc))  # sample 1: a low-precision value of another shape

    def run(pool, first: int = 0) -> str:
        monkeypatch.setattr(stats, "_chunk_pool", lambda: pool)
        acc = TensorAccumulator(FP16, lowp=True, local=True, absmax=True)
        for r, lo, lc in samples[first:]:
            acc.add(r, lo, lc)
        return repr(acc.result().to_json()) + repr([vars(a) for a in (acc.lowp, acc.local, acc.rounding)])

    with ThreadPoolExecutor(3) as pool:
        for first in (0, 2):  # from sample 2: no shape mismatch sets the non-finite flag before the chunks do
            assert run(pool, first) == run(None, first)
