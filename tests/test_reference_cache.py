"""references.h5 and the FP32 outputs computed when first read: `ReferenceSet`, and `ahead`, which computes the
next sample's outputs on a thread while the caller works on this one."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from precision_doctor.data.reference_cache import REFERENCES, ReferenceFile, ReferenceSet, computed_ahead


class Recorder:
    """A reference run that records which sample ran on which thread (and fails on one sample if asked)."""

    def __init__(self, fail: int | None = None):
        self.calls: list[tuple[int, str]] = []
        self.fail = fail

    def __call__(self, sample: dict) -> dict:
        i = int(sample["x"][0])
        self.calls.append((i, threading.current_thread().name))
        if i == self.fail:
            raise RuntimeError(f"run {i} failed")
        return {"y": sample["x"] * 2.0}


def _samples(n: int) -> list[dict]:
    return [{"x": np.full(3, i, np.float32)} for i in range(n)]


def test_ahead_gives_the_same_outputs_each_run_once_the_next_ones_on_a_thread(tmp_path):
    run, file = Recorder(), ReferenceFile(tmp_path / REFERENCES)
    refs = ReferenceSet(_samples(5), run, file)
    with refs.ahead(range(5)):
        got = [refs[i]["y"] for i in range(5)]
    assert [g.tolist() for g in got] == [[2.0 * i] * 3 for i in range(5)]
    assert sorted(i for i, _ in run.calls) == list(range(5))  # once each
    assert all(name.startswith("reference-ahead") for _, name in run.calls)  # the first too: started on entering
    file.close()
    again = ReferenceFile(tmp_path / REFERENCES)  # each was written to references.h5 on the way
    assert [again.read(f"search/{i:07d}")["y"].tolist() for i in range(5)] == [[2.0 * i] * 3 for i in range(5)]
    again.close()


def test_ahead_does_not_run_what_the_file_holds_and_a_block_left_early_drops_its_run(tmp_path):
    file = ReferenceFile(tmp_path / REFERENCES)
    first = ReferenceSet(_samples(4), Recorder(), file)
    first[0], first[1]  # noqa: B018  (computed and written)
    run = Recorder()
    refs = ReferenceSet(_samples(4), run, file)
    with refs.ahead(range(4)):
        assert refs[0]["y"].tolist() == [0.0] * 3  # read from the file; sample 1 is in the file too
        refs[2]  # noqa: B018  (starts sample 3's run ahead)
    assert sorted(i for i, _ in run.calls) in ([2], [2, 3])  # never 0 or 1; 3 maybe started, then dropped
    assert refs[3]["y"].tolist() == [6.0] * 3  # outside the block: computed here, on this thread
    assert run.calls[-1] == (3, threading.current_thread().name)
    file.close()


def test_a_run_that_failed_ahead_raises_when_its_sample_is_read():
    refs = ReferenceSet(_samples(3), Recorder(fail=1))
    with refs.ahead(range(3)):
        refs[0]  # noqa: B018
        with pytest.raises(RuntimeError, match="run 1 failed"):
            refs[1]  # noqa: B018


def test_computed_ahead_is_nothing_for_outputs_already_at_hand():
    outputs = [{"y": np.zeros(1)}]
    with computed_ahead(outputs, [0]):
        assert outputs[0]["y"].tolist() == [0.0]
