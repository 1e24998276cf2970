"""One run at a time on a GPU (backends/gpu_turn.py): a second run waits for the first's lock, says whose it is, can
be stopped while it waits, and gets the GPU as soon as the holder ends, also when the holder was killed."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time

import pytest

from precision_doctor.backends import gpu_turn
from precision_doctor.control import PhaseEvent, Stopped, StopToken


def test_a_second_run_waits_for_the_first_and_names_it(tmp_path):
    lock = gpu_turn.lock_path(tmp_path)
    held, released = threading.Event(), []

    def first():
        with gpu_turn.gpu_turn(lock, what="writing runs/a"):
            held.set()
            time.sleep(1.0)
            released.append(time.monotonic())

    t = threading.Thread(target=first)
    t.start()
    held.wait(5)
    events = []
    with gpu_turn.gpu_turn(lock, events.append, what="writing runs/b"):
        got = time.monotonic()
        assert "writing runs/b" in lock.read_text()
    t.join()
    assert released and got >= released[0], "the second run computed while the first held the GPU"
    assert len(events) == 1 and isinstance(events[0], PhaseEvent) and events[0].phase == "gpu"
    assert "waiting for the GPU: precision-doctor pid" in events[0].detail and "writing runs/a" in events[0].detail
    assert lock.read_text() == "", "the holder's name goes with its turn"


def test_a_run_waiting_for_the_gpu_can_be_stopped(tmp_path):
    lock = gpu_turn.lock_path(tmp_path)
    stop = StopToken()
    with gpu_turn.gpu_turn(lock):
        threading.Timer(0.6, stop.stop).start()
        t0 = time.monotonic()
        with pytest.raises(Stopped), gpu_turn.gpu_turn(lock, stop=stop):
            pass
        assert time.monotonic() - t0 < 5


def test_a_killed_holder_leaves_the_gpu_free(tmp_path):
    lock = gpu_turn.lock_path(tmp_path)
    code = (f"import time; from pathlib import Path; from precision_doctor.backends.gpu_turn import gpu_turn\n"
            f"with gpu_turn(Path({str(lock)!r})):\n    print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        stop = StopToken()
        threading.Timer(1.5, stop.stop).start()
        with pytest.raises(Stopped), gpu_turn.gpu_turn(lock, stop=stop):  # held by the live process
            pass
        proc.kill()
        proc.wait(10)
        t0 = time.monotonic()
        with gpu_turn.gpu_turn(lock):
            assert time.monotonic() - t0 < 2
    finally:
        proc.kill()


def test_the_lock_is_the_visible_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4")
    assert gpu_turn.lock_path(tmp_path).name == "precision-doctor-gpu-3.lock"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f2a/x")
    assert gpu_turn.lock_path(tmp_path).name == "precision-doctor-gpu-GPU-8f2a_x.lock"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_turn.lock_path(tmp_path).name == "precision-doctor-gpu-0.lock"


def test_runs_without_a_gpu_take_no_turn(monkeypatch):
    from precision_doctor.backends import registry

    monkeypatch.setattr(registry, "cuda_machine", lambda: False)
    assert not gpu_turn.uses_gpu("auto", None, "auto")
    monkeypatch.setattr(registry, "cuda_machine", lambda: True)
    assert gpu_turn.uses_gpu("emulate", None, "auto")  # the capture computes there
    assert not gpu_turn.uses_gpu("emulate", None, "cpu")
    assert gpu_turn.uses_gpu(None, None, "auto") and not gpu_turn.uses_gpu(None, None, "cpu")  # a compare: its capture
    assert gpu_turn.uses_gpu("ort-cuda", None, "cpu")


def test_a_compare_on_the_cpu_takes_no_turn(monkeypatch, tmp_path):
    """`compare` runs only its capture: with --capture-device cpu it never waits for the GPU, whatever
    `--backend` (which compare does not take) says."""
    from precision_doctor import api
    from precision_doctor.backends import registry
    from precision_doctor.spec import RunSpec

    monkeypatch.setattr(registry, "cuda_machine", lambda: True)
    spec = RunSpec(model="m.onnx").with_settings({"capture.device": "cpu"})
    assert gpu_turn.uses_gpu(spec.backends.backend, None, "cpu")  # a diagnosis would confirm on the GPU
    assert isinstance(api._gpu_turn(spec, None, None, tmp_path, capture_only=True), contextlib.nullcontext)
