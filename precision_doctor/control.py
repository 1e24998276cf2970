"""Per-run control: a StopToken that stops one run, and the typed progress events a run reports.

A run checks its token at safe points (each oracle evaluation, each capture run, each batch item) and
raises `Stopped` there; the search then reports the best passing set found so far. Anything may stop
a token: the CLI's SIGINT handler (`sigint_stops`), a service thread, a batch worker whose parent died.

Ctrl-C is not lost: CPython drops a KeyboardInterrupt raised while it runs a weakref callback or a
`__del__` (it prints "Exception ignored in ..." and goes on), and that is where SIGINT often lands
right after a long ONNX Runtime call. The handler installed by `sigint_stops` stops the token as well
as raising, so the next safe point raises again; whoever acts on the stop calls `handled()`.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass


class Stopped(KeyboardInterrupt):
    """A run was asked to stop. A KeyboardInterrupt, so that a stop and a Ctrl-C are handled alike
    (the search reports its best set so far, the CLI exits with 130)."""


class StopToken:
    """Asks one run to stop. Thread-safe: `stop()` from anywhere, `check()` at the run's safe points."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops = 0  # stop() calls
        self._handled = 0  # of which acted on
        self._reason: str | None = None

    def stop(self, reason: str = "interrupted") -> None:
        with self._lock:
            self._reason = reason
            self._stops += 1

    @property
    def stopped(self) -> bool:
        """Whether the run was ever asked to stop (stays True once it was)."""
        return self._stops > 0

    @property
    def reason(self) -> str | None:
        return self._reason

    def check(self) -> None:
        """Raise `Stopped` if a stop was asked for and not acted on yet."""
        if self._stops > self._handled:
            raise Stopped(self._reason or "interrupted")

    def handled(self) -> None:
        """The stop was acted on (the search ended and reports what it found): `check()` passes again until
        the next `stop()`, so the report can still be written; a second Ctrl-C stops that too."""
        with self._lock:
            self._handled = self._stops


def check(stop: StopToken | None) -> None:
    """`stop.check()`, for code whose token is optional."""
    if stop is not None:
        stop.check()


@dataclass(frozen=True)
class PhaseEvent:
    """The run entered a phase: load, capture, reference, search, validate, confirm, artifacts."""

    phase: str


@dataclass(frozen=True)
class LoadedEvent:
    """The model and samples are loaded (`renamed_nodes`: nodes that had no name, a duplicate one or an unsafe
    one; `unsafe_names`: (new name, old name escaped) of those whose names could not be written safely)."""

    model: str
    nodes: int
    renamed_nodes: tuple[str, ...]
    samples: int
    held_out: int
    unsafe_names: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CaptureEvent:
    """`done` of `total` tensors (or nodes) of a capture stage (reference, lowp, local, fixed) are written."""

    stage: str
    done: int
    total: int


@dataclass(frozen=True)
class CaptureSizeEvent:
    """The capture about to start will write about `nbytes` into `path` (activations.h5) on `samples` samples,
    with `free` bytes free there; `keep`: what the run keeps of it once it is done (`capture.keep`; compare keeps
    all). Sent only for a large one (`pipeline.capture_size.LARGE_BYTES`)."""

    path: str
    nbytes: int
    samples: int
    free: int
    keep: str


@dataclass(frozen=True)
class EvaluationEvent:
    """One evaluation of the search (or of the confirmation): its step, phase, set size and verdict, and
    the size of the smallest passing set so far (None: none yet)."""

    step: int
    phase: str
    size: int
    passed: bool
    best_size: int | None


ProgressEvent = PhaseEvent | LoadedEvent | CaptureEvent | CaptureSizeEvent | EvaluationEvent
ProgressSink = Callable[[ProgressEvent], None]


def notify(sink: ProgressSink | None, event: ProgressEvent) -> None:
    if sink is not None:
        sink(event)


@contextlib.contextmanager
def sigint_stops(token: StopToken) -> Iterator[None]:
    """While inside: SIGINT stops `token` and raises `Stopped` (so a long ONNX Runtime call is cut short),
    and CPython's "Exception ignored" note for a Ctrl-C it swallowed is not shown (the next safe point
    raises it again). Only in the main thread and where Python's default handler is in place (an ignored
    SIGINT stays ignored); the earlier handler and unraisable hook come back on exit."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def handler(signum, frame) -> None:
        token.stop("interrupted")
        raise Stopped("interrupted")

    default_hook = sys.unraisablehook

    def unraisable(info) -> None:
        if not (isinstance(info.exc_value, KeyboardInterrupt) and token.stopped):
            default_hook(info)

    signal.signal(signal.SIGINT, handler)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = default_hook
