"""One run at a time on a GPU: a run that computes on one (its capture, search or confirmation on ONNX Runtime's CUDA
provider) holds the GPU's lock file for its whole length; another run waits for its turn, saying so.

Measured on an H200: two diagnoses on one GPU fail with cuDNN or cuBLAS errors (issue 33: 2-4 zoo models at once;
issue 35: whisper-base beside isnet-1024, twice, with 40 GB of the GPU free), whichever front end started them (a
batch's `--jobs`, the service's workers, two terminals). The lock is per GPU as CUDA_VISIBLE_DEVICES names it (a Ray
task that asked for a GPU sees its own), an `flock` the system drops when the process holding it dies."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from precision_doctor.control import PhaseEvent, ProgressSink, StopToken, check, notify

POLL_S = 0.5


def lock_path(root: Path | None = None) -> Path:
    """The lock file of the GPU this process computes on (the first of CUDA_VISIBLE_DEVICES, else device 0)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    name = re.sub(r"[^A-Za-z0-9_-]", "_", visible)[:64]
    return (root or Path(tempfile.gettempdir())) / f"precision-doctor-gpu-{name}.lock"


def uses_gpu(backend: str | None, confirm: str | None, capture_device: str) -> bool:
    """Whether a run with these settings computes on this machine's GPU (none without a working CUDA provider);
    `backend` None: the run only captures (a compare)."""
    from precision_doctor.backends.registry import cuda_machine, gpu_use

    if capture_device == "cpu" and (backend is None or gpu_use(backend, confirm) is None):
        return False
    return cuda_machine()


@contextlib.contextmanager
def gpu_turn(path: Path, progress: ProgressSink | None = None, stop: StopToken | None = None,
             what: str = "") -> Iterator[None]:
    """Hold the GPU's lock file `path` while the block runs, waiting (a phase event naming the holder, `stop` checked
    every POLL_S) while another run holds it. `what`: this run, written into the file for the next one to name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(OSError):  # another user's runs take turns on it too (umask aside)
            os.fchmod(fd, 0o666)
        writable = True
    except PermissionError:  # made by another user who could not open it to all: lock it, name no one
        fd, writable = os.open(path, os.O_RDONLY), False
    try:
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:
                    holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another run"
                    notify(progress, PhaseEvent("gpu", f"waiting for the GPU: {holder} computes on it (one run at "
                                                       f"a time: runs sharing a GPU fail); lock {path}"))
                    waiting = True
                check(stop)
                time.sleep(POLL_S)
        if writable:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"precision-doctor pid {os.getpid()}{', ' + what if what else ''}, since "
                          f"{time.strftime('%H:%M:%S')}".encode(), 0)
        try:
            yield
        finally:
            if writable:
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def run_turn(backend: str | None, confirm: str | None, capture_device: str, progress: ProgressSink | None = None,
             stop: StopToken | None = None, what: str = "") -> contextlib.AbstractContextManager:
    """The GPU's turn for a run with these settings where it computes on the GPU (`uses_gpu`), else nothing."""
    if not uses_gpu(backend, confirm, capture_device):
        return contextlib.nullcontext()
    return gpu_turn(lock_path(), progress, stop, what)
