"""The backend protocol that the oracle talks to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

Feeds = Mapping[str, np.ndarray]

CHECK_ONLY = ("ort-cpu",)  # its FP16 verdicts are not FP16's (backends/ort.py): it may check an answer, never shrink it


def check_only(name: str) -> bool:
    """Whether the backend called `name` (as it names itself: OrtBackend.name; a report's `confirm.backend`) may
    only check an answer: add nodes to a failing one (more FP32 is the safe direction), never remove one, never
    certify it."""
    return name in CHECK_ONLY


class Runner(Protocol):
    """Runs one prepared configuration."""

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...


class Backend(Protocol):
    """Turns a fallback set into a runner. `name` appears in reports. `close()` releases what the
    backend holds (sessions, engines, temporary files); whoever made a backend closes it (an oracle
    closes the backend it was given)."""

    name: str
    precision: str

    def prepare(self, fallback: frozenset[str]) -> Runner: ...

    def close(self) -> None: ...


class ClosingBackend:
    """Mixin: a backend as a context manager (`with EmulateBackend(...) as b:` closes it at the end)."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
