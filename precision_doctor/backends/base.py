"""The backend protocol that the oracle talks to."""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

Feeds = Mapping[str, np.ndarray]

class Runner(Protocol):
    """Runs one prepared configuration."""

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...


class Backend(Protocol):
    """Turns a fallback set into a runner. `name` appears in reports; what a backend may do is its registry entry's
    (`backends.registry.info(name)`: on a GPU, check-only, knobs). `close()` releases what the backend holds
    (sessions, engines, temporary files); whoever made a backend closes it (an oracle closes the backend it was
    given)."""

    name: str
    precision: str

    def prepare(self, fallback: frozenset[str]) -> Runner: ...

    def close(self) -> None: ...


_ACTIVE: weakref.WeakSet[SessionHolder] = weakref.WeakSet()  # holders activated and not yet deactivated


def active_holders() -> list[SessionHolder]:
    """The session holders of this process that are active (activated, not yet closed)."""
    return list(_ACTIVE)


class SessionHolder:
    """What holds ONNX Runtime sessions (the ORT backends, the FP32 reference runner), with polygraphy's runner
    lifecycle (polygraphy/backend/base/runner.py's BaseRunner): `activate()` once its sessions are open,
    `deactivate()` releases them, `is_active` says which, and one garbage-collected while still active warns
    (a `ResourceWarning`, Python's warning for a file never closed: shown by `python -X dev`, `-W default` and
    tests that ask), so a leaked session is noticed. Here the constructor opens the sessions and activates (that is
    where a bad model or a missing CUDA provider is reported), `close()` and the end of a `with` block deactivate,
    and deactivating twice is silent (an oracle and the run that made its backend both close it). Subclasses drop
    their sessions in `release()`."""

    name: str = "session holder"
    is_active: bool = False

    def activate(self) -> None:
        """Mark the sessions open (the constructor calls it once they are)."""
        self.is_active = True
        _ACTIVE.add(self)

    def deactivate(self) -> None:
        """Release the sessions (once; later calls do nothing)."""
        if self.is_active:
            self.is_active = False
            _ACTIVE.discard(self)
            self.release()

    def release(self) -> None:
        """Drop the sessions this holder keeps."""

    def pause(self) -> None:
        """Drop the sessions that the holder can make again when next needed, while others need the memory (a large
        model's capture); by default none."""

    def close(self) -> None:
        self.deactivate()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if self.is_active and not sys.is_finalizing():  # not run at all at times (interpreter exit); when run, a leak
            warnings.warn(f"{type(self).__name__} '{self.name}' was garbage-collected while active: its ONNX Runtime "
                          "sessions were never closed (close() it or use it in a `with` block)", ResourceWarning,
                          stacklevel=2, source=self)
