"""Per-run control: a StopToken that stops one run, and the typed progress events a run reports.

A run checks its token at safe points (each oracle evaluation, each capture run, each batch item) and
raises `Stopped` there; the search then reports the best passing set found so far. Anything may stop
a token: the CLI's SIGINT and SIGTERM handler (`signals_stop`), a service thread, a batch worker whose
parent died.

Ctrl-C is not lost: CPython drops a KeyboardInterrupt raised while it runs a weakref callback or a
`__del__` (it prints "Exception ignored in ..." and goes on), and that is where SIGINT often lands
right after a long ONNX Runtime call. The handler installed by `signals_stop` stops the token as well
as raising, so the next safe point raises again; whoever acts on the stop calls `handled()`.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from precision_doctor.measure.floor import RoundingFloor
    from precision_doctor.measure.tolerance import Tolerance


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
    def pending(self) -> bool:
        """Whether a stop was asked for and not acted on yet (`check()` raises)."""
        return self._stops > self._handled

    @property
    def reason(self) -> str | None:
        return self._reason

    def check(self) -> None:
        """Raise `Stopped` if a stop was asked for and not acted on yet."""
        if self.pending:
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
    """The run entered a phase: load, capture, reference, search, validate, confirm, knobs, other-runtime (the answer
    checked for the runtime it is not for), artifacts; `detail`: what it works on, in words ("8 samples"; may be
    empty)."""

    phase: str
    detail: str = ""


@dataclass(frozen=True)
class LoadedEvent:
    """The model and samples are loaded (`renamed_nodes`: nodes that had no name, a duplicate one or an unsafe
    one; `unsafe_names`: (new name, old name escaped) of those whose names could not be written safely;
    `repeated`: samples given twice, used once)."""

    model: str
    nodes: int
    renamed_nodes: tuple[str, ...]
    samples: int
    held_out: int
    unsafe_names: tuple[tuple[str, str], ...] = ()
    repeated: int = 0  # the user's samples that repeated an earlier one: used once


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
    """One evaluation of the search (or of the confirmation): its step, phase, set size and verdict, the size of
    the smallest passing set so far in its round (None: none yet) and its oracle's round (0: the first; each time
    samples join the working set, in the search's rounds and then in a repair's on the same oracle, a new one: an
    earlier round's sets are no longer known to pass)."""

    step: int
    phase: str
    size: int
    passed: bool
    best_size: int | None
    round: int = 0


@dataclass(frozen=True)
class RoundingFloorEvent:
    """Before the search: what rounding the FP32 reference outputs to the format alone uses of `tolerance`
    (`measure/floor.py`); where it is above 1 the nodes that write that output must stay in FP32."""

    floor: RoundingFloor
    tolerance: Tolerance


ProgressEvent = PhaseEvent | LoadedEvent | CaptureEvent | CaptureSizeEvent | EvaluationEvent | RoundingFloorEvent
ProgressSink = Callable[[ProgressEvent], None]


def notify(sink: ProgressSink | None, event: ProgressEvent) -> None:
    if sink is not None:
        sink(event)


# The signals that stop a run as Ctrl-C does, with the reason the token is given and the handling Python starts
# with (only that is replaced: an ignored signal stays ignored, a handler someone else installed stays theirs).
# SIGTERM is what `kill`, a CI job's timeout, `docker stop` and systemd send.
TERMINATED = "terminated (SIGTERM)"
STOP_SIGNALS: dict[signal.Signals, tuple[str, object]] = {
    signal.SIGINT: ("interrupted", signal.default_int_handler),
    signal.SIGTERM: (TERMINATED, signal.SIG_DFL),
}


def stopped_by(stop: StopToken | None) -> str:
    """Who stopped a run, for its report's reason: "by SIGTERM" or "by the user" (Ctrl-C, a token)."""
    return "by SIGTERM" if stop is not None and stop.reason == TERMINATED else "by the user"


@contextlib.contextmanager
def signals_stop(token: StopToken) -> Iterator[None]:
    """While inside: SIGINT (Ctrl-C) and SIGTERM stop `token` and raise `Stopped` (so a long ONNX Runtime call is cut
    short: the search checkpoints and reports its best set so far), and CPython's "Exception ignored" note for an
    interrupt it swallowed is not shown (the next safe point raises it again). Only in the main thread, and for
    each signal only where Python's own handling of it is in place (`STOP_SIGNALS`); the earlier handlers and
    unraisable hook come back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = [sig for sig, (_, default) in STOP_SIGNALS.items() if signal.getsignal(sig) is default]
    if not ours:
        yield
        return

    def handler(signum, frame) -> None:
        reason = STOP_SIGNALS[signal.Signals(signum)][0]
        token.stop(reason)
        raise Stopped(reason)

    default_hook = sys.unraisablehook

    def unraisable(info) -> None:
        if not (isinstance(info.exc_value, KeyboardInterrupt) and token.stopped):
            default_hook(info)

    previous = {sig: signal.signal(sig, handler) for sig in ours}
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)
        sys.unraisablehook = default_hook
