"""data/reference_cache.py: the FP32 references of many samples, computed when first asked for and kept in
references.h5; computed beside a block that needs none of them (the GPU's form trial)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from precision_doctor.data.reference_cache import ReferenceFile, ReferenceSet
from precision_doctor.errors import UserError


def _samples(n: int) -> list[dict[str, np.ndarray]]:
    return [{"x": np.full((2, 3), i, np.float32)} for i in range(n)]


def test_references_computed_beside_a_block_are_those_computed_alone(tmp_path):
    """While the block runs the set's outputs are computed on a thread and written to the file; afterwards each is
    what the reference gives, read back, not run again; the thread is gone when the block ends."""
    ran: list[int] = []
    block_ran = threading.Event()

    def run(sample):
        ran.append(int(sample["x"][0, 0]))
        return {"y": sample["x"] * 2}

    f = ReferenceFile(tmp_path / "references.h5")
    refs = ReferenceSet(_samples(12), run, f)
    with refs.computed_beside():
        for _ in range(3000):  # the block: here, waiting until the thread has computed every sample (30 s at most)
            if len(ran) == 12:
                break
            time.sleep(0.01)
        block_ran.set()
    assert block_ran.is_set() and ran == list(range(12))
    assert not any(t.name == "references-beside" for t in threading.enumerate())
    assert all(np.array_equal(refs[i]["y"], np.full((2, 3), 2 * i, np.float32)) for i in range(12))
    assert ran == list(range(12))  # read back from the file, not computed again
    f.close()


def test_the_thread_stops_with_the_block_and_leaves_the_rest_to_the_run(tmp_path):
    """A block that ends early: the thread stops after its current sample; the samples it did not reach are
    computed when the run asks for them, each once."""
    ran: list[int] = []

    second, release = threading.Event(), threading.Event()

    def run(sample):
        i = int(sample["x"][0, 0])
        ran.append(i)
        if i == 1:  # the thread's second sample lasts until after the block has ended
            second.set()
            assert release.wait(30)
        return {"y": sample["x"] + 1}

    f = ReferenceFile(tmp_path / "references.h5")
    refs = ReferenceSet(_samples(60), run, f)
    with refs.computed_beside():
        assert second.wait(30)
        threading.Timer(0.1, release.set).start()
    assert ran == [0, 1]  # stopped after its current sample
    assert [int(refs[i]["y"][0, 0]) for i in range(60)] == [i + 1 for i in range(60)]
    assert sorted(ran) == list(range(60))  # every sample once: the thread's ones were not run again
    f.close()


def test_a_sample_that_fails_beside_the_block_fails_where_the_run_asks_for_it(tmp_path):
    """The reference fails on sample 3: the block is not disturbed, the thread stops there, and the run's own
    request for sample 3 raises the error (samples before it are kept)."""

    def run(sample):
        if int(sample["x"][0, 0]) == 3:
            raise UserError("sample 3: the model refused it")
        return {"y": sample["x"]}

    f = ReferenceFile(tmp_path / "references.h5")
    refs = ReferenceSet(_samples(6), run, f)
    with refs.computed_beside():
        for _ in range(3000):  # until the thread stopped at sample 3
            if not any(t.name == "references-beside" for t in threading.enumerate()):
                break
            time.sleep(0.01)
    assert all(f"search/{i:07d}" in f.file for i in range(3)) and "search/0000003" not in f.file
    with pytest.raises(UserError, match="sample 3"):
        refs[3]
    f.close()


def test_no_reference_is_computed_while_the_block_holds_its_lock(tmp_path):
    """What the block times it times holding the lock it is given: the thread computes no sample meanwhile (it
    finishes the one it is on first), and goes on once the lock is released."""
    ran: list[int] = []

    def run(sample):
        ran.append(int(sample["x"][0, 0]))
        time.sleep(0.005)
        return {"y": sample["x"]}

    f = ReferenceFile(tmp_path / "references.h5")
    refs = ReferenceSet(_samples(100), run, f)
    with refs.computed_beside() as quiet:
        while not ran:
            time.sleep(0.001)
        with quiet:
            held = len(ran)
            time.sleep(0.1)
            assert len(ran) == held
        for _ in range(3000):
            if len(ran) > held:
                break
            time.sleep(0.01)
        assert len(ran) > held
    f.close()


def test_without_a_file_nothing_is_computed_beside(tmp_path):
    ran: list[int] = []
    refs = ReferenceSet(_samples(4), lambda s: ran.append(1) or {"y": s["x"]}, None)
    with refs.computed_beside():
        time.sleep(0.05)
    assert ran == []


def test_a_run_computes_its_references_while_the_gpu_times_its_forms(tmp_path, monkeypatch):
    """Where the search graph's forms are timed (on a GPU; forced here), the run's FP32 references are computed on a
    thread meanwhile, and the run's answer is the one it gives without."""
    from precision_doctor import api, planted
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.pipeline import context
    from precision_doctor.spec import InputSpec, RunSpec

    case = planted.CASES["three_defects"]()
    model = tmp_path / "m.onnx"
    model.write_bytes(case.model.SerializeToString())
    files = []
    for i, s in enumerate(case.samples(8)):
        files.append(str(tmp_path / f"s{i}.npz"))
        np.savez(files[-1], **s)
    spec = RunSpec(str(model), inputs=InputSpec(files=tuple(files))).with_settings(
        {"backends.backend": "emulate", "tolerance.atol": case.atol, "tolerance.rtol": case.rtol})
    alone = api.diagnose(spec, tmp_path / "alone")

    threads: list[str] = []
    real_run = ReferenceRunner.run

    def run(self, feeds, outputs=None):
        threads.append(threading.current_thread().name)
        return real_run(self, feeds, outputs)

    def choose_form(self, sample, progress, quiet):  # the trial: until the thread has computed a reference
        for _ in range(3000):
            if "references-beside" in threads:
                with quiet:  # what a trial times, it times holding this: no reference is computed meanwhile
                    held = len(threads)
                    time.sleep(0.05)
                    assert len(threads) == held
                return
            time.sleep(0.01)

    monkeypatch.setattr(ReferenceRunner, "run", run)
    monkeypatch.setattr(context.Backends, "forms_to_time", property(lambda self: True))
    monkeypatch.setattr(context.Backends, "choose_form", choose_form)
    beside = api.diagnose(spec, tmp_path / "beside")
    assert "references-beside" in threads
    assert beside.answer.fallback_nodes == alone.answer.fallback_nodes and beside.passed == alone.passed
